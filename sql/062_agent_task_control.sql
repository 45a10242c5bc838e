-- Task control (docs: TASK_CONTROL.md §11): a frozen group of Agent Sessions with exact tools,
-- a cumulative write budget, a limit on calls in flight and an optional deadline, which an
-- administrator can pause, resume or cancel. The tables hold identifiers, digests, states and
-- counters only: never conversation bodies, tokens or arguments.

CREATE TABLE bz_agent_tasks (
    task_id          uuid PRIMARY KEY,
    create_key       char(64) NOT NULL UNIQUE,
    create_hash      char(64) NOT NULL,
    state            text NOT NULL CHECK (state IN ('active', 'paused', 'blocked', 'cancelled')),
    revision         bigint NOT NULL CHECK (revision >= 1),
    ledger_sequence  bigint NOT NULL CHECK (ledger_sequence >= revision),
    policy           jsonb NOT NULL,            -- {max_write_calls, max_concurrent, expires_at}
    scope_hash       char(64) NOT NULL,
    write_reserved   bigint NOT NULL DEFAULT 0 CHECK (write_reserved >= 0),
    write_consumed   bigint NOT NULL DEFAULT 0 CHECK (write_consumed >= 0),
    active_permits   integer NOT NULL DEFAULT 0 CHECK (active_permits >= 0),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);

CREATE TABLE bz_agent_task_members (
    task_id                uuid NOT NULL REFERENCES bz_agent_tasks (task_id),
    member_key             char(64) NOT NULL,   -- H(JSON text of [session_id, workspace, conversation])
    session_id             uuid NOT NULL REFERENCES bz_agent_sessions (id),
    client_app_id          text NOT NULL,
    route_key              text NOT NULL,
    client_conversation_id text NOT NULL,
    allowed_tools          jsonb NOT NULL,       -- sorted array of exact names
    identity_hash          char(64) NOT NULL,
    PRIMARY KEY (task_id, member_key),
    UNIQUE (task_id, session_id, route_key, client_conversation_id)
);
CREATE INDEX bz_agent_task_members_session ON bz_agent_task_members (session_id, task_id);

-- Sticky: cancelling or finishing a task never deletes a row here.
CREATE TABLE bz_agent_task_enforcements (
    session_id     uuid PRIMARY KEY REFERENCES bz_agent_sessions (id),
    first_task_id  uuid NOT NULL REFERENCES bz_agent_tasks (task_id),
    created_by     text NOT NULL,
    created_at     timestamptz NOT NULL
);

CREATE TABLE bz_agent_task_invocations (
    session_id             uuid NOT NULL,
    invocation_id          text NOT NULL,
    task_id                uuid NOT NULL REFERENCES bz_agent_tasks (task_id),
    run_id                 uuid NOT NULL REFERENCES bz_runs (id),
    job_id                 uuid NOT NULL UNIQUE REFERENCES bz_tool_invocations (id),
    tool                   text NOT NULL,
    args_hash              char(64) NOT NULL,
    execution_fingerprint  char(64) NOT NULL,
    is_readonly            boolean NOT NULL,
    approval_required      boolean NOT NULL,
    approval_id            uuid REFERENCES bz_tool_approvals (id),
    budget_state           text CHECK (budget_state IN ('reserved', 'consumed', 'released')),
    permit_id              uuid,
    permit_state           text NOT NULL DEFAULT 'none'
                           CHECK (permit_state IN ('none', 'held', 'unknown', 'settled')),
    outcome                text CHECK (outcome IN ('confirmed_dispatched', 'confirmed_not_dispatched', 'unknown')),
    is_terminal            boolean NOT NULL DEFAULT false,
    attempt                integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    PRIMARY KEY (session_id, invocation_id),
    CHECK (is_readonly = (budget_state IS NULL))
);
CREATE INDEX bz_agent_task_invocations_page ON bz_agent_task_invocations (task_id, job_id DESC);

-- A run belongs to one task for good; a new invocation cannot move its budget.
CREATE TABLE bz_agent_task_runs (
    run_id      uuid PRIMARY KEY REFERENCES bz_runs (id),
    task_id     uuid NOT NULL REFERENCES bz_agent_tasks (task_id),
    session_id  uuid NOT NULL REFERENCES bz_agent_sessions (id),
    created_at  timestamptz NOT NULL
);
CREATE INDEX bz_agent_task_runs_task ON bz_agent_task_runs (task_id, created_at);

CREATE TABLE bz_agent_task_events (
    task_id        uuid NOT NULL REFERENCES bz_agent_tasks (task_id),
    sequence       bigint NOT NULL,
    event          text NOT NULL CHECK (length(event) <= 40),
    request_key    char(64),
    request_hash   char(64),
    actor          text,
    invocation_id  text,
    permit_id      uuid,
    detail         jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (task_id, sequence),
    UNIQUE (task_id, request_key)
);
