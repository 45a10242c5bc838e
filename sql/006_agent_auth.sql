-- Agent Auth v1: browser authorizations (PKCE, single-use codes) and the refresh tokens a
-- session has rotated away from, so that reuse of an old one can revoke the session.

CREATE TABLE bz_agent_authorizations (
    id                uuid PRIMARY KEY,
    client_app_id     text NOT NULL REFERENCES bz_client_apps (app_id) ON UPDATE CASCADE,
    redirect_uri      text NOT NULL,
    state             text NOT NULL,
    requested_routes  text[] NOT NULL,
    device_label      text,
    code_challenge    text NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'approved', 'denied', 'completed')),
    principal         jsonb,
    on_behalf_of      text,
    approved_routes   text[],
    code_hash         char(64) UNIQUE,
    code_expires_at   timestamptz,
    session_id        uuid REFERENCES bz_agent_sessions (id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    decided_at        timestamptz
);

CREATE TABLE bz_agent_refresh_history (
    token_hash   char(64) PRIMARY KEY,
    session_id   uuid NOT NULL REFERENCES bz_agent_sessions (id),
    rotated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bz_agent_refresh_history_session ON bz_agent_refresh_history (session_id);
