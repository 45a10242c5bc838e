-- The console's runs list opens on the most recent runs, newest first, paged by the key
-- (created_at, id): this index makes every page a range read, whatever the number of runs.
CREATE INDEX bz_runs_recent ON bz_runs (created_at DESC, id DESC);
