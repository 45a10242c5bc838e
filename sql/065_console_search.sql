-- The console's search across archives. Every filter it offers is an index read, so a search
-- costs what its matches cost, not what the number of events is (10 M events must not be scanned).
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Message content by substring (ILIKE '%term%'): trigrams; only messages carry content.
CREATE INDEX bz_agent_conversation_events_content_trgm ON bz_agent_conversation_events
    USING gin (content gin_trgm_ops) WHERE content IS NOT NULL;

-- IDs by prefix: a UUID sorts as its hex text does, so a prefix (c656db38) is a range of UUIDs
-- and a plain btree answers it. Archive ids and member session ids have one already.
CREATE INDEX bz_agent_conversation_archives_client_archive ON bz_agent_conversation_archives (client_archive_id);

-- Client conversation ids and member labels by substring.
CREATE INDEX bz_agent_conversation_archives_conversation_trgm ON bz_agent_conversation_archives
    USING gin (client_conversation_id gin_trgm_ops);
CREATE INDEX bz_agent_conversation_members_label_trgm ON bz_agent_conversation_members
    USING gin (label gin_trgm_ops) WHERE label IS NOT NULL;

-- A confirmed member's principal (frozen at confirmation): its id and its tenant.
CREATE INDEX bz_agent_conversation_members_principal_id ON bz_agent_conversation_members
    ((principal ->> 'id')) WHERE principal IS NOT NULL;
CREATE INDEX bz_agent_conversation_members_principal_tenant ON bz_agent_conversation_members
    ((principal ->> 'tenant')) WHERE principal IS NOT NULL;

-- The list's sorts, each keyset-paged on (column, id) in either direction.
CREATE INDEX bz_agent_conversation_archives_updated_key ON bz_agent_conversation_archives (updated_at, id);
CREATE INDEX bz_agent_conversation_archives_created_key ON bz_agent_conversation_archives (created_at, id);
CREATE INDEX bz_agent_conversation_archives_events_key ON bz_agent_conversation_archives (last_sequence, id);
