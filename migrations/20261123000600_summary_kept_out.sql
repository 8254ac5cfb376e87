-- The messages a summary was not written from because they had to stay word for word
-- (pinned requests with their answers, the newest version of a keyed artefact). What
-- has to stay can change later (`/unpin`, a newer version of the artefact, a changed
-- tool), and a message that stops having to stay must then remain until a later
-- summary takes it in: it must not leave the context without one. Summaries written
-- before this column existed have no record, so for them only what must stay now stays.
ALTER TABLE conversation_summaries ADD COLUMN kept_out integer[] NOT NULL DEFAULT '{}';
