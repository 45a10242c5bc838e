-- Agent Client Runtime: threads (the visible conversation ledger), frozen runs, messages,
-- per-route knowledge, and task enrolment of sessions.

ALTER TABLE bz_agent_sessions ADD COLUMN task_enrolled boolean NOT NULL DEFAULT false;

CREATE TABLE bz_threads (
    id                     bigserial PRIMARY KEY,
    session_id             uuid NOT NULL REFERENCES bz_agent_sessions (id),
    route_key              text NOT NULL,
    client_conversation_id text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, route_key, client_conversation_id)
);

-- One prepared turn. Its request and the context the hub answered with are frozen: the same
-- (session, route, conversation, turn) always resolves to this row.
CREATE TABLE bz_runs (
    id                     uuid PRIMARY KEY,
    thread_id              bigint NOT NULL REFERENCES bz_threads (id),
    session_id             uuid NOT NULL REFERENCES bz_agent_sessions (id),
    client_app_id          text NOT NULL,
    route_key              text NOT NULL,
    client_conversation_id text NOT NULL,
    client_turn_id         text NOT NULL,
    user_message_id        text NOT NULL,
    request_hash           char(64) NOT NULL,
    context                jsonb NOT NULL,
    profile_revision       char(64) NOT NULL,
    capability_revision    char(64) NOT NULL,
    task_binding           jsonb,
    status                 text NOT NULL DEFAULT 'prepared'
                           CHECK (status IN ('prepared', 'completed', 'failed', 'cancelled')),
    completion_hash        char(64),
    completion             jsonb,
    created_at             timestamptz NOT NULL DEFAULT now(),
    completed_at           timestamptz,
    UNIQUE (session_id, route_key, client_conversation_id, client_turn_id)
);
CREATE INDEX bz_runs_thread ON bz_runs (thread_id, created_at);

-- Visible messages only: what the user typed and what the assistant showed.
CREATE TABLE bz_messages (
    id          bigserial PRIMARY KEY,
    thread_id   bigint NOT NULL REFERENCES bz_threads (id),
    run_id      uuid NOT NULL REFERENCES bz_runs (id),
    role        text NOT NULL CHECK (role IN ('user', 'assistant')),
    message_id  text NOT NULL,
    content     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (thread_id, role, message_id)
);
CREATE INDEX bz_messages_thread ON bz_messages (thread_id, id);

CREATE TABLE bz_knowledge_documents (
    id          bigserial PRIMARY KEY,
    route_key   text NOT NULL REFERENCES bz_routes (route_key) ON UPDATE CASCADE ON DELETE CASCADE,
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
    title       text NOT NULL,
    media_type  text NOT NULL CHECK (media_type IN ('text/markdown', 'text/plain')),
    sha256      char(64) NOT NULL,
    char_count  integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (route_key, name)
);

CREATE TABLE bz_knowledge_chunks (
    id           bigserial PRIMARY KEY,
    document_id  bigint NOT NULL REFERENCES bz_knowledge_documents (id) ON DELETE CASCADE,
    ordinal      integer NOT NULL,
    heading      text NOT NULL DEFAULT '',
    content      text NOT NULL,
    search       tsvector GENERATED ALWAYS AS
                 (to_tsvector('simple', heading || ' ' || content)) STORED,
    UNIQUE (document_id, ordinal)
);
CREATE INDEX bz_knowledge_chunks_search ON bz_knowledge_chunks USING gin (search);
