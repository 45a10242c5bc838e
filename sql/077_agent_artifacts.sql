-- Agent artifacts (BUSINESS_SIDE.md H.1): images a local agent uploads for a turn, stored in an
-- operator's bucket and named back to the agent by a public URL.
--
-- Buckets come from the configuration file (`artifact_buckets`, config apply). This hub stores
-- into `local` buckets only (a folder of the hub's host); `cos` and `oss` are Core's cloud kinds,
-- allowed here so that a row of theirs is recognised and refused at upload time (503).

CREATE TABLE bz_artifact_buckets (
    name            text PRIMARY KEY CHECK (name ~ '^[a-zA-Z0-9_-]{1,64}$'),
    kind            text NOT NULL CHECK (kind IN ('local', 'cos', 'oss')),
    -- local: the absolute folder the files are written to.
    dir             text CHECK (char_length(dir) BETWEEN 1 AND 4096),
    -- Where the folder is published (a URL prefix); null: the hub serves a local bucket itself
    -- at BAILING_PUBLIC_URL/artifacts/<name>/.
    public_base_url text CHECK (char_length(public_base_url) <= 2048),
    enabled         boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- One upload, keyed as the agent keys it: (session, upload_id). record_json holds the receipt's
-- fields, the workspace (route key), the bucket it was stored in and the object's key; a retry
-- with the same key and the same workspace and metadata gets this row's receipt back.
CREATE TABLE bz_agent_artifacts (
    session_id  uuid NOT NULL REFERENCES bz_agent_sessions (id),
    upload_id   char(64) NOT NULL CHECK (upload_id ~ '^[0-9a-f]{64}$'),
    record_json jsonb NOT NULL,
    -- pending: accepted but not (yet) stored; ready: stored, `url` is where it is published.
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'ready')),
    url         text CHECK (char_length(url) <= 2048),
    created_at  timestamptz(3) NOT NULL DEFAULT now(),
    updated_at  timestamptz(3) NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, upload_id),
    CONSTRAINT bz_agent_artifacts_ready_url CHECK ((state = 'ready') = (url IS NOT NULL))
);
