-- Core records: client apps, routes, tool providers, agent sessions, admins.
-- Resource keys (app_id, route_key, provider name) follow ^[a-z0-9][a-z0-9_-]{1,63}$;
-- 'auto' is reserved and is never a real route.

CREATE TABLE bz_client_apps (
    id                  bigserial PRIMARY KEY,
    app_id              text NOT NULL UNIQUE CHECK (app_id ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    name                text NOT NULL CHECK (length(name) BETWEEN 1 AND 191),
    allowed_routes      text[] NOT NULL DEFAULT '{}',
    enabled             boolean NOT NULL DEFAULT true,
    agent_authorize_url text,
    client_token_hash   char(64) UNIQUE,
    client_token_issued_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bz_routes (
    id            bigserial PRIMARY KEY,
    route_key     text NOT NULL UNIQUE
                  CHECK (route_key ~ '^[a-z0-9][a-z0-9_-]{1,63}$' AND route_key <> 'auto'),
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 191),
    description   text NOT NULL DEFAULT '',
    enabled       boolean NOT NULL DEFAULT true,
    audience      jsonb NOT NULL DEFAULT '{"enabled": false}',
    target_config jsonb NOT NULL DEFAULT '{}',
    agent_client  jsonb NOT NULL DEFAULT '{"enabled": false}',
    tools         jsonb NOT NULL DEFAULT '{}',
    permission    text NOT NULL DEFAULT 'full' CHECK (permission IN ('full', 'readonly')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bz_tool_providers (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    base_url    text NOT NULL,
    openapi     jsonb NOT NULL,
    secret_env  text NOT NULL CHECK (secret_env ~ '^[A-Z_][A-Z0-9_]{0,127}$'),
    timeout_ms  integer NOT NULL DEFAULT 10000 CHECK (timeout_ms BETWEEN 1 AND 600000),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bz_agent_sessions (
    id                  uuid PRIMARY KEY,
    client_app_id       text NOT NULL REFERENCES bz_client_apps (app_id) ON UPDATE CASCADE,
    principal           jsonb,
    on_behalf_of        text,
    allowed_routes      text[] NOT NULL,
    device_label        text,
    access_token_hash   char(64) NOT NULL UNIQUE,
    access_expires_at   timestamptz NOT NULL,
    refresh_token_hash  char(64) UNIQUE,
    refresh_expires_at  timestamptz NOT NULL,
    -- SHA-256 of canonical JSON {principal, on_behalf_of, client_app_id}: later writes compare
    -- against it to prove the session still stands for the same identity.
    identity_hash       char(64) NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    refreshed_at        timestamptz,
    revoked_at          timestamptz
);
CREATE INDEX bz_agent_sessions_client ON bz_agent_sessions (client_app_id);

CREATE TABLE bz_admins (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9][a-z0-9._-]{1,63}$'),
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'auditor', 'approver', 'support')),
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bz_admin_tokens (
    id           bigserial PRIMARY KEY,
    admin_id     bigint NOT NULL REFERENCES bz_admins (id) ON DELETE CASCADE,
    token_hash   char(64) NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX bz_admin_tokens_admin ON bz_admin_tokens (admin_id);
