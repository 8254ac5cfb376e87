-- What one model step reads, in one round trip: the run (is it still running, which
-- step, which message asked), the conversation's messages in order (column by column,
-- as arrays, so a single row carries the step's whole input in Postgres's binary
-- format; building JSON instead cost ten times as much), the caller's memory notes, the
-- newest summary, the conversation's context pipeline and, for retrieval, up to
-- `max_retrieved` texts of the caller's other conversations that match the run's request
-- (best first; the pipeline's own limit, read from the row, trims them). Like the
-- one-trip reads, it sets the caller's identity for its own implicit transaction, so
-- every table is read under row-level security as `caller` and nothing outlives the
-- statement. A run that is not the caller's answers no row. Only the server's own login
-- may call it.

CREATE FUNCTION toolgate_step_inputs(caller text, run uuid, max_retrieved integer)
RETURNS TABLE (
    conversation_id uuid,
    status text,
    step integer,
    user_message_id uuid,
    message_ids uuid[],
    message_seqs integer[],
    message_roles text[],
    message_contents jsonb[],
    message_models text[],
    message_run_ids uuid[],
    message_pinned boolean[],
    message_created_at timestamptz[],
    notes text[],
    summary_through_seq integer,
    summary text,
    summary_kept_out integer[],
    pipeline jsonb,
    retrieved text[]
)
LANGUAGE plpgsql VOLATILE STRICT
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM set_config('role', 'toolgate_app', true),
            set_config('toolgate.user_id', caller, true);
    RETURN QUERY
        SELECT r.conversation_id, r.status, r.step, r.user_message_id,
               coalesce(history.ids, '{}'), coalesce(history.seqs, '{}'),
               coalesce(history.roles, '{}'), coalesce(history.contents, '{}'),
               coalesce(history.models, '{}'), coalesce(history.run_ids, '{}'),
               coalesce(history.pinned, '{}'), coalesce(history.created_at, '{}'),
               array(SELECT n.note FROM memory_notes n ORDER BY n.id),
               newest.through_seq, newest.summary, coalesce(newest.kept_out, '{}'),
               c.context_pipeline,
               array(SELECT o.text_content FROM messages o
                     WHERE btrim(request.words) <> ''
                       AND o.conversation_id <> r.conversation_id
                       AND o.role IN ('user', 'assistant') AND o.text_content <> ''
                       AND to_tsvector('english', o.text_content)
                           @@ plainto_tsquery('english', request.words)
                     ORDER BY ts_rank(to_tsvector('english', o.text_content),
                                      plainto_tsquery('english', request.words)) DESC,
                              o.created_at DESC, o.id
                     LIMIT greatest(max_retrieved, 0))
        FROM agent_runs r
        JOIN conversations c ON c.id = r.conversation_id
        -- The request's words: the run's message, or the conversation's last user message.
        CROSS JOIN LATERAL (
            SELECT coalesce(
                (SELECT m.text_content FROM messages m
                 WHERE m.id = r.user_message_id AND m.conversation_id = r.conversation_id),
                (SELECT m.text_content FROM messages m
                 WHERE m.conversation_id = r.conversation_id AND m.role = 'user'
                 ORDER BY m.seq DESC LIMIT 1),
                '') AS words
        ) AS request
        -- Aggregated in the order of a sorted subquery: one sort where eight
        -- `array_agg(... ORDER BY seq)` would each sort (the server checks the order).
        CROSS JOIN LATERAL (
            SELECT array_agg(m.id) AS ids, array_agg(m.seq) AS seqs,
                   array_agg(m.role) AS roles, array_agg(m.content) AS contents,
                   array_agg(m.model) AS models, array_agg(m.run_id) AS run_ids,
                   array_agg(m.pinned) AS pinned, array_agg(m.created_at) AS created_at
            FROM (SELECT * FROM messages o
                  WHERE o.conversation_id = r.conversation_id ORDER BY o.seq) AS m
        ) AS history
        LEFT JOIN LATERAL (
            SELECT s.through_seq, s.summary, s.kept_out FROM conversation_summaries s
            WHERE s.conversation_id = r.conversation_id
            ORDER BY s.through_seq DESC, s.id DESC LIMIT 1
        ) AS newest ON true
        WHERE r.id = run;
END
$$;

REVOKE ALL ON FUNCTION toolgate_step_inputs(text, uuid, integer) FROM PUBLIC;
