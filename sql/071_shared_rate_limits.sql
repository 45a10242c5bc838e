-- Request limits shared by every hub process and host (the agent-auth authorization limit).
--
-- One row per limited key: the times of the hits still inside the window (at most the limit, so
-- a few entries). A hit is counted by one INSERT ... ON CONFLICT DO UPDATE that keeps the hits
-- younger than the window and appends the new one only while fewer than the limit remain: the
-- row lock taken by the upsert serialises concurrent hits on a key, so none is lost and the
-- limit is exact, a sliding window as before, now for all workers together. A refused hit writes
-- nothing. Times are the database's clock, the same for every host.
--
-- The key is the limit's name and a digest of what it limits (client and address): no address
-- is kept in clear. A row whose last hit is older than its window is useless (expires_at) and is
-- deleted a few at a time by later hits.

CREATE TABLE bz_rate_limits (
    key        text PRIMARY KEY CHECK (char_length(key) <= 200),
    hits       timestamptz[] NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX bz_rate_limits_expires ON bz_rate_limits (expires_at);
