-- Each event's size (its data as JSON text), written with it, so a read of a
-- conversation's events can stop sending at a size: a stream catching up, or the
-- server reading for its streams, is sent about 4 MiB of events at most, not every row
-- up to its count. Counted as the server reads the data, not as stored: Postgres
-- compresses a repetitive text that the server still has to hold whole. A row written
-- without it (0: an older server during a rolling update) is counted from its data
-- when read.

ALTER TABLE run_events ADD COLUMN data_bytes integer NOT NULL DEFAULT 0;

-- Every table forces row-level security, so a login that owns the tables without
-- being a superuser would see no rows here: the sizes are written as the worker role,
-- which bypasses it.
SET LOCAL ROLE toolgate_worker;

UPDATE run_events SET data_bytes = octet_length(data::text);

RESET ROLE;
