-- A step's retrieval searches the caller's own messages. The full-text index was over
-- every user's messages, so a search for common words read every match in the table
-- before row-level security kept the caller's: with a million other users' messages
-- matching, one step's read took most of a second, whoever asked. The index now starts
-- from the user (btree_gin lets a GIN index hold the user id beside the words), so a
-- search costs what the caller's own messages cost. btree_gin ships with PostgreSQL and
-- is a trusted extension: the database's owner may create it.
--
-- Built inside the migration's transaction (not CONCURRENTLY), so on a large table it
-- holds back writes to messages while it builds, once, as the server starts.

CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE INDEX messages_user_text_search ON messages
    USING gin (user_id, to_tsvector('english', text_content));

DROP INDEX IF EXISTS messages_text_search;
