-- Whether a request's outcome has reached its run (input_requests::holds_run, the
-- recovery sweep's settled_without_result, a late delivery's duplicate check) is asked
-- of the conversation's tool results written since the request. Without an index that
-- read every message of the conversation, under the conversation's lock, on every step
-- that waits and every delivery; this one reads only the tool results since then.
--
-- Built inside the migration's transaction (not CONCURRENTLY), so on a large table it
-- holds back writes to messages while it builds, once, as the server starts.

CREATE INDEX messages_tool_results ON messages (conversation_id, created_at)
    WHERE role = 'tool';
