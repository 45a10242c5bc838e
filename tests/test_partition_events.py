"""The optional conversion of the conversation events into a table partitioned by archive
(sql/optional/partition_events.sql, `bailing-admin db partition-events`): every row, key, index
and grant comes over, a run is still linked to at most one archive (under concurrent appends too),
a deleted archive still takes its events along, a second run changes nothing, and a failure
leaves the table as it was. These tests make their own databases, plain whatever
--events-partitions says; that option runs the other tests on converted ones."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from admin_app import create_app, migrations
from tests.conftest import EXAMPLES, SQL_DIR, cli_runner

ARCHIVES = 12
EVENTS_PER_ARCHIVE = 40

# Twelve ready archives of forty events each: turns of start, user message, run link, assistant
# message and end, so a fifth of the events link a run of their own.
SEED = (f"""
INSERT INTO bz_agent_conversation_archives (id, client_archive_id, client_conversation_id, creator_session_id,
       client_app_id, route_key, input_hash, state, member_count, last_sequence)
SELECT md5('archive' || a)::uuid, md5('client' || a)::uuid, 'conv-' || a, %(session)s,
       'crm-demo', 'customers', repeat('0', 64), 'ready', 1, {EVENTS_PER_ARCHIVE}
  FROM generate_series(1, {ARCHIVES}) a""", f"""
INSERT INTO bz_agent_conversation_events (archive_id, sequence, event_id, client_turn_id, kind, content,
       status, run_id, member_session_id, thread_id, body_sha256)
SELECT md5('archive' || a)::uuid, n, 'e' || n, 't' || (n - 1) / 5, k.kind,
       CASE WHEN k.kind LIKE '%%message' THEN k.kind || ' ' || a || ' number ' || n END,
       CASE WHEN k.kind = 'turn_end' THEN 'completed' END,
       CASE WHEN k.kind = 'run_link' THEN md5('run' || a || '-' || n)::uuid END,
       CASE WHEN k.kind = 'run_link' THEN %(session)s::uuid END,
       CASE WHEN k.kind = 'run_link' THEN n END,
       encode(sha256(convert_to(a || '-' || n, 'UTF8')), 'hex')
  FROM generate_series(1, {ARCHIVES}) a, generate_series(1, {EVENTS_PER_ARCHIVE}) n,
       LATERAL (SELECT (ARRAY['turn_end', 'turn_start', 'user_message', 'run_link',
                              'assistant_message'])[n %% 5 + 1] AS kind) k""")

ROWS = """SELECT count(*), md5(string_agg(e::text, '|' ORDER BY archive_id, sequence))
            FROM bz_agent_conversation_events e"""
COLUMNS = """SELECT attname, format_type(atttypid, atttypmod), attnotnull,
                    pg_get_expr(d.adbin, d.adrelid)
               FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE attrelid = 'bz_agent_conversation_events'::regclass AND attnum > 0 AND NOT attisdropped
              ORDER BY attnum"""
CONSTRAINTS = """SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
                  WHERE conrelid = 'bz_agent_conversation_events'::regclass ORDER BY conname"""
# A partitioned table's index reads "ON ONLY table": the same index otherwise.
INDEXES = """SELECT c.relname, replace(pg_get_indexdef(x.indexrelid), ' ON ONLY ', ' ON ')
               FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
              WHERE x.indrelid = 'bz_agent_conversation_events'::regclass ORDER BY c.relname"""
EVENT = """INSERT INTO bz_agent_conversation_events (archive_id, sequence, event_id, client_turn_id, kind,
                  run_id, body_sha256)
           VALUES (md5('archive' || %s)::uuid, %s, %s, 't0', 'run_link', %s, repeat('0', 64))"""


def query(url: str, statement: str, params=None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def plain(empty_db, tmp_path):
    """A fully migrated database with the plain events table (whatever the suite's option), its
    hub app, and the bailing-admin of that app."""
    migrations.upgrade(empty_db, SQL_DIR)
    app = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    yield empty_db, cli_runner(app)
    app.extensions["bailing"].db.dispose()


@pytest.fixture
def seeded(plain):
    url, cli = plain
    code, _, err = cli("config", "apply", str(EXAMPLES / "hub.json"))
    assert code == 0, err
    code, session, err = cli("sessions", "issue", "--client", "crm-demo", "--routes", "customers")
    assert code == 0, err
    for statement in SEED:
        query(url, statement, {"session": session["session_id"]})
    return url, cli


def relkind(url: str) -> str:
    return query(url, "SELECT relkind FROM pg_class WHERE oid = 'bz_agent_conversation_events'::regclass")[0][0]


def schema(url: str) -> dict[str, list[tuple]]:
    return {name: query(url, statement) for name, statement in
            (("columns", COLUMNS), ("constraints", CONSTRAINTS), ("indexes", INDEXES))}


def test_the_conversion_keeps_every_row_column_key_and_index(seeded):
    url, cli = seeded
    rows, before = query(url, ROWS), schema(url)
    linked = query(url, "SELECT run_id, archive_id, sequence FROM bz_agent_conversation_events "
                        "WHERE run_id IS NOT NULL ORDER BY run_id")

    code, out, err = cli("db", "partition-events", "--partitions", "4")
    assert code == 0, err
    assert out["converted"] is True and out["partitions"] == 4
    assert out["events"] == ARCHIVES * EVENTS_PER_ARCHIVE and out["run_links"] == len(linked) == ARCHIVES * 8

    assert query(url, ROWS) == rows
    after = schema(url)
    assert after["columns"] == before["columns"] and after["constraints"] == before["constraints"]
    # Every index under its own name and definition, but the one on run_id is no longer unique...
    run_index = ("bz_agent_conversation_events_run",
                 ("CREATE INDEX bz_agent_conversation_events_run ON public.bz_agent_conversation_events "
                  "USING btree (run_id) WHERE (run_id IS NOT NULL)"))
    assert after["indexes"] == [run_index if name == run_index[0] else (name, definition.replace(" ON ONLY ", " ON "))
                                for name, definition in before["indexes"]]
    # ...since the side table holds that rule, with every link there is.
    assert query(url, "SELECT run_id, archive_id, sequence FROM bz_agent_conversation_run_links "
                      "ORDER BY run_id") == linked

    assert relkind(url) == "p"
    spread = query(url, "SELECT tableoid::regclass::text, count(DISTINCT archive_id) FROM bz_agent_conversation_events "
                        "GROUP BY 1 ORDER BY 1")
    assert [name for name, _ in spread] == [f"bz_agent_conversation_events_p0{i}" for i in range(len(spread))]
    assert sum(n for _, n in spread) == ARCHIVES and len(spread) > 1
    # A partition's indexes are named after their parent's.
    partition_indexes = query(url, "SELECT indexname FROM pg_indexes "
                                   "WHERE tablename = 'bz_agent_conversation_events_p01'")
    assert {r[0] for r in partition_indexes} == {f"{name}_p01" for name, _ in before["indexes"]}

    state = migrations.status(url, SQL_DIR)
    assert state.problems == [] and state.pending == []
    assert migrations.PARTITION_EVENTS in [entry["file"] for entry in state.applied]


def test_a_run_is_still_linked_to_one_archive_only_even_by_concurrent_appends(seeded):
    url, cli = seeded
    assert cli("db", "partition-events", "--partitions", "4")[0] == 0
    taken = query(url, "SELECT run_id FROM bz_agent_conversation_events WHERE archive_id = md5('archive1')::uuid "
                       "AND run_id IS NOT NULL LIMIT 1")[0][0]
    with pytest.raises(psycopg.errors.UniqueViolation):
        query(url, EVENT, (2, 41, "again", taken))

    # Two archives in different partitions link one new run at once: the second waits for the
    # first to commit, then is refused.
    first, second = _archives_in_two_partitions(url)
    run = "0f0f0f0f-0000-4000-8000-000000000001"
    outcome: list[BaseException | None] = []
    with psycopg.connect(url) as one:
        one.execute(EVENT, (first, 41, "e41", run))

        def link_too():
            try:
                query(url, EVENT, (second, 41, "e41", run))
                outcome.append(None)
            except psycopg.Error as err:
                outcome.append(err)

        waiting = threading.Thread(target=link_too)
        waiting.start()
        assert _a_backend_waits_for_a_lock(url), "the second link must wait for the first transaction"
        assert waiting.is_alive()
        one.commit()
    waiting.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], psycopg.errors.UniqueViolation)
    assert query(url, "SELECT archive_id FROM bz_agent_conversation_run_links WHERE run_id = %s", (run,)) \
        == query(url, "SELECT md5('archive' || %s)::uuid", (first,))


def _a_backend_waits_for_a_lock(url: str) -> bool:
    for _ in range(100):
        if query(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND wait_event_type = 'Lock'")[0][0]:
            return True
        time.sleep(0.05)
    return False


def _archives_in_two_partitions(url: str) -> tuple[int, int]:
    """Numbers of two seeded archives that live in different partitions."""
    where = dict(query(url, "SELECT a, (SELECT tableoid::regclass::text FROM bz_agent_conversation_events "
                            "WHERE archive_id = md5('archive' || a)::uuid LIMIT 1) "
                            f"FROM generate_series(1, {ARCHIVES}) a"))
    first = 1
    second = next(a for a, part in where.items() if part != where[first])
    return first, second


def test_a_deleted_archive_still_takes_its_events_and_run_links_along(seeded):
    url, cli = seeded
    assert cli("db", "partition-events")[0] == 0
    assert query(url, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'bz_agent_conversation_events'::regclass") \
        == [(16,)]
    freed = query(url, "SELECT run_id FROM bz_agent_conversation_run_links WHERE archive_id = md5('archive3')::uuid")
    query(url, "DELETE FROM bz_agent_conversation_archives WHERE id = md5('archive3')::uuid")
    for table in ("bz_agent_conversation_events", "bz_agent_conversation_run_links"):
        assert query(url, f"SELECT count(*) FROM {table} WHERE archive_id = md5('archive3')::uuid") == [(0,)]
    assert query(url, "SELECT count(*) FROM bz_agent_conversation_events") == [((ARCHIVES - 1) * EVENTS_PER_ARCHIVE,)]
    # Its runs are free to be linked again, as with the unique index.
    query(url, EVENT, (4, 41, "e41", freed[0][0]))
    assert query(url, "SELECT archive_id FROM bz_agent_conversation_run_links WHERE run_id = %s", freed[0]) \
        == query(url, "SELECT md5('archive4')::uuid")


def test_a_second_run_changes_nothing_and_another_count_is_refused(seeded):
    url, cli = seeded
    assert cli("db", "partition-events", "--partitions", "4")[0] == 0
    rows = query(url, ROWS)
    code, out, _ = cli("db", "partition-events", "--partitions", "4")
    assert code == 0 and out["converted"] is False and out["partitions"] == 4
    code, _, err = cli("db", "partition-events", "--partitions", "8")
    assert code == 1 and err["error"] == "migration_error" and "already partitioned into 4" in err["message"]
    assert query(url, ROWS) == rows
    assert query(url, "SELECT count(*) FROM bz_schema_migrations WHERE filename = %s",
                 (migrations.PARTITION_EVENTS,)) == [(1,)]


def test_a_failed_conversion_leaves_the_table_as_it_was(seeded):
    url, cli = seeded
    # A unique index without archive_id cannot exist on the partitioned table: the conversion
    # fails at its very end, after every row was copied.
    query(url, "CREATE UNIQUE INDEX events_global ON bz_agent_conversation_events (body_sha256)")
    rows, before = query(url, ROWS), schema(url)
    code, _, err = cli("db", "partition-events")
    assert code == 1 and err["error"] == "migration_error", err
    assert "rolled back" in err["message"] and "must include all partitioning columns" in err["message"]
    assert query(url, ROWS) == rows and schema(url) == before
    assert relkind(url) == "r"
    assert query(url, "SELECT to_regclass('bz_agent_conversation_run_links')") == [(None,)]
    assert migrations.PARTITION_EVENTS not in [e["file"] for e in migrations.status(url, SQL_DIR).applied]


def test_the_record_and_the_schema_must_agree(seeded):
    url, cli = seeded
    assert cli("db", "partition-events", "--partitions", "2")[0] == 0
    query(url, "DELETE FROM bz_schema_migrations WHERE filename = %s", (migrations.PARTITION_EVENTS,))
    assert migrations.status(url, SQL_DIR).problems == [
        "bz_agent_conversation_events is partitioned but optional/partition_events.sql is not recorded as applied"]
    with pytest.raises(migrations.MigrationError, match="is not recorded"):
        migrations.upgrade(url, SQL_DIR)


def test_the_default_install_stays_plain_and_refuses_a_conversion_before_its_migrations(empty_db, tmp_path):
    migrations.upgrade(empty_db, SQL_DIR, to=60)
    with pytest.raises(migrations.MigrationError, match="Apply the pending migrations first"):
        migrations.partition_events(empty_db, SQL_DIR, 4)
    migrations.upgrade(empty_db, SQL_DIR)
    assert relkind(empty_db) == "r"
    assert query(empty_db, "SELECT to_regclass('bz_agent_conversation_run_links')") == [(None,)]
    assert all(not e["file"].startswith("optional/") for e in migrations.status(empty_db, SQL_DIR).applied)


def test_the_partition_count_is_checked(plain):
    _, cli = plain
    code, _, err = cli("db", "partition-events", "--partitions", "1")
    assert code == 1 and err["error"] == "invalid_request"
