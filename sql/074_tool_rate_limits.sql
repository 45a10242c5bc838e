-- Tool rate-limit policies (BUSINESS_SIDE.md §D): a tool gate and a provider gate, checked
-- before a call is dispatched or its approval is requested or consumed.
--
-- Providers: `rate_limit_per_min` is the provider gate (all its tools together, a 60-second
-- window; 0 = off). 120 is Core's default and is what every existing provider gets here.
-- `tool_rate_limits` is the operator's policy over the tools' ACC declarations (NULL = the
-- declarations as they are).
ALTER TABLE bz_tool_providers
    ADD COLUMN rate_limit_per_min integer NOT NULL DEFAULT 120 CHECK (rate_limit_per_min >= 0),
    ADD COLUMN tool_rate_limits jsonb;

-- A refused call's gate (`{level, count, window_sec, scope, source, retry_after_ms}`), kept with
-- its `rejected_before_dispatch` result so that a replay or receipt says the same.
ALTER TABLE bz_tool_invocations ADD COLUMN rate_limit jsonb;

-- The arguments of a call the gates refused before it had an approval: the resume that the
-- agent is told to make runs them, hash-checked, as an approval's snapshot is. Deleted once the
-- call moves on (its approval then holds them, or it was sent, or refused for good).
CREATE TABLE bz_tool_deferred_calls (
    job_id     uuid PRIMARY KEY REFERENCES bz_tool_invocations (id),
    snapshot   text NOT NULL,
    args_hash  char(64) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The gates' sliding-window logs, shared by every process and host on this database. A bucket
-- row (`tool:<provider>:<tool>`, `provider:<provider>`) is the lock its checks take, in key
-- order, so that all the gates of one call are checked before any is charged; `held` counts its
-- admissions, so a check never counts them. `expires_at`: after it the bucket holds nothing
-- useful, and a later check deletes it (with its admissions) a few at a time.
CREATE TABLE bz_tool_rate_buckets (
    bucket     text PRIMARY KEY CHECK (char_length(bucket) <= 200),
    held       integer NOT NULL DEFAULT 0 CHECK (held >= 0),
    expires_at timestamptz NOT NULL
);
CREATE INDEX bz_tool_rate_buckets_expires ON bz_tool_rate_buckets (expires_at);

CREATE TABLE bz_tool_rate_admissions (
    bucket      text NOT NULL REFERENCES bz_tool_rate_buckets (bucket) ON DELETE CASCADE,
    admitted_at timestamptz NOT NULL
);
CREATE INDEX bz_tool_rate_admissions_bucket ON bz_tool_rate_admissions (bucket, admitted_at);
