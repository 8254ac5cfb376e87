-- A key the client picks for each message it posts (`idempotency_key`), so sending the
-- same message again (the answer was lost on the way, or the user left the page while it
-- was sent and came back to send it again) answers with the message first posted
-- instead of posting it, and starting a run, twice. Unique within a conversation, which
-- belongs to one user, so one user's keys never collide with another's.
ALTER TABLE messages ADD COLUMN idempotency_key uuid;

CREATE UNIQUE INDEX messages_idempotency_key ON messages (conversation_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
