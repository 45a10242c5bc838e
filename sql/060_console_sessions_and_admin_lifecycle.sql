-- Console sessions kept on the server, admin tokens that expire, a record of every change to an
-- admin, and a sign-in throttle that slows guessing without letting a stranger lock anyone out.

-- One row per signed-in browser. Only a SHA-256 of the session id is stored; the cookie carries
-- the id itself. A session ends at sign-out, "sign out everywhere", a password change or reset,
-- disabling the admin, or when it has been idle or open too long (checked on every request).
CREATE TABLE bz_console_sessions (
    id            bigserial PRIMARY KEY,
    token_hash    char(64) NOT NULL UNIQUE,
    admin_id      bigint NOT NULL REFERENCES bz_admins (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    end_reason    text CHECK (end_reason IN ('signed_out', 'signed_out_everywhere', 'password_changed',
                                             'password_reset', 'admin_disabled', 'ended_by_admin'))
);
CREATE INDEX bz_console_sessions_admin ON bz_console_sessions (admin_id) WHERE ended_at IS NULL;

-- Tokens issued before this migration get 90 days from now.
ALTER TABLE bz_admin_tokens ADD COLUMN expires_at timestamptz;
UPDATE bz_admin_tokens SET expires_at = now() + interval '90 days';
ALTER TABLE bz_admin_tokens ALTER COLUMN expires_at SET NOT NULL;

-- Who changed which admin, how, and when. The actor is a console admin, or the operator's CLI.
CREATE TABLE bz_admin_events (
    id               bigserial PRIMARY KEY,
    actor_admin_id   bigint REFERENCES bz_admins (id) ON DELETE SET NULL,
    actor            text NOT NULL,
    action           text NOT NULL CHECK (action IN ('admin_created', 'admin_disabled', 'admin_enabled',
                                                     'role_changed', 'password_reset', 'password_changed',
                                                     'token_issued', 'token_revoked', 'sessions_ended')),
    target_admin_id  bigint REFERENCES bz_admins (id) ON DELETE SET NULL,
    target           text NOT NULL,
    detail           jsonb NOT NULL DEFAULT '{}',
    at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bz_admin_events_at ON bz_admin_events (at DESC, id DESC);

-- Failed sign-ins per account (an admin's id, or one of a fixed number of buckets for names that
-- belong to nobody, so typed names add no rows) and per client address. Rows of either kind
-- are forgotten once their last failure is old.
DROP TABLE bz_login_throttle;
CREATE TABLE bz_sign_in_failures (
    key              text PRIMARY KEY,
    failures         integer NOT NULL,
    last_failure_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bz_sign_in_failures_last ON bz_sign_in_failures (last_failure_at);
