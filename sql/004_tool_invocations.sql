-- Governed tool invocations: the invocation ledger, approvals with complete argument snapshots,
-- and the execution journal written before any business request leaves the hub.

CREATE TABLE bz_tool_invocations (
    id                     uuid PRIMARY KEY,           -- the job id sent as X-Bailing-Job-Id
    session_id             uuid NOT NULL REFERENCES bz_agent_sessions (id),
    invocation_id          text NOT NULL,              -- chosen by the client
    route_key              text NOT NULL,
    run_id                 uuid REFERENCES bz_runs (id),
    tool                   text NOT NULL,
    provider               text NOT NULL,
    scope                  text NOT NULL,
    request_hash           char(64) NOT NULL,          -- what makes a retry "the same call"
    args_hash              char(64) NOT NULL,
    argument_keys          text[] NOT NULL,            -- key names only; values are never kept here
    execution_fingerprint  char(64) NOT NULL,
    capability_revision    char(64) NOT NULL,
    on_behalf_of           text,
    status                 text NOT NULL CHECK (status IN ('executed', 'business_rejected',
                               'awaiting_approval', 'denied', 'rejected_before_dispatch',
                               'reconciliation_required', 'in_progress')),
    reason                 text,
    business_status        integer,
    result_body            jsonb,                      -- replayed on resume; never shown in traces
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, invocation_id)
);
CREATE INDEX bz_tool_invocations_run ON bz_tool_invocations (run_id);

CREATE TABLE bz_tool_approvals (
    id              uuid PRIMARY KEY,
    job_id          uuid NOT NULL UNIQUE REFERENCES bz_tool_invocations (id),
    tool            text NOT NULL,
    route_key       text NOT NULL,
    risk            text NOT NULL,
    policy          jsonb NOT NULL,                    -- why approval is due
    prompt          text,
    snapshot        text NOT NULL,                     -- the complete arguments, exact bytes
    args_hash       char(64) NOT NULL,
    snapshot_bytes  integer NOT NULL,
    argument_keys   text[] NOT NULL,
    summary         text NOT NULL,                     -- bounded, for lists and notifications
    principal       jsonb,
    on_behalf_of    text,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'denied')),
    decided_by      text,
    decided_at      timestamptz,
    decision_reason text,
    consumed_at     timestamptz,                       -- set once, when the approved call is sent
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bz_tool_approvals_queue ON bz_tool_approvals ((status = 'pending') DESC, created_at, id);

CREATE TABLE bz_tool_journal (
    job_id           uuid PRIMARY KEY REFERENCES bz_tool_invocations (id),
    state            text NOT NULL CHECK (state IN ('dispatching', 'completed', 'uncertain')),
    idempotency_key  char(64) NOT NULL,
    method           text NOT NULL,
    path             text NOT NULL,
    body_sha256      char(64) NOT NULL,
    http_status      integer,
    failure          text,
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
