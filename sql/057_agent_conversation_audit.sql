-- Agent Conversation Audit v1: archives of the complete visible conversation of a local agent.
-- Bodies live here, never in bz_messages or thread memory.

CREATE TABLE bz_agent_conversation_archives (
    id                      uuid PRIMARY KEY,
    client_archive_id       uuid NOT NULL,
    client_conversation_id  text NOT NULL,
    creator_session_id      uuid NOT NULL REFERENCES bz_agent_sessions (id),
    -- The writer's binding; in v2 it describes only the writer, not the whole group.
    client_app_id           text NOT NULL,
    route_key               text NOT NULL,
    input_hash              char(64) NOT NULL,
    state                   text NOT NULL DEFAULT 'enrolling' CHECK (state IN ('enrolling', 'ready')),
    member_count            integer NOT NULL CHECK (member_count BETWEEN 1 AND 64),
    confirmed_count         integer NOT NULL DEFAULT 1,
    last_sequence           integer NOT NULL DEFAULT 0,
    message_count           integer NOT NULL DEFAULT 0,
    turn_count              integer NOT NULL DEFAULT 0,
    text_bytes              bigint NOT NULL DEFAULT 0,
    running_turn_id         text,
    last_turn_status        text CHECK (last_turn_status IN ('running', 'completed', 'failed', 'cancelled')),
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (creator_session_id, route_key, client_archive_id)
);
CREATE INDEX bz_agent_conversation_archives_updated ON bz_agent_conversation_archives (updated_at DESC, id);

CREATE TABLE bz_agent_conversation_members (
    archive_id     uuid NOT NULL REFERENCES bz_agent_conversation_archives (id) ON DELETE CASCADE,
    session_id     uuid NOT NULL REFERENCES bz_agent_sessions (id),
    position       integer NOT NULL,
    label          text CHECK (length(label) <= 128),
    confirmed_at   timestamptz,
    -- Frozen at confirmation; later writes compare the live session against identity_hash.
    principal      jsonb,
    on_behalf_of   text,
    identity_hash  char(64),
    PRIMARY KEY (archive_id, session_id)
);
CREATE INDEX bz_agent_conversation_members_session ON bz_agent_conversation_members (session_id);

CREATE TABLE bz_agent_conversation_events (
    archive_id         uuid NOT NULL REFERENCES bz_agent_conversation_archives (id) ON DELETE CASCADE,
    sequence           integer NOT NULL CHECK (sequence >= 1),
    event_id           text NOT NULL,
    client_turn_id     text NOT NULL,
    kind               text NOT NULL CHECK (kind IN ('turn_start', 'user_message', 'assistant_message',
                                                     'run_link', 'turn_end')),
    content            text,
    status             text CHECK (status IN ('completed', 'failed', 'cancelled')),
    run_id             uuid,
    member_session_id  uuid,
    thread_id          bigint,
    body_sha256        char(64) NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (archive_id, sequence),
    UNIQUE (archive_id, event_id)
);
-- A run belongs to at most one archive, so traces link back without ambiguity.
CREATE UNIQUE INDEX bz_agent_conversation_events_run ON bz_agent_conversation_events (run_id)
    WHERE run_id IS NOT NULL;
CREATE INDEX bz_agent_conversation_events_turn_start ON bz_agent_conversation_events (archive_id, client_turn_id)
    WHERE kind = 'turn_start';
