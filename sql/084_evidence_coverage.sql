-- Evidence for every record (issue 33): conversation events, access-log rows, approval decisions
-- and admin events become leaves of the log of 082 in their own transactions; a message's leaf
-- commits to a salted hash of its text, so retention and erasure can remove the text and its salt
-- while every proof still verifies; retention policies, legal holds, erasure requests, and the
-- background verifier's record.

-- Appending leaves, in SQL so that a producer can send it in its COMMIT's round trip (db.at_commit)
-- and hold the append lock only that long. Takes the transaction-scoped append lock (082: appends
-- are serialized and contiguous), reads the complete subtrees of the tree as it stands (at most
-- one per bit of its size), then folds the new leaves in as a compact range does: each leaf is
-- pushed, and two subtrees of one level on top merge into their parent, SHA-256(0x01 || l || r)
-- (RFC 6962 § 2.1). Every subtree completed is stored. Returns the first new index.
CREATE FUNCTION bz_evidence_append(p_kinds text[], p_refs text[], p_hashes bytea[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n      integer := coalesce(cardinality(p_hashes), 0);
    first  bigint;
    start  bigint := 0;
    top    integer := 0;
    lv     smallint[] := '{}';
    ix     bigint[] := '{}';
    hs     bytea[] := '{}';
    nl     smallint[] := '{}';
    ni     bigint[] := '{}';
    nh     bytea[] := '{}';
    found_ bytea;
    b      integer;
    j      integer;
BEGIN
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF cardinality(p_kinds) <> n OR cardinality(p_refs) <> n THEN
        RAISE EXCEPTION 'bz_evidence_append: kinds, refs and hashes differ in length';
    END IF;
    PERFORM pg_advisory_xact_lock(1702259044);  -- 0x65766964, "evid": evidence/log.py APPEND_LOCK
    SELECT coalesce(max(idx) + 1, 0) INTO first FROM bz_evidence_leaves;
    INSERT INTO bz_evidence_leaves (idx, kind, ref, leaf_hash)
        SELECT first + o - 1, k, r, h FROM unnest(p_kinds, p_refs, p_hashes) WITH ORDINALITY AS u(k, r, h, o);
    -- The complete subtrees of [0, first), largest first: the stack the new leaves fold into.
    FOR b IN REVERSE 62..0 LOOP
        IF (first >> b) & 1 = 1 THEN
            SELECT hash INTO found_ FROM bz_evidence_nodes WHERE level = b AND idx = start >> b;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the evidence log is damaged: the subtree (%, %) is missing', b, start >> b;
            END IF;
            top := top + 1;
            lv[top] := b; ix[top] := start >> b; hs[top] := found_;
            start := start + (1::bigint << b);
        END IF;
    END LOOP;
    FOR j IN 1..n LOOP
        top := top + 1;
        lv[top] := 0; ix[top] := first + j - 1; hs[top] := p_hashes[j];
        nl := nl || 0::smallint; ni := ni || (first + j - 1); nh := nh || p_hashes[j];
        WHILE top >= 2 AND lv[top] = lv[top - 1] LOOP
            hs[top - 1] := sha256('\x01'::bytea || hs[top - 1] || hs[top]);
            lv[top - 1] := lv[top] + 1;
            ix[top - 1] := ix[top] >> 1;
            top := top - 1;
            nl := nl || lv[top]; ni := ni || ix[top]; nh := nh || hs[top];
        END LOOP;
    END LOOP;
    INSERT INTO bz_evidence_nodes (level, idx, hash) SELECT * FROM unnest(nl, ni, nh);
    RETURN first;
END
$$;

-- The leaves of one record, or of one archive's events ("event:<archive>:<sequence>"), by prefix.
CREATE INDEX bz_evidence_leaves_ref ON bz_evidence_leaves (ref text_pattern_ops);

-- How long an app's (and optionally one route's) transcripts keep their messages' text:
-- keep_days NULL keeps it; route_key '*' is every route of the app without a policy of its own.
CREATE TABLE bz_retention_policies (
    id            bigserial PRIMARY KEY,
    client_app_id text NOT NULL CHECK (char_length(client_app_id) BETWEEN 1 AND 128),
    route_key     text NOT NULL DEFAULT '*' CHECK (char_length(route_key) BETWEEN 1 AND 128),
    keep_days     integer CHECK (keep_days BETWEEN 1 AND 36500),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (client_app_id, route_key)
);

-- A legal hold on one archive, one principal (its id) or one tenant: while it is not released,
-- no purge or erasure touches what it covers.
CREATE TABLE bz_legal_holds (
    id             bigserial PRIMARY KEY,
    scope          text NOT NULL CHECK (scope IN ('archive', 'principal', 'tenant')),
    value          text NOT NULL CHECK (char_length(value) BETWEEN 1 AND 256),
    reason         text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 2000),
    placed_by      text NOT NULL,
    placed_at      timestamptz NOT NULL DEFAULT now(),
    released_by    text,
    released_at    timestamptz,
    release_reason text CHECK (char_length(release_reason) <= 2000)
);
CREATE INDEX bz_legal_holds_active ON bz_legal_holds (scope, value) WHERE released_at IS NULL;

-- Each retention purge: who or what ran it, what it redacted and what holds made it skip.
CREATE TABLE bz_retention_runs (
    id          bigserial PRIMARY KEY,
    actor       text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    redacted    integer NOT NULL DEFAULT 0,
    archives    integer NOT NULL DEFAULT 0,
    held        integer NOT NULL DEFAULT 0,
    detail      jsonb NOT NULL DEFAULT '{}'
);

-- An erasure request for one principal across archives: done, or refused (a hold applies).
CREATE TABLE bz_erasure_requests (
    id           bigserial PRIMARY KEY,
    principal_id text NOT NULL CHECK (char_length(principal_id) BETWEEN 1 AND 256),
    reason       text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 2000),
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    state        text NOT NULL CHECK (state IN ('done', 'refused')),
    refused_because text,
    redacted     integer NOT NULL DEFAULT 0,
    archives     integer NOT NULL DEFAULT 0
);

-- The background verifier's passes over the log and the rows its leaves cover.
CREATE TABLE bz_evidence_checks (
    id             bigserial PRIMARY KEY,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    tree_size      bigint NOT NULL,
    leaves_checked bigint NOT NULL DEFAULT 0,
    ok             boolean,
    first_bad_leaf bigint,
    first_bad_ref  text CHECK (char_length(first_bad_ref) <= 256),
    problem        text CHECK (char_length(problem) <= 2000),
    -- A failed pass: when the passes began failing (this one's start, or the failing run's).
    failing_since  timestamptz
);
CREATE INDEX bz_evidence_checks_recent ON bz_evidence_checks (started_at DESC, id DESC);

-- The configuration-change log's retention purge removes rows whose leaves stay: each purge
-- records the id ranges it removed here, committed by a leaf of its own (config_removal:<purge
-- entry id>), so the verifier answers those rows as removed lawfully, not as tampering.
CREATE TABLE bz_config_audit_removals (
    purge_id   bigint PRIMARY KEY,
    removed_at timestamptz NOT NULL DEFAULT now(),
    cutoff     timestamptz NOT NULL,
    ranges     jsonb NOT NULL
);
