-- What toolgate itself says on an approval card beside the reason (the reason is the
-- operator's words, or a caller's): values the tool's server may read as left out and
-- the defaults it may run with instead, defaults it fills in unseen. Kept apart, so a
-- server's property names quoted in it never read as the operator's words.
ALTER TABLE tool_user_input_requests ADD COLUMN note text;
