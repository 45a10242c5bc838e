-- Configuration-change audit with what changed (issue 33, deliverable 4): each row may name the
-- object it changed (`object_kind`, `object_key`), the SHA-256 of the canonical JSON of that
-- object's stored settings before and after (NULL when it was created, resp. removed), and a
-- readable, bounded diff [{path, before, after}] of allowlisted fields only (never a token, a
-- token's hash, a sealed token or a password hash: admin_app/config_audit/changes.py).
--
-- Pause and resume, which Core does not record (BUSINESS_SIDE.md §G.1), are recorded here as
-- events of their own; GET /admin/api/config-audit lists them beside the changes.

ALTER TABLE bz_config_audit
    ADD COLUMN before_hash char(64) CHECK (before_hash ~ '^[0-9a-f]{64}$'),
    ADD COLUMN after_hash  char(64) CHECK (after_hash ~ '^[0-9a-f]{64}$'),
    ADD COLUMN diff        jsonb CHECK (diff IS NULL OR jsonb_typeof(diff) = 'array'),
    ADD COLUMN object_kind text CHECK (char_length(object_kind) BETWEEN 1 AND 64),
    ADD COLUMN object_key  text CHECK (char_length(object_key) BETWEEN 1 AND 256);

ALTER TABLE bz_config_audit DROP CONSTRAINT bz_config_audit_event_check;
ALTER TABLE bz_config_audit ADD CONSTRAINT bz_config_audit_event_check
    CHECK (event IN ('config_change', 'audit_retention_pruned', 'hub_paused', 'hub_resumed'));
