-- Optional: bz_agent_conversation_events partitioned by HASH (archive_id).
--
-- Not a numbered migration: `db upgrade` never applies it, because it rewrites every event under
-- an exclusive lock. An operator runs it on purpose with `bailing-admin db partition-events`,
-- which sets bailing.event_partitions for this transaction, runs this file in one transaction
-- under the migration lock, and records it in bz_schema_migrations as optional/partition_events.sql.
-- A failure anywhere rolls everything back: the table is then exactly as it was.
--
-- Columns, NOT NULLs, defaults and CHECKs come over with LIKE; the primary key, the unique and
-- foreign keys, every index and the grants are re-created from their definitions as they stand
-- in the database (an index a later migration added comes along), under their own names. The
-- one exception is the unique index on run_id: a unique index on a partitioned table must contain
-- archive_id, so it becomes a plain index (lookups by run_id), and "a run belongs to at most one
-- archive" is kept by bz_agent_conversation_run_links, whose primary key is run_id and which
-- triggers keep equal to the events' run ids within the same statement.
DO $convert$
DECLARE
    parts    integer := current_setting('bailing.event_partitions', true)::integer;
    old      regclass := 'bz_agent_conversation_events'::regclass;
    home     text := (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = old);
    owner    text := (SELECT relowner::regrole::text FROM pg_class WHERE oid = old);
    width    integer := greatest(length((parts - 1)::text), 2);
    events   regclass;
    keys     text[];
    indexes  text[];
    grants   text[];
    renames  text[];
    owned    text[];
    stmt     text;
    copied   bigint;
    i        integer;
BEGIN
    -- Appends lock their archive's row before they write events: archives first, as they do.
    -- Readers wait too: this is a maintenance operation, run with the hub stopped.
    LOCK TABLE bz_agent_conversation_archives IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE bz_agent_conversation_events IN ACCESS EXCLUSIVE MODE;
    IF (SELECT relkind FROM pg_class WHERE oid = old) = 'p' THEN
        RAISE EXCEPTION 'bz_agent_conversation_events is already partitioned';
    END IF;
    IF parts IS NULL OR parts < 2 THEN
        RAISE EXCEPTION 'bailing.event_partitions must be set to 2 or more';
    END IF;

    -- The definitions as they stand, read before the table is renamed.
    SELECT array_agg(format('ALTER TABLE %s.bz_agent_conversation_events ADD CONSTRAINT %I %s',
                            home, conname, pg_get_constraintdef(oid)) ORDER BY contype DESC, conname)
      INTO keys
      FROM pg_constraint WHERE conrelid = old AND contype IN ('p', 'u', 'f');
    SELECT array_agg(CASE WHEN c.relname = 'bz_agent_conversation_events_run'
                          THEN replace(pg_get_indexdef(x.indexrelid), 'CREATE UNIQUE INDEX', 'CREATE INDEX')
                          ELSE pg_get_indexdef(x.indexrelid) END ORDER BY c.relname)
      INTO indexes
      FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
     WHERE x.indrelid = old
       AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = old);
    SELECT array_agg(format('GRANT %s ON %s.%I TO %s', a.privilege_type, home, t.name,
                            CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END))
      INTO grants
      FROM pg_class c, aclexplode(c.relacl) a,
           unnest(ARRAY['bz_agent_conversation_events', 'bz_agent_conversation_run_links']) t(name)
     WHERE c.oid = old AND a.grantee <> c.relowner;

    ALTER TABLE bz_agent_conversation_events RENAME TO bz_agent_conversation_events_unpartitioned;
    EXECUTE format($sql$CREATE TABLE %1$s.bz_agent_conversation_events (
                           LIKE %1$s.bz_agent_conversation_events_unpartitioned
                           INCLUDING COMMENTS INCLUDING COMPRESSION INCLUDING CONSTRAINTS INCLUDING DEFAULTS
                           INCLUDING GENERATED INCLUDING IDENTITY INCLUDING STATISTICS INCLUDING STORAGE)
                       PARTITION BY HASH (archive_id) $sql$, home);
    events := format('%s.bz_agent_conversation_events', home)::regclass;
    FOR i IN 0 .. parts - 1 LOOP
        EXECUTE format('CREATE TABLE %s.%I PARTITION OF %s FOR VALUES WITH (MODULUS %s, REMAINDER %s)',
                       home, 'bz_agent_conversation_events_p' || lpad(i::text, width, '0'), events, parts, i);
    END LOOP;

    -- Rows first, keys and indexes after: one sort per index instead of one insert per row.
    EXECUTE format('INSERT INTO %s SELECT * FROM %s.bz_agent_conversation_events_unpartitioned', events, home);
    GET DIAGNOSTICS copied = ROW_COUNT;
    PERFORM set_config('bailing.events_copied', copied::text, true);
    EXECUTE format($sql$CREATE TABLE %s.bz_agent_conversation_run_links (
                           run_id      uuid PRIMARY KEY,
                           archive_id  uuid NOT NULL,
                           sequence    integer NOT NULL
                       ) $sql$, home);
    EXECUTE format('INSERT INTO %1$s.bz_agent_conversation_run_links (run_id, archive_id, sequence) '
                   'SELECT run_id, archive_id, sequence FROM %1$s.bz_agent_conversation_events_unpartitioned '
                   'WHERE run_id IS NOT NULL', home);
    GET DIAGNOSTICS copied = ROW_COUNT;
    PERFORM set_config('bailing.run_links_copied', copied::text, true);
    -- Without CASCADE: anything else that depends on the old table stops the conversion.
    EXECUTE format('DROP TABLE %s.bz_agent_conversation_events_unpartitioned', home);

    FOREACH stmt IN ARRAY coalesce(keys, '{}') || coalesce(indexes, '{}') || coalesce(grants, '{}') LOOP
        EXECUTE stmt;
    END LOOP;
    -- Each partition's index is named after its parent's, so a plan names the index it reads.
    SELECT array_agg(format('ALTER INDEX %s.%I RENAME TO %I', home, child.relname,
                            parent.relname || right(t.relname, width + 2)))
      INTO renames
      FROM pg_index px
      JOIN pg_class parent ON parent.oid = px.indexrelid
      JOIN pg_inherits h ON h.inhparent = px.indexrelid
      JOIN pg_class child ON child.oid = h.inhrelid
      JOIN pg_index cx ON cx.indexrelid = child.oid
      JOIN pg_class t ON t.oid = cx.indrelid
     WHERE px.indrelid = events;
    FOREACH stmt IN ARRAY coalesce(renames, '{}') LOOP
        EXECUTE stmt;
    END LOOP;

    EXECUTE format($sql$CREATE FUNCTION %1$s.bz_agent_conversation_run_links_sync() RETURNS trigger
                       LANGUAGE plpgsql AS $fn$
                       BEGIN
                           IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.run_id IS NOT NULL THEN
                               DELETE FROM %1$s.bz_agent_conversation_run_links WHERE run_id = OLD.run_id;
                           END IF;
                           IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.run_id IS NOT NULL THEN
                               INSERT INTO %1$s.bz_agent_conversation_run_links (run_id, archive_id, sequence)
                               VALUES (NEW.run_id, NEW.archive_id, NEW.sequence);
                           END IF;
                           RETURN NULL;
                       END $fn$ $sql$, home);
    EXECUTE format($sql$CREATE TRIGGER bz_agent_conversation_run_links_insert
                       AFTER INSERT ON %1$s FOR EACH ROW WHEN (NEW.run_id IS NOT NULL)
                       EXECUTE FUNCTION %2$s.bz_agent_conversation_run_links_sync() $sql$, events, home);
    EXECUTE format($sql$CREATE TRIGGER bz_agent_conversation_run_links_update
                       AFTER UPDATE OF run_id, archive_id, sequence ON %1$s FOR EACH ROW
                       WHEN (OLD.run_id IS DISTINCT FROM NEW.run_id OR OLD.archive_id <> NEW.archive_id
                             OR OLD.sequence <> NEW.sequence)
                       EXECUTE FUNCTION %2$s.bz_agent_conversation_run_links_sync() $sql$, events, home);
    EXECUTE format($sql$CREATE TRIGGER bz_agent_conversation_run_links_delete
                       AFTER DELETE ON %1$s FOR EACH ROW WHEN (OLD.run_id IS NOT NULL)
                       EXECUTE FUNCTION %2$s.bz_agent_conversation_run_links_sync() $sql$, events, home);

    -- Whoever runs this (a superuser, say), the new objects belong to the table's owner.
    SELECT array_agg(format('ALTER TABLE %s OWNER TO %s', oid::regclass, owner))
      INTO owned
      FROM pg_class
     WHERE oid = events OR oid = format('%s.bz_agent_conversation_run_links', home)::regclass
        OR oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = events);
    FOREACH stmt IN ARRAY owned || format('ALTER FUNCTION %s.bz_agent_conversation_run_links_sync() OWNER TO %s',
                                          home, owner) LOOP
        EXECUTE stmt;
    END LOOP;
END
$convert$;

-- Fresh statistics, or the first plans on the new partitions are guesses.
ANALYZE bz_agent_conversation_events;
ANALYZE bz_agent_conversation_run_links;
