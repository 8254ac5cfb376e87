"""Schemathesis hooks for the API contract test (scripts/contract.sh).

A field definition has rules that span several of its properties or several fields:
names unique within a request, `visible_if` naming another field of the same request
and never forming a cycle, `min` not above `max`, a `default` that passes its own
field's checks, a `validation` pattern that is a valid regular expression of the
server's dialect. The OpenAPI document states them in prose (FieldSpec's description);
JSON Schema cannot, so a generator that follows the schema writes definitions that
break them and the server answers 422 naming the field and the rule.

This hook excuses exactly that answer: a schema-valid request refused with 422 where
every field error is one of those rules. Any other refusal of a schema-valid request,
and every other check, still fails the run.
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


def _breaks_only_cross_field_rules(response):
    try:
        fields = response.json()["error"]["fields"]
    except (ValueError, KeyError, TypeError):
        return False
    if not isinstance(fields, dict) or not fields:
        return False
    return all(
        isinstance(message, str) and any(rule in message for rule in CROSS_FIELD_RULES)
        for message in fields.values()
    )


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keeps every failure except a 422 that names only cross-field rules."""
    if isinstance(failure, RejectedPositiveData) and response.status_code == 422:
        return not _breaks_only_cross_field_rules(response)
    return True
