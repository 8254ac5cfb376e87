-- Schema upkeep. The UNIQUE (conversation_id, seq) constraint's own index already serves
-- every lookup the plain index did. (tool_user_input_requests.run_id is indexed by
-- tool_user_input_requests_run.)
DROP INDEX IF EXISTS messages_conversation_seq;

-- Pruning old events reads them by age; the run they belong to decides whether they may go.
CREATE INDEX run_events_created ON run_events (created_at);
