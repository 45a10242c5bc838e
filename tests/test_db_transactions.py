"""The request transaction (`Database.session`): writes sent with the COMMIT, and pooled
connections that died while idle."""
from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DisconnectionError, IntegrityError

from admin_app import db as db_module
from admin_app.db import at_commit, pipelined


@pytest.fixture
def database(app, sql):
    sql("CREATE TABLE t_writes (id integer PRIMARY KEY, note text NOT NULL)")
    return app.extensions["bailing"].db


def rows(sql):
    return sql("SELECT id, note FROM t_writes ORDER BY id")


INSERT = "INSERT INTO t_writes (id, note) VALUES (%(id)s, %(note)s)"


def test_writes_sent_with_the_commit_are_committed_with_the_rest(database, sql):
    with database.session() as db:
        db.execute(text("INSERT INTO t_writes VALUES (1, 'first')"))
        at_commit(db, (INSERT, {"id": 2, "note": "second"}), (INSERT, {"id": 3, "note": "third"}))
        assert rows(sql) == []  # nothing is visible before the commit

    assert rows(sql) == [(1, "first"), (2, "second"), (3, "third")]


def test_a_failing_write_sent_with_the_commit_leaves_nothing(database, sql):
    with pytest.raises(IntegrityError, match="null value"):  # noqa: PT012 - leaving the session is what raises
        with database.session() as db:
            db.execute(text("INSERT INTO t_writes VALUES (1, 'first')"))
            at_commit(db, (INSERT, {"id": 2, "note": "second"}), (INSERT, {"id": 3, "note": None}))

    assert rows(sql) == []
    # The pooled connection is usable again.
    with database.session() as db:
        at_commit(db, (INSERT, {"id": 4, "note": "after"}))
    assert rows(sql) == [(4, "after")]


def test_a_failing_statement_never_shows_its_bound_values(database):
    with pytest.raises(IntegrityError) as raised:  # noqa: PT012 - leaving the session is what raises
        with database.session() as db:
            db.execute(text("INSERT INTO t_writes VALUES (1, 'secret-value-1')"))
            db.execute(text("INSERT INTO t_writes VALUES (:id, :note)"),
                       {"id": 1, "note": "secret-value-2"})
    assert "secret-value-2" not in str(raised.value)
    assert "hidden due to hide_parameters" in str(raised.value)


def test_writes_queued_by_work_that_then_fails_are_never_sent(database, sql):
    with pytest.raises(RuntimeError):  # noqa: PT012 - leaving the session is what raises
        with database.session() as db:
            at_commit(db, (INSERT, {"id": 1, "note": "queued"}))
            raise RuntimeError("the request failed after queueing its last writes")

    assert rows(sql) == []


class Refusal(Exception):
    commit_anyway = True  # like a refusal whose fail-closed side effect must stand


def test_a_refusal_that_commits_anyway_keeps_its_side_effect_but_not_the_queued_writes(database, sql):
    with pytest.raises(Refusal):  # noqa: PT012 - leaving the session is what raises
        with database.session() as db:
            db.execute(text("INSERT INTO t_writes VALUES (1, 'side effect')"))
            at_commit(db, (INSERT, {"id": 2, "note": "queued"}))
            raise Refusal()

    assert rows(sql) == [(1, "side effect")]


def test_orm_changes_are_flushed_before_the_writes_sent_with_the_commit(database, sql):
    from admin_app.identity.models import ClientApp

    with database.session() as db:
        db.add(ClientApp(app_id="flush-first", name="Flush first", enabled=True, allowed_routes=[]))
        at_commit(db, (("INSERT INTO t_writes (id, note) SELECT 1, name FROM bz_client_apps "
                        "WHERE app_id = 'flush-first'"), {}))

    assert rows(sql) == [(1, "Flush first")]


def test_a_connection_goes_back_to_the_pool_only_after_its_pipeline_has_ended(database, sql):
    from sqlalchemy import event

    returned_mid_pipeline = []

    def on_checkin(dbapi_conn, _record):
        returned_mid_pipeline.append(dbapi_conn._pipeline is not None)

    event.listen(database.engine, "checkin", on_checkin)
    try:
        with database.session() as db:
            at_commit(db, (INSERT, {"id": 1, "note": "with the commit"}))
    finally:
        event.remove(database.engine, "checkin", on_checkin)
    assert returned_mid_pipeline == [False]
    assert rows(sql) == [(1, "with the commit")]


def test_threads_sharing_a_small_pool_never_share_a_connection(app, sql):
    """Sessions that send writes with the COMMIT and plain ones, side by side on a pool smaller
    than the threads: every one commits, once, and none fails."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from admin_app.db import Database

    sql("CREATE TABLE t_writes (id integer PRIMARY KEY, note text NOT NULL)")
    settings = app.extensions["bailing"].settings
    database = Database(replace(settings, db_pool_size=2, db_max_overflow=0))

    def work(n: int) -> int:
        with database.session() as db:
            if n % 2:
                at_commit(db, (INSERT, {"id": n, "note": "pipelined"}))
            else:
                db.execute(text("INSERT INTO t_writes VALUES (:id, 'plain')"), {"id": n})
        return n

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            done = list(pool.map(work, range(400)))
    finally:
        database.dispose()
    assert done == list(range(400))
    assert [n for n, _ in rows(sql)] == list(range(400))


def test_threads_that_first_reach_a_new_database_at_once_share_one_engine(app, monkeypatch):
    """A forked gunicorn worker's first request and its notification thread make the process's
    engine at the same moment: neither may see it half made (this was a 500 now and then, after
    a worker restart), and only one is made."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from admin_app.db import Database

    database = Database(app.extensions["bailing"].settings)
    made = []
    slow_factory = db_module.sessionmaker

    def sessionmaker(engine, **kwargs):
        made.append(engine)
        time.sleep(0.2)  # widens the moment between the engine and its session factory
        return slow_factory(engine, **kwargs)

    monkeypatch.setattr(db_module, "sessionmaker", sessionmaker)
    start = threading.Barrier(4)

    def first_use(_: int) -> int:
        start.wait()
        with database.session() as db:
            return db.execute(text("SELECT 1")).scalar_one()

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            assert list(pool.map(first_use, range(4))) == [1, 1, 1, 1]
        assert made == [database.engine]
    finally:
        database.dispose()


def backend_pids(sql) -> list[int]:
    return [pid for (pid,) in sql(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'bailing-hub'")]


def wait_until_gone(sql, pid: int) -> None:
    """Until the ended backend has exited (its goodbye is then on the client's socket)."""
    deadline = time.monotonic() + 10
    while sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, "the backend did not exit"
        time.sleep(0.01)


def test_a_pooled_connection_ended_by_the_server_is_replaced_before_use(database, sql):
    with database.session() as db:
        first = pipelined(db, ("SELECT pg_backend_pid() AS pid", {}))[0][0].pid
    assert backend_pids(sql) == [first]

    sql("SELECT pg_terminate_backend(%s)", (first,))
    wait_until_gone(sql, first)

    with database.session() as db:  # no error: the dead connection is noticed and replaced
        second = pipelined(db, ("SELECT pg_backend_pid() AS pid", {}))[0][0].pid
        db.execute(text("INSERT INTO t_writes VALUES (1, 'after a restart')"))
    assert second != first
    assert rows(sql) == [(1, "after a restart")]


class Record:
    """What the pool keeps beside a connection (its `info`)."""

    def __init__(self, idle_for: float | None):
        self.info = {} if idle_for is None else {"idle_since": time.monotonic() - idle_for}


class Counting:
    """A real connection that counts the cursors opened on it (a ping opens one)."""

    def __init__(self, conn):
        self.conn, self.cursors = conn, 0
        self.pgconn = conn.pgconn

    def cursor(self):
        self.cursors += 1
        return self.conn.cursor()

    def rollback(self):
        self.conn.rollback()


@pytest.fixture
def raw(database):
    conn = psycopg.connect(database.conninfo())
    yield conn
    conn.close()


@pytest.mark.parametrize("idle_for, pinged", [
    (None, False),  # just connected
    (0.0, False),  # back in the pool a moment ago
    (db_module.PING_AFTER_IDLE_SECONDS + 1, True),
])
def test_only_a_connection_idle_for_long_is_pinged(raw, idle_for, pinged):
    conn = Counting(raw)
    db_module._on_checkout(conn, Record(idle_for), None)  # a live connection passes either way
    assert conn.cursors == (1 if pinged else 0)


def test_a_connection_the_server_ended_is_refused_at_checkout_without_waiting_for_idleness(raw, sql):
    sql("SELECT pg_terminate_backend(%s)", (raw.info.backend_pid,))
    wait_until_gone(sql, raw.info.backend_pid)
    with pytest.raises(DisconnectionError):
        db_module._on_checkout(Counting(raw), Record(0.0), None)


def test_a_silently_dead_connection_fails_its_ping_after_a_long_idle(raw, sql, monkeypatch):
    sql("SELECT pg_terminate_backend(%s)", (raw.info.backend_pid,))
    wait_until_gone(sql, raw.info.backend_pid)
    # As behind a dropped network, the socket says nothing: only the ping can find out.
    monkeypatch.setattr(db_module, "_spoke_while_idle", lambda conn: False)
    conn = Counting(raw)
    with pytest.raises(DisconnectionError):
        db_module._on_checkout(conn, Record(db_module.PING_AFTER_IDLE_SECONDS + 1), None)
    assert conn.cursors == 1
