-- A message the user pins stays verbatim in the model's context: never trimmed or
-- summarised away.
ALTER TABLE messages ADD COLUMN pinned boolean NOT NULL DEFAULT false;
