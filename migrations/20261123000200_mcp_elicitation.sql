-- MCP: a server's elicitation is an input request of the user's, like any other, with
-- where it came from (`elicitation`). Either a live session waits for the answer, held
-- by one toolgate process (`held_by`; a process that stops without ending its requests
-- is noticed through `server_instances`: its heartbeat lapses), or the server asked
-- statelessly (protocol 2026-07-28 `input_required`) and `retry_state` carries what
-- retrying the call needs, so any process can answer it, also after a restart.
ALTER TABLE tool_user_input_requests
    DROP CONSTRAINT tool_user_input_requests_origin_check,
    ADD CONSTRAINT tool_user_input_requests_origin_check
        CHECK (origin IN ('api', 'executor', 'mcp')),
    ADD COLUMN elicitation jsonb,
    ADD COLUMN held_by uuid,
    ADD COLUMN retry_state jsonb,
    ADD CONSTRAINT tool_user_input_requests_mcp_source
        CHECK (origin <> 'mcp'
               OR (elicitation IS NOT NULL AND (held_by IS NOT NULL) <> (retry_state IS NOT NULL)));
CREATE INDEX tool_user_input_requests_held
    ON tool_user_input_requests (held_by) WHERE status = 'pending' AND held_by IS NOT NULL;

-- Not user-owned: one row per running toolgate process, for background work only.
CREATE TABLE server_instances (
    id            uuid PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON server_instances TO toolgate_worker;
