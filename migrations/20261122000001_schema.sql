-- Two roles the server switches to per transaction (SET LOCAL ROLE):
--   toolgate_app     every API request; row-level security applies to it.
--   toolgate_worker  background work (expiry, resuming runs); bypasses RLS on purpose.
-- The login role only needs to be a member of both.
DO $$
BEGIN
    BEGIN
        CREATE ROLE toolgate_app NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE toolgate_worker NOLOGIN BYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT toolgate_app, toolgate_worker TO %I', current_user);
EXCEPTION WHEN OTHERS THEN
    -- Already a member, or a superuser granting to itself: nothing to do.
    NULL;
END
$$;

CREATE TABLE conversations (
    id          uuid PRIMARY KEY,
    user_id     text NOT NULL,
    title       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_user_recent ON conversations (user_id, updated_at DESC);

CREATE TABLE messages (
    id               uuid PRIMARY KEY,
    conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    user_id          text NOT NULL,
    seq              integer NOT NULL,
    role             text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content          jsonb NOT NULL,
    model            text,
    run_id           uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (conversation_id, seq)
);

CREATE TABLE agent_runs (
    id               uuid PRIMARY KEY,
    conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    user_id          text NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('running', 'waiting_for_input', 'completed', 'failed', 'cancelled')),
    step             integer NOT NULL DEFAULT 0,
    model            text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX agent_runs_conversation ON agent_runs (conversation_id, created_at DESC);
CREATE INDEX agent_runs_unfinished ON agent_runs (status) WHERE status IN ('running', 'waiting_for_input');

CREATE TABLE tool_user_input_requests (
    id               uuid PRIMARY KEY,
    user_id          text NOT NULL,
    conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    run_id           uuid REFERENCES agent_runs (id) ON DELETE SET NULL,
    tool_name        text NOT NULL,
    tool_call_id     text NOT NULL,
    tool_args        jsonb NOT NULL DEFAULT '{}'::jsonb,
    reason           text NOT NULL,
    required_fields  jsonb NOT NULL,
    user_inputs      jsonb,
    save_for         text NOT NULL DEFAULT 'call' CHECK (save_for IN ('call', 'session', 'user')),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'completed', 'cancelled', 'expired')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,
    CONSTRAINT tool_user_input_requests_tool_call_id_key UNIQUE (tool_call_id)
);
-- The pending-cards query: one composite index, no standalone user_id index (the
-- planner would AND both bitmaps and run slower).
CREATE INDEX tool_user_input_requests_pending
    ON tool_user_input_requests (conversation_id, status, created_at);
CREATE INDEX tool_user_input_requests_expiry
    ON tool_user_input_requests (expires_at) WHERE status = 'pending';

-- conversation_id NULL means user-wide.
CREATE TABLE saved_tool_inputs (
    user_id          text NOT NULL,
    conversation_id  uuid REFERENCES conversations (id) ON DELETE CASCADE,
    name             text NOT NULL,
    value            jsonb NOT NULL,
    is_secret        boolean NOT NULL DEFAULT false,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT saved_tool_inputs_scope_name UNIQUE NULLS NOT DISTINCT (user_id, conversation_id, name)
);

CREATE TABLE tool_call_log (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id          text NOT NULL,
    conversation_id  uuid REFERENCES conversations (id) ON DELETE CASCADE,
    run_id           uuid,
    tool_name        text NOT NULL,
    tool_call_id     text NOT NULL,
    arguments        jsonb NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('success', 'failure', 'requires_user_input', 'rejected')),
    error            text,
    duration_ms      double precision NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_call_log_conversation ON tool_call_log (conversation_id, created_at);

-- Every user-owned table: RLS enabled and forced, one owner policy. A connection
-- setting once set reads back as '' rather than NULL, hence nullif.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['conversations', 'messages', 'agent_runs',
                             'tool_user_input_requests', 'saved_tool_inputs', 'tool_call_log']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY %I ON %I USING (user_id = nullif(current_setting(''toolgate.user_id'', true), '''')) '
            'WITH CHECK (user_id = nullif(current_setting(''toolgate.user_id'', true), ''''))',
            t || '_owner', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO toolgate_app, toolgate_worker', t);
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA public TO toolgate_app, toolgate_worker;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO toolgate_app, toolgate_worker;
