-- A model step's read sends again only what the server does not hold. The server keeps
-- the messages of conversations it has recently run and names, with the read, the
-- conversation and the last sequence number it holds. The read then answers whole only
-- the newer messages, and for the held ones what may have changed — which are pinned —
-- and what proves they are the same: the id of the last one. Writing 1,000 `jsonb`
-- contents out was half of the read's cost at 1,000 messages, and reading 1,000 rows at
-- all most of the rest.
--
-- Why that proves enough: a message's content never changes once written (only its
-- pinned flag does) and no message is deleted but with its conversation; sequence
-- numbers are taken under the conversation's row lock, so they commit in order and a
-- message numbered at or below the last held one was visible when the server read it.
-- Ids are random, so a conversation rebuilt under the same id (a restore) shows a
-- different last id, and the server reads it again in full.
--
-- Retrieval names the caller's rows in its own condition too (see below): before, a
-- step's search began from every user's messages matching its words and left the
-- others' to row-level security, so its cost grew with the other users' data.
--
-- Without the last two arguments, or with a conversation the run is not in, every
-- message comes whole, as before. The function stays STRICT (a NULL argument answers
-- no row): the server passes the nil id and 0 when it holds nothing.

DROP FUNCTION toolgate_step_inputs(text, uuid, integer);

CREATE FUNCTION toolgate_step_inputs(
    caller text, run uuid, max_retrieved integer,
    known_conversation uuid DEFAULT '00000000-0000-0000-0000-000000000000',
    known_through integer DEFAULT 0
)
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
    known_last_id uuid,
    known_pinned integer[],
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
               held.last_id, coalesce(held.pinned, '{}'),
               array(SELECT n.note FROM memory_notes n ORDER BY n.id),
               newest.through_seq, newest.summary, coalesce(newest.kept_out, '{}'),
               c.context_pipeline,
               array(SELECT o.text_content FROM messages o
                     WHERE btrim(request.words) <> ''
                       -- Row-level security keeps the search to the caller's rows; said
                       -- here too, so the search starts from them (index
                       -- messages_user_text_search) rather than from every user's
                       -- matching messages.
                       AND o.user_id = caller
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
        -- What the caller holds, when it names this run's conversation: the held range,
        -- its last message's id and its pinned messages (few, from a partial index).
        CROSS JOIN LATERAL (
            SELECT CASE WHEN r.conversation_id = known_conversation
                        THEN greatest(known_through, 0) ELSE 0 END AS through
        ) AS held_range
        CROSS JOIN LATERAL (
            SELECT held_range.through,
                   (SELECT k.id FROM messages k
                    WHERE k.conversation_id = r.conversation_id
                      AND k.seq = held_range.through) AS last_id,
                   array(SELECT p.seq FROM messages p
                         WHERE p.conversation_id = r.conversation_id AND p.pinned
                           AND p.seq <= held_range.through
                         ORDER BY p.seq) AS pinned
        ) AS held
        -- Aggregated in the order of a sorted subquery: one sort where eight
        -- `array_agg(... ORDER BY seq)` would each sort (the server checks the order).
        CROSS JOIN LATERAL (
            SELECT array_agg(m.id) AS ids, array_agg(m.seq) AS seqs,
                   array_agg(m.role) AS roles, array_agg(m.content) AS contents,
                   array_agg(m.model) AS models, array_agg(m.run_id) AS run_ids,
                   array_agg(m.pinned) AS pinned, array_agg(m.created_at) AS created_at
            FROM (SELECT * FROM messages o
                  WHERE o.conversation_id = r.conversation_id AND o.seq > held.through
                  ORDER BY o.seq) AS m
        ) AS history
        LEFT JOIN LATERAL (
            SELECT s.through_seq, s.summary, s.kept_out FROM conversation_summaries s
            WHERE s.conversation_id = r.conversation_id
            ORDER BY s.through_seq DESC, s.id DESC LIMIT 1
        ) AS newest ON true
        WHERE r.id = run;
END
$$;

REVOKE ALL ON FUNCTION toolgate_step_inputs(text, uuid, integer, uuid, integer) FROM PUBLIC;

-- The pinned messages of a conversation, for the read above: a handful among thousands.
-- Built inside the migration's transaction (not CONCURRENTLY), so on a large table it
-- holds back writes to messages while it builds, once, as the server starts.
CREATE INDEX messages_pinned ON messages (conversation_id, seq) WHERE pinned;
