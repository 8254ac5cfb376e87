-- The gate: approval requests beside input requests, tool call ids unique per user,
-- remembered values bound to the tool they were given to (or an explicit shared key),
-- and what the tool-call log says about arguments it ignored.

-- One table for both kinds of request, so one lifecycle, one expiry and one RLS policy
-- serve them. A tool call may first ask for values and then for approval.
ALTER TABLE tool_user_input_requests
    DROP CONSTRAINT tool_user_input_requests_tool_call_id_key,
    DROP CONSTRAINT tool_user_input_requests_status_check,
    ADD COLUMN kind text NOT NULL DEFAULT 'input' CHECK (kind IN ('input', 'approval')),
    ADD COLUMN allowed_decisions jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN arguments_digest text,
    ADD COLUMN decision text CHECK (decision IN ('approve', 'edit', 'reject')),
    ADD COLUMN decision_message text,
    ADD COLUMN decided_by text,
    ADD CONSTRAINT tool_user_input_requests_status_check CHECK (status IN
        ('pending', 'completed', 'declined', 'approved', 'rejected', 'cancelled', 'expired', 'abandoned')),
    ADD CONSTRAINT tool_user_input_requests_call_key UNIQUE (user_id, tool_call_id, kind);
CREATE INDEX tool_user_input_requests_run
    ON tool_user_input_requests (run_id, status) WHERE run_id IS NOT NULL;

-- A remembered value belongs to (user, scope, tool, field), or to (user, scope, key)
-- when the field declares a memory_key. Rows from before have neither: the server
-- attributes them at start-up, when it knows the tools (see saved_inputs::attribute_legacy).
ALTER TABLE saved_tool_inputs
    DROP CONSTRAINT saved_tool_inputs_scope_name,
    ADD COLUMN tool_name text,
    ADD COLUMN memory_key text,
    ADD COLUMN label text,
    ADD COLUMN binding text GENERATED ALWAYS AS (
        CASE
            WHEN memory_key IS NOT NULL THEN 'key:' || memory_key
            WHEN tool_name IS NOT NULL THEN 'tool:' || tool_name || ':' || name
            ELSE 'legacy:' || name
        END) STORED,
    ADD CONSTRAINT saved_tool_inputs_binding UNIQUE NULLS NOT DISTINCT (user_id, conversation_id, binding);

ALTER TABLE tool_call_log
    DROP CONSTRAINT tool_call_log_outcome_check,
    ADD COLUMN ignored_arguments text[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT tool_call_log_outcome_check CHECK (outcome IN
        ('success', 'failure', 'requires_user_input', 'requires_approval', 'rejected'));
