-- Agent Auth's newer business-side surfaces (BUSINESS_SIDE.md §H.2, §H.3).
--
-- Subject display: the name a business backend gives the person an agent acts for, shown by the
-- agent (never used for authorization). NULL or exactly {"name": <text>}, the text checked and
-- trimmed by the hub before it is stored; the constraint keeps the shape, so a reader can trust it.
ALTER TABLE bz_agent_authorizations ADD COLUMN subject_display jsonb;
ALTER TABLE bz_agent_sessions ADD COLUMN subject_display jsonb;
ALTER TABLE bz_agent_authorizations ADD CONSTRAINT bz_agent_authorizations_subject_display_shape
    CHECK (subject_display IS NULL OR (jsonb_typeof(subject_display) = 'object'
           AND jsonb_typeof(subject_display -> 'name') = 'string' AND subject_display - 'name' = '{}'::jsonb));
ALTER TABLE bz_agent_sessions ADD CONSTRAINT bz_agent_sessions_subject_display_shape
    CHECK (subject_display IS NULL OR (jsonb_typeof(subject_display) = 'object'
           AND jsonb_typeof(subject_display -> 'name') = 'string' AND subject_display - 'name' = '{}'::jsonb));

-- The business session list pages newest first on (created_at, id) with a cursor that carries
-- created_at in milliseconds, as every time on the wire. Sessions are created at millisecond
-- precision from now on, and existing ones brought to it, so that the cursor names a row's
-- position exactly and no session of the same millisecond is skipped between two pages.
ALTER TABLE bz_agent_sessions ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
UPDATE bz_agent_sessions SET created_at = date_trunc('milliseconds', created_at)
 WHERE created_at <> date_trunc('milliseconds', created_at);

-- One client's sessions in the list's order: each page is an index range that stops after it.
-- The former index on client_app_id alone is this one's prefix.
CREATE INDEX bz_agent_sessions_client_created ON bz_agent_sessions (client_app_id, created_at DESC, id DESC);
DROP INDEX bz_agent_sessions_client;

-- The authorization a session came from (the list's authorization_id, and its filter's join).
CREATE INDEX bz_agent_authorizations_session ON bz_agent_authorizations (session_id)
    WHERE session_id IS NOT NULL;
