-- Console: sign-in throttling and the record of sensitive reads (who viewed what, when).

-- Failures are counted per username typed, whether or not such an admin exists, so the sign-in
-- form answers the same way for both and reveals nobody.
CREATE TABLE bz_login_throttle (
    username       text PRIMARY KEY,
    failed_logins  integer NOT NULL DEFAULT 0,
    locked_until   timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bz_access_log (
    id          bigserial PRIMARY KEY,
    admin_id    bigint NOT NULL REFERENCES bz_admins (id),
    username    text NOT NULL,
    action      text NOT NULL CHECK (action IN ('transcript_view', 'transcript_export',
                                                'snapshot_view', 'snapshot_download', 'run_trace_view')),
    target      text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bz_access_log_at ON bz_access_log (at DESC, id DESC);
