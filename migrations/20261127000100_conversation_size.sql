-- How much message content a conversation holds, kept as messages are appended
-- (`messages::append`, in the statement that already marks the conversation active),
-- and each message's own size. A user's new message is refused once a conversation
-- holds the most one may (TOOLGATE_MAX_CONVERSATION_MIB): a model step reads the
-- conversation's messages, and a conversation grown without bound by one user would
-- take the server's memory from every other user. A page of messages stops being
-- sent at a size by each message's.
--
-- The size counted is that of the content as JSON text, as the server reads it, not as
-- stored: Postgres compresses a repetitive text that the server still has to hold
-- whole. (jsonb's text puts a space after each `:` and `,`, which the server's count
-- does not: messages from before count a little large.) A message written without its
-- size (0: an older server during a rolling update) is counted from its content when a
-- page is read.

ALTER TABLE conversations ADD COLUMN content_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN content_bytes integer NOT NULL DEFAULT 0;

-- Every table forces row-level security, so a login that owns the tables without
-- being a superuser would see no rows here: the sizes are written as the worker role,
-- which bypasses it.
SET LOCAL ROLE toolgate_worker;

UPDATE messages SET content_bytes = octet_length(content::text);

UPDATE conversations c
SET content_bytes = sized.bytes
FROM (SELECT m.conversation_id, sum(m.content_bytes)::bigint AS bytes
      FROM messages m GROUP BY m.conversation_id) AS sized
WHERE sized.conversation_id = c.id;

RESET ROLE;
