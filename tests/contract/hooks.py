"""Schemathesis hooks for the API contract test (scripts/contract.sh).

A field definition has rules that span several of its properties or several fields:
names unique within a request, `visible_if` naming another field of the same request
and never forming a cycle, `min` not above `max`, a `default` that passes its own
field's checks, a `validation` pattern that is a valid regular expression of the
server's dialect. The OpenAPI document states them in prose (FieldSpec's description);
JSON Schema cannot, so a generator that follows the schema writes definitions that
break them and the server answers 422 naming the field and the rule.

Two more rules are stated in the document and cannot be in a static schema: a value
submitted for a request is checked against that request's own field definitions
(`submit_response`, an `edit` decision), and a NUL character (U+0000) is refused
anywhere in a body, free-form JSON such as a tool's arguments included (Postgres
cannot store it; plain text properties carry it in their patterns).

The document also says an identifier may hold no invisible character above U+FFFF
(tags, variation selectors): a pattern cannot name those alike in ECMA's dialect and
Python's, so the identifiers' patterns list only the ones below, and the server answers
400 naming the identifier.

A message posted under an `idempotency_key` the conversation already holds for other
content is refused with 422 naming `idempotency_key` (the document says so): whether a
key is taken depends on what was posted before, which no schema can state, and the
generator sends one key with many bodies.

This hook excuses exactly those answers: a schema-valid request refused with 422 for one
of those rules only, or with 400 for an identifier holding such a character. Any other refusal of a schema-valid request, and every other check,
still fails the run.
"""

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData

# Error messages of the cross-field rules, as protocol/src/fields.rs words them.
CROSS_FIELD_RULES = (
    "duplicate field name",
    "visible_if names unknown field",
    "visible_if cannot name the field itself",
    "visible_if rules form a cycle",
    "visible_if chains may be at most",
    "is greater than max",
    "default is not valid:",
    "validation is not a valid regular expression",
)


# The server's words for a body holding NUL (named `body`, or the tool argument that
# holds it), and for values that break the request's own field definitions (the error
# names each field, in the request's terms).
NUL_REFUSED = "must not contain NUL (U+0000) characters"
VALUES_INVALID = "some values are not valid"
ANSWERS = ("submit_response", "submit_decision")


def _error(response):
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error if isinstance(error, dict) else None


# The server's word for an idempotency key already holding another message.
KEY_TAKEN = "this conversation holds another message posted under this key"


def _breaks_only_documented_rules(case, response):
    error = _error(response)
    if error is None:
        return False
    fields = error.get("fields")
    if not isinstance(fields, dict) or not fields:
        return False
    body = case.body if isinstance(case.body, dict) else {}
    if (
        set(fields) == {"idempotency_key"}
        and "idempotency_key" in body
        and str(fields["idempotency_key"]).startswith(KEY_TAKEN)
    ):
        return True
    if all(message == NUL_REFUSED for message in fields.values()):
        return True
    if error.get("message") == VALUES_INVALID and body.get("action") in ANSWERS:
        return True
    return all(
        isinstance(message, str) and any(rule in message for rule in CROSS_FIELD_RULES)
        for message in fields.values()
    )


# The server's word for an identifier holding an invisible character, and the invisible
# characters above U+FFFF it refuses (protocol/src/unseen.rs).
UNSEEN_REFUSED = "must not contain invisible or direction-changing characters"
UNSEEN_ABOVE_BMP = (
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def _unseen_above_bmp(text):
    return isinstance(text, str) and any(
        low <= ord(c) <= high for c in text for low, high in UNSEEN_ABOVE_BMP
    )


def _refuses_only_unseen_above_bmp(case, response):
    error = _error(response)
    fields = error.get("fields") if error else None
    if not isinstance(fields, dict) or not fields:
        return False
    body = case.body if isinstance(case.body, dict) else {}
    return all(
        message == UNSEEN_REFUSED and _unseen_above_bmp(body.get(name))
        for name, message in fields.items()
    )


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keeps every failure except a 422 for one of the rules above, or a 400 for an
    identifier holding an invisible character above U+FFFF."""
    if isinstance(failure, RejectedPositiveData) and response.status_code == 422:
        return not _breaks_only_documented_rules(case, response)
    if isinstance(failure, RejectedPositiveData) and response.status_code == 400:
        return not _refuses_only_unseen_above_bmp(case, response)
    return True
