-- Notifications of new approvals: channels from the configuration file, and a transactional
-- outbox of deliveries.
--
-- A delivery row is written in the transaction that creates its approval, so a rolled-back
-- request notifies nobody and a committed approval is never missed. Workers in every hub process
-- claim due rows with FOR UPDATE SKIP LOCKED and hold them by a lease (`sending` until
-- next_attempt_at), not by a lock across the network call: a worker that dies mid-send leaves a
-- row that another worker takes again once its lease has run out.

CREATE TABLE bz_approval_channels (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    kind        text NOT NULL CHECK (kind IN ('webhook', 'email')),
    -- webhook: where to POST, and the environment variable holding the signing secret (the
    -- secret itself is read at send time and never stored).
    url         text CHECK (char_length(url) <= 2048),
    secret_env  text CHECK (secret_env ~ '^[A-Z_][A-Z0-9_]{0,127}$'),
    -- email: 1 to 20 addresses.
    recipients  text[] NOT NULL DEFAULT '{}',
    -- Fires for an approval whose route is in `routes` (or any, when empty) and whose tool is in
    -- `tools` (or any, when empty).
    routes      text[] NOT NULL DEFAULT '{}',
    tools       text[] NOT NULL DEFAULT '{}',
    enabled     boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bz_approval_channels_kind_fields CHECK (
        (kind = 'webhook' AND url IS NOT NULL AND secret_env IS NOT NULL AND cardinality(recipients) = 0)
        OR (kind = 'email' AND url IS NULL AND secret_env IS NULL
            AND cardinality(recipients) BETWEEN 1 AND 20))
);

CREATE TABLE bz_approval_deliveries (
    id                  uuid PRIMARY KEY,
    approval_id         uuid NOT NULL REFERENCES bz_tool_approvals (id),
    channel             text NOT NULL REFERENCES bz_approval_channels (name),
    -- pending: waiting for its next attempt; sending: leased to a worker until next_attempt_at;
    -- delivered; failed: out of attempts; cancelled: its channel was disabled, or its approval
    -- decided or expired, before it was sent.
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'sending', 'delivered', 'failed', 'cancelled')),
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at     timestamptz DEFAULT now(),
    -- The lease of the attempt in flight: only its holder records the outcome.
    lease_token         uuid,
    attempt_started_at  timestamptz,
    last_http_status    integer,
    last_error          text CHECK (char_length(last_error) <= 500),
    delivered_at        timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (approval_id, channel),
    CONSTRAINT bz_approval_deliveries_due CHECK (
        (status IN ('pending', 'sending')) = (next_attempt_at IS NOT NULL))
);

-- What the workers poll: the rows due, oldest first.
CREATE INDEX bz_approval_deliveries_due_idx ON bz_approval_deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'sending');
-- The console's list, newest first (keyset on created_at, id), whole or by status.
CREATE INDEX bz_approval_deliveries_recent_idx ON bz_approval_deliveries (created_at DESC, id DESC);
CREATE INDEX bz_approval_deliveries_status_idx ON bz_approval_deliveries (status, created_at DESC, id DESC);

-- One row per attempt: when, how it ended, and when the next one was due.
CREATE TABLE bz_approval_delivery_attempts (
    delivery_id      uuid NOT NULL REFERENCES bz_approval_deliveries (id),
    attempt          integer NOT NULL CHECK (attempt >= 1),
    started_at       timestamptz,
    finished_at      timestamptz NOT NULL DEFAULT now(),
    outcome          text NOT NULL CHECK (outcome IN ('delivered', 'failed', 'interrupted')),
    http_status      integer,
    error            text CHECK (char_length(error) <= 500),
    next_attempt_at  timestamptz,
    PRIMARY KEY (delivery_id, attempt)
);
