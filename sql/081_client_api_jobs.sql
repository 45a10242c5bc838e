-- Core's Client API and executor protocol (CLIENT_API_AND_EXECUTOR.md §A–§F): jobs submitted by
-- connectors with POST /run, claimed by executors, their governed tool calls, completion
-- callbacks and the dead-letter list.

-- Executor targets (§B.1): the named slots a route's work goes to. The hub runs no models, so
-- every target here is of Core's `executor` kind: queued in the database, pulled by executors.
CREATE TABLE bz_executor_targets (
    name         text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    description  text NOT NULL DEFAULT '',
    enabled      boolean NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- What a route does with Client API work (§A.3, §B.7, §C.2, §C.6, §D.1): its target, and
-- `{retry: {max}, default_callback_url, max_calls, budget}` as the config file gives them.
ALTER TABLE bz_routes
    ADD COLUMN target text,
    ADD COLUMN job_settings jsonb NOT NULL DEFAULT '{}'::jsonb;

-- A client app's launch-time budget (§C.6), `{window_hours, hard_tokens, hard_cost_usd}` or NULL.
ALTER TABLE bz_client_apps ADD COLUMN job_budget jsonb;

-- Core signs a job's completion callback with the client's token (§D.1), so the hub must be able
-- to read it again: sealed (encrypted with the hub's secret key), never kept in the clear. NULL for
-- a token issued before this migration: its callbacks wait until the token is reissued.
ALTER TABLE bz_client_apps ADD COLUMN client_token_sealed text;

-- Executor tokens (§B.2): scoped to targets ('*' = all); only the SHA-256 of the token is kept,
-- with its last four characters so that the console can tell tokens apart.
CREATE TABLE bz_executor_tokens (
    name             text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    token_hash       char(64) NOT NULL UNIQUE,
    token_last4      text NOT NULL,
    allowed_targets  text[] NOT NULL CHECK (cardinality(allowed_targets) >= 1),
    enabled          boolean NOT NULL DEFAULT true,
    description      text NOT NULL DEFAULT '',
    last_seen_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Executors as they report themselves on claim and heartbeat (§B.4, §B.6).
CREATE TABLE bz_executors (
    executor_id   text PRIMARY KEY CHECK (length(executor_id) BETWEEN 1 AND 64),
    token_name    text,
    targets       text[] NOT NULL DEFAULT '{}',
    capabilities  jsonb,
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);

-- Jobs (§A.4, §A.5, §B.8). `request_id` is unique across the hub, as Core's is. The statuses are
-- Core's six and no other (`running` is Core's in-hub state; the hub has no in-hub worker, but a
-- status a consumer knows is kept valid).
CREATE TABLE bz_jobs (
    id                uuid PRIMARY KEY,
    request_id        text NOT NULL UNIQUE CHECK (length(request_id) BETWEEN 1 AND 512),
    client_app_id     text NOT NULL REFERENCES bz_client_apps (app_id),
    route_key         text NOT NULL,
    target            text NOT NULL,
    status            text NOT NULL CHECK (status IN ('queued', 'running', 'dispatched', 'done',
                                                      'error', 'rejected')),
    input             text NOT NULL,
    metadata          jsonb NOT NULL DEFAULT '{}'::jsonb,
    principal         jsonb,                       -- the normalised principal (§A.3)
    on_behalf_of      text,                        -- the subject sent to business systems
    callback_url      text CHECK (length(callback_url) <= 2048),
    session_id        text NOT NULL,
    is_continue       boolean NOT NULL DEFAULT false,
    thread_key        text NOT NULL,               -- per-thread FIFO (§B.4)
    attempts          integer NOT NULL DEFAULT 0,
    max_retries       integer NOT NULL DEFAULT 0 CHECK (max_retries BETWEEN 0 AND 5),
    run_after         timestamptz,
    executor_id       text,
    executor_token    text,                        -- the token name that claimed it: results bound to it
    claim_token       uuid,
    claimed_at        timestamptz,
    dispatched_at     timestamptz,
    lease_until       timestamptz,
    result            jsonb,
    usage             jsonb,
    error             text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CHECK ((status = 'dispatched') = (claim_token IS NOT NULL))
);
CREATE INDEX bz_jobs_claim ON bz_jobs (target, created_at, id) WHERE status = 'queued';
CREATE INDEX bz_jobs_leases ON bz_jobs (lease_until) WHERE status = 'dispatched';
CREATE INDEX bz_jobs_threads ON bz_jobs (thread_key, created_at) WHERE status IN ('queued', 'running', 'dispatched');
CREATE INDEX bz_jobs_client ON bz_jobs (client_app_id, created_at DESC);
CREATE INDEX bz_jobs_created ON bz_jobs (created_at DESC, id DESC);

-- A job's timeline (§F): received, dispatched, heartbeat-renewed leases are not rows (they would
-- drown the rest), results, retries, reclaims, tool calls, approvals, callbacks.
CREATE TABLE bz_job_events (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES bz_jobs (id),
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    event       text NOT NULL,
    actor       text,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX bz_job_events_job ON bz_job_events (job_id, id);

-- Governed tool calls inside a job (§C): the same invocation rows, approvals and journal as the
-- agent path, owned by a job instead of an agent session.
ALTER TABLE bz_tool_invocations
    ALTER COLUMN session_id DROP NOT NULL,
    ADD COLUMN job_id uuid REFERENCES bz_jobs (id),
    ADD CONSTRAINT bz_tool_invocations_owner CHECK ((session_id IS NULL) <> (job_id IS NULL));
CREATE UNIQUE INDEX bz_tool_invocations_job ON bz_tool_invocations (job_id, invocation_id)
    WHERE job_id IS NOT NULL;

-- Completion callbacks (§D.1): one row per finish of a job (a rerun posts again), its attempts
-- as they went, and the dead-letter state an operator sees and replays.
CREATE TABLE bz_job_callbacks (
    id             bigserial PRIMARY KEY,
    job_id         uuid NOT NULL REFERENCES bz_jobs (id),
    url            text NOT NULL,
    body           text NOT NULL,                  -- the exact bytes signed and sent
    state          text NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts       integer NOT NULL DEFAULT 0,
    next_at        timestamptz NOT NULL DEFAULT now(),
    leased_until   timestamptz,
    last_status    integer,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    delivered_at   timestamptz,
    replayed_by    text
);
CREATE INDEX bz_job_callbacks_due ON bz_job_callbacks (next_at) WHERE state = 'pending';
CREATE INDEX bz_job_callbacks_dead ON bz_job_callbacks (created_at DESC) WHERE state = 'dead';
CREATE INDEX bz_job_callbacks_job ON bz_job_callbacks (job_id, id);

CREATE TABLE bz_job_callback_attempts (
    id            bigserial PRIMARY KEY,
    callback_id   bigint NOT NULL REFERENCES bz_job_callbacks (id),
    attempt       integer NOT NULL,
    at            timestamptz NOT NULL DEFAULT now(),
    http_status   integer,
    error         text,
    duration_ms   integer NOT NULL
);
CREATE INDEX bz_job_callback_attempts_callback ON bz_job_callback_attempts (callback_id, attempt);

-- The dead-letter list of completion callbacks (CLIENT_API_AND_EXECUTOR.md §D.3): an operator
-- resolves a dead callback (seen, nothing more to send) or replays it. A callback is in the list
-- once it died, until it is resolved; a replay that delivers it resolves it too. Core keeps no
-- dead letter for callbacks; the hub does (docs/compatibility.md).
ALTER TABLE bz_job_callbacks
    ADD COLUMN resolved_at  timestamptz,
    ADD COLUMN resolved_by  text CHECK (char_length(resolved_by) <= 128),
    ADD COLUMN died_at      timestamptz,     -- the first time it went dead: it is a dead letter
    ADD CONSTRAINT bz_job_callbacks_resolved CHECK ((resolved_at IS NULL) = (resolved_by IS NULL));

-- The list, newest first: the unresolved ones (the default), or every one ever dead (`all=1`).
CREATE INDEX bz_job_callbacks_letters ON bz_job_callbacks (died_at DESC, id DESC)
    WHERE died_at IS NOT NULL;

-- The console's jobs list and the admin API's trace search (CLIENT_API_AND_EXECUTOR.md §F): a job
-- is looked up by a prefix of any ID it is known by, and searched by request, principal and
-- thread. A UUID prefix is a range of the primary key's btree; text_pattern_ops makes
-- `LIKE 'prefix%'` an index range read on the text IDs whatever the database's collation.
CREATE INDEX bz_jobs_request_prefix ON bz_jobs (request_id text_pattern_ops);
CREATE INDEX bz_jobs_session_prefix ON bz_jobs (session_id text_pattern_ops);
CREATE INDEX bz_jobs_executor_prefix ON bz_jobs (executor_id text_pattern_ops) WHERE executor_id IS NOT NULL;
-- The trace search by thread (the job's thread key) and by principal, newest first.
CREATE INDEX bz_jobs_thread_recent ON bz_jobs (thread_key, created_at DESC, id DESC);
CREATE INDEX bz_jobs_principal ON bz_jobs ((principal ->> 'id'), created_at DESC, id DESC)
    WHERE principal IS NOT NULL;

-- Launch-time route budgets (§C.6) sum the jobs of one route created in a window.
CREATE INDEX bz_jobs_route_recent ON bz_jobs (route_key, created_at);
