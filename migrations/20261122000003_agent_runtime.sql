-- The agent runtime: run events for the stream, leases for runs in progress, summaries,
-- memory notes, per-conversation context pipelines, and text search over messages.

-- One active run per conversation.
CREATE UNIQUE INDEX agent_runs_one_active
    ON agent_runs (conversation_id) WHERE status IN ('running', 'waiting_for_input');
ALTER TABLE agent_runs
    ADD COLUMN user_message_id uuid,
    -- A running run whose lease has lapsed lost its server: it is marked failed.
    ADD COLUMN lease_expires_at timestamptz;

ALTER TABLE conversations ADD COLUMN context_pipeline jsonb;

ALTER TABLE messages ADD COLUMN text_content text NOT NULL DEFAULT '';
CREATE INDEX messages_conversation_seq ON messages (conversation_id, seq);
CREATE INDEX messages_text_search ON messages USING gin (to_tsvector('english', text_content));

CREATE TABLE run_events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    user_id          text NOT NULL,
    run_id           uuid,
    kind             text NOT NULL,
    data             jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_events_conversation ON run_events (conversation_id, id);

CREATE TABLE conversation_summaries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id  uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    user_id          text NOT NULL,
    through_seq      integer NOT NULL,
    summary          text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversation_summaries_latest ON conversation_summaries (conversation_id, through_seq DESC);

CREATE TABLE memory_notes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text NOT NULL,
    note        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_notes_user ON memory_notes (user_id, id);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['run_events', 'conversation_summaries', 'memory_notes']
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
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO toolgate_app, toolgate_worker;
