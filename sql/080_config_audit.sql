-- Configuration-change audit (BUSINESS_SIDE.md § G): one row per committed configuration change
-- (a successful non-GET admin API write outside the excluded areas, a `config apply` that changed
-- something) and one per retention purge that deleted rows. Never a request body: who, how, where.
--
-- This log alone is subject to BAILING_AUDIT_RETENTION_DAYS; the conversation audit, approvals,
-- invocations, the execution journal and the admins' trail keep their own rules.

CREATE TABLE bz_config_audit (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts     timestamptz NOT NULL DEFAULT now(),
    event  text NOT NULL CHECK (event IN ('config_change', 'audit_retention_pruned')),
    -- `by` on the wire: an admin's username, `cli:<login>` for config apply, `retention`.
    actor  text NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 128),
    method text NOT NULL CHECK (char_length(method) BETWEEN 1 AND 16),
    path   text NOT NULL CHECK (char_length(path) <= 2048),
    -- The purge's {retention_days, cutoff, deleted}; NULL for a change.
    detail jsonb
);
-- Newest first, paged by offset; the purge reads the same index from its old end.
CREATE INDEX bz_config_audit_newest ON bz_config_audit (ts DESC, id DESC);
