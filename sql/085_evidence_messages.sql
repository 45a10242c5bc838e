-- Messages whose record stays verifiable after their text is removed (issue 33): part of the
-- conversation audit (admin_app/migrations.py FEATURES), applied with it.

-- A message's salt (16 random bytes): its leaf commits to SHA-256(salt || UTF-8 text), which
-- says nothing of the text once the text and the salt are gone. NULL for events without text
-- (and for a message redacted since).
ALTER TABLE bz_agent_conversation_events
    ADD COLUMN content_salt bytea CHECK (content_salt IS NULL OR length(content_salt) = 16);

-- A message whose text and salt were removed: the commitment its leaf holds (so the leaf still
-- verifies), when, under what (a retention policy or an erasure request) and by whom; and the
-- redaction's own leaf, so that a redaction row nobody made is told from one the hub made.
CREATE TABLE bz_evidence_redactions (
    archive_id  uuid NOT NULL,
    sequence    integer NOT NULL,
    commitment  bytea NOT NULL CHECK (length(commitment) = 32),
    redacted_at timestamptz NOT NULL DEFAULT now(),
    basis       text NOT NULL CHECK (basis IN ('retention', 'erasure')),
    basis_ref   text NOT NULL CHECK (char_length(basis_ref) BETWEEN 1 AND 128),
    actor       text NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 128),
    leaf_idx    bigint NOT NULL,
    PRIMARY KEY (archive_id, sequence)
);
