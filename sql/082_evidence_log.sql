-- The evidence log (issue 33, first slice): an append-only RFC 6962 Merkle log whose leaves are
-- written in the transaction of the row they cover (admin_app/evidence/log.py `append_leaf`),
-- signed tree heads (Ed25519) and the public keys that verify them.

-- One row per leaf, 0-based and contiguous: appends are serialized by a transaction-scoped
-- advisory lock and take max(idx) + 1, so a rolled-back append leaves no gap (a sequence would).
CREATE TABLE bz_evidence_leaves (
    idx        bigint PRIMARY KEY CHECK (idx >= 0),
    -- What the leaf covers: a kind ("config_change", ...) and that row's reference.
    kind       text NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 64),
    ref        text NOT NULL CHECK (char_length(ref) <= 256),
    -- SHA-256(0x00 || leaf data), RFC 6962 § 2.1.
    leaf_hash  bytea NOT NULL CHECK (length(leaf_hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The hash of every complete, aligned subtree as leaves arrive: (level, index) covers leaves
-- [index * 2^level, (index + 1) * 2^level); level 0 repeats the leaf hashes. A proof or a head
-- reads O(log n) of these rows, never every leaf; `evidence check` finds the first bad leaf by
-- descending them from a signed root.
CREATE TABLE bz_evidence_nodes (
    level smallint NOT NULL CHECK (level BETWEEN 0 AND 62),
    idx   bigint NOT NULL CHECK (idx >= 0),
    hash  bytea NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (level, idx)
);

-- The public halves of the signing keys, raw 32-byte Ed25519; a rotated key is kept (retired_at
-- set) so the heads it signed still verify.
CREATE TABLE bz_evidence_keys (
    key_id     text PRIMARY KEY CHECK (char_length(key_id) BETWEEN 1 AND 64),
    public_key bytea NOT NULL UNIQUE CHECK (length(public_key) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);
-- At most one key signs at a time.
CREATE UNIQUE INDEX bz_evidence_keys_one_current ON bz_evidence_keys ((true)) WHERE retired_at IS NULL;

-- Signed tree heads: one per tree size (a second head asked for at the same size is the first).
CREATE TABLE bz_evidence_heads (
    tree_size bigint PRIMARY KEY CHECK (tree_size >= 0),
    root_hash bytea NOT NULL CHECK (length(root_hash) = 32),
    signed_at timestamptz NOT NULL,
    key_id    text NOT NULL REFERENCES bz_evidence_keys (key_id),
    signature bytea NOT NULL CHECK (length(signature) = 64)
);
