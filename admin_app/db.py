"""Engine and sessions. One lazily created engine per process, so forked gunicorn workers
each get their own connection pool instead of sharing sockets inherited from the master."""
from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Session, make_transient_to_detached, sessionmaker

from . import embedded_pg
from .config import Settings

_T = TypeVar("_T")
log = logging.getLogger(__name__)


class Base(DeclarativeBase):
    """Typed mappings of tables created by sql/*.sql; nothing here creates or alters a table."""


def sqlalchemy_url(url: str) -> str:
    """Accept the usual postgres:// and postgresql:// forms; always drive them with psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    raise ValueError("BAILING_DATABASE_URL must be a postgresql:// URL")


# ------------------------------------------------------------------ the read replica

# How often each process asks the replica how far behind it is; in between, reads trust the last
# answer. A replica that fails under a request counts as unavailable until the next check.
REPLICA_CHECK_SECONDS = 1.5
# A standby that does not answer at once is passed over: the primary answers instead.
REPLICA_CONNECT_TIMEOUT = 2
REPLICA_POOL_SIZE = 2

# Nothing missing (all WAL received is replayed, and a WAL receiver is there to receive more):
# lag 0, however long ago the primary last committed. Otherwise the age of the last transaction
# replayed (NULL before the first one since the standby started: not usable yet).
_REPLICA_LAG_SQL = """
    SELECT pg_is_in_recovery() AS standby,
           CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                     AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver) THEN 0
                ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
           END AS lag"""


@dataclass(frozen=True)
class ReadSource:
    """Which server answered a read session, and why not the replica when one is configured and
    was passed over (`problem`: "unavailable" or "lagging", with the lag measured)."""

    server: str  # "replica" or "primary"
    problem: str | None = None
    lag_seconds: float | None = None


@dataclass(frozen=True)
class _Health:
    pid: int
    at: float  # time.monotonic() of the check
    problem: str | None  # None: usable
    lag_seconds: float | None = None


class ReplicaLost(Exception):
    """The replica failed under a read session (its connection dropped, or it cancelled a query
    for replay): the work is to be done again on the primary (`Database.replica_retried`)."""


# Whether read sessions may use the replica: only inside `replica_retried` ("on"), which can do
# the work again on the primary after a ReplicaLost ("lost" while it does).
_replica_use: ContextVar[str] = ContextVar("bailing_replica_use", default="off")
_READ = "bailing.read_session"
_AFTER_READ = "bailing.after_read"


def _replica_failure(exc: BaseException) -> bool:
    """A failure of the server rather than of the query: a lost or refused connection, a
    shutdown, or a query cancelled because it conflicted with replay (SQLSTATE 40001)."""
    if isinstance(exc, DisconnectionError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    return bool(exc.connection_invalidated) or isinstance(
        exc.orig, psycopg.OperationalError | psycopg.errors.SerializationFailure)


class Database:
    def __init__(self, settings: Settings):
        self.settings = settings
        # (pid, engine, session factory) of the process that made them, published in one
        # assignment: a worker's first request and its notification thread reach for them at the
        # same moment, and neither may see an engine whose factory is not there yet.
        self._made: tuple[int, Engine, sessionmaker[Session]] | None = None
        self._making = threading.Lock()
        self._embedded: embedded_pg.Keeper | None = (
            None if settings.database_url else embedded_pg.Keeper(settings.data_dir))
        self._replica_made: tuple[int, Engine, sessionmaker[Session]] | None = None
        self._health: _Health | None = None
        self._checking = threading.Lock()

    def url(self) -> str:
        """The configured URL, or the embedded server's, which is started on first use."""
        if self._embedded is None:
            assert self.settings.database_url
            return self.settings.database_url
        return self._embedded.url()

    def revive(self) -> bool:
        """After a failed connection: whether the embedded server runs (again, when it had
        stopped and was started here), so that connecting is worth one more try. Never with
        BAILING_DATABASE_URL: an external server is its operator's to start."""
        return self._embedded is not None and self._embedded.revive()

    def down_reason(self) -> str | None:
        """Why the embedded server is down, when it stays down: "database_stopped" (by `db
        stop`) or "database_start_failed"."""
        return self._embedded.problem if self._embedded is not None else None

    def reviving(self, call: Callable[[str], _T]) -> _T:
        """`call(conninfo)`, for code that connects with psycopg itself: done once more when it
        could not connect and `revive` started the embedded server again."""
        try:
            return call(self.conninfo())
        except psycopg.OperationalError:
            if not self.revive():
                raise
        return call(self.conninfo())

    def conninfo(self) -> str:
        """A plain libpq URL for code that talks to psycopg directly (the migration runner)."""
        return make_url(sqlalchemy_url(self.url())).set(drivername="postgresql").render_as_string(
            hide_password=False
        )

    def _for_this_process(self) -> tuple[Engine, sessionmaker[Session]]:
        made = self._made
        if made is None or made[0] != os.getpid():
            with self._making:  # one engine per process, however many threads ask at once
                made = self._made
                if made is None or made[0] != os.getpid():
                    engine = self._create_engine()
                    made = self._made = (os.getpid(), engine, sessionmaker(engine, expire_on_commit=False))
        return made[1], made[2]

    def _create_engine(self) -> Engine:
        engine = create_engine(
            sqlalchemy_url(self.url()),
            pool_size=self.settings.db_pool_size,
            max_overflow=self.settings.db_max_overflow,
            pool_recycle=1800,
            # A failed statement's message (and so the log) never carries its bound values:
            # they can be secrets, token hashes or an agent's text.
            hide_parameters=True,
            connect_args={"connect_timeout": 5, "application_name": "bailing-hub"},
        )
        if self._embedded is not None:
            event.listen(engine, "do_connect", self._connect_reviving)
        return _listened(engine)

    def _connect_reviving(self, dialect, _record, cargs, cparams):
        """A new connection to the embedded server, started again first when it had stopped."""
        try:
            return dialect.connect(*cargs, **cparams)
        except psycopg.OperationalError:
            if not self.revive():
                raise
        # Started again, perhaps with its socket in another folder: later connections use it too.
        cparams["host"] = make_url(self.url()).query["host"]
        return dialect.connect(*cargs, **cparams)

    def _create_replica_engine(self, url: str) -> Engine:
        # A small pool kept open; bursts open overflow connections up to the primary's total, so
        # that a busy process never waits on this pool while the primary's would have served.
        total = self.settings.db_pool_size + self.settings.db_max_overflow
        engine = create_engine(
            sqlalchemy_url(url),
            pool_size=min(REPLICA_POOL_SIZE, total),
            max_overflow=max(total - REPLICA_POOL_SIZE, 0),
            pool_recycle=1800,
            hide_parameters=True,
            connect_args={"connect_timeout": REPLICA_CONNECT_TIMEOUT, "application_name": "bailing-hub-read"},
        )
        return _listened(engine)

    def _replica_for_this_process(self, url: str) -> tuple[Engine, sessionmaker[Session]]:
        made = self._replica_made
        if made is None or made[0] != os.getpid():
            with self._making:
                made = self._replica_made
                if made is None or made[0] != os.getpid():
                    engine = self._create_replica_engine(url)
                    made = self._replica_made = (os.getpid(), engine, sessionmaker(engine, expire_on_commit=False))
        return made[1], made[2]

    def existing_replica_engine(self) -> Engine | None:
        made = self._replica_made
        return made[1] if made is not None and made[0] == os.getpid() else None

    # -------------------------------------------------------------- read sessions

    def replica_health(self) -> ReadSource:
        """The replica as this process last saw it (checked again when the answer is older than
        REPLICA_CHECK_SECONDS): server "replica" when reads may use it, else "primary" and why."""
        if not self.settings.read_database_url:
            return ReadSource("primary")
        health = self._checked_health()
        if health.problem is None:
            return ReadSource("replica", lag_seconds=health.lag_seconds)
        return ReadSource("primary", health.problem, health.lag_seconds)

    def own_writes_seconds(self) -> float:
        """How long after a change the replica may still not show it: the lag bound, plus the
        age the last check's answer may have."""
        return self.settings.read_max_lag_seconds + REPLICA_CHECK_SECONDS

    def _fresh(self, health: _Health | None) -> bool:
        return health is not None and health.pid == os.getpid() \
            and time.monotonic() - health.at < REPLICA_CHECK_SECONDS

    def _checked_health(self) -> _Health:
        health = self._health
        if health is not None and self._fresh(health):
            return health
        # One thread asks; the others go on with the last answer meanwhile (or wait for the first).
        mine = health is not None and health.pid == os.getpid()
        if not self._checking.acquire(blocking=not mine):
            assert health is not None
            return health
        try:
            health = self._health
            if health is None or not self._fresh(health):
                health = self._set_health(self._check_replica())
            return health
        finally:
            self._checking.release()

    def _check_replica(self) -> _Health:
        url = self.settings.read_database_url
        assert url is not None
        try:
            engine = self._replica_for_this_process(url)[0]
            with engine.connect() as conn:
                row = conn.execute(text(_REPLICA_LAG_SQL)).one()
                conn.rollback()
        except (SQLAlchemyError, OSError):
            return _Health(os.getpid(), time.monotonic(), "unavailable")
        now = time.monotonic()
        if not row.standby:  # promoted: it no longer follows the primary
            return _Health(os.getpid(), now, "unavailable")
        if row.lag is None:
            return _Health(os.getpid(), now, "lagging")
        lag = max(float(row.lag), 0.0)
        return _Health(os.getpid(), now, None if lag <= self.settings.read_max_lag_seconds else "lagging", lag)

    def _replica_failed(self) -> None:
        self._set_health(_Health(os.getpid(), time.monotonic(), "unavailable"))

    def _set_health(self, health: _Health) -> _Health:
        # Said once per change (per process), not per request: reads quietly go to the primary.
        before = self._health
        if before is None or before.problem != health.problem:
            if health.problem is None:
                log.info("read replica in use again")
            else:
                lag = f" ({health.lag_seconds:.0f} s behind)" if health.lag_seconds is not None else ""
                log.warning("read replica %s%s: reads go to the primary", health.problem, lag)
        self._health = health
        return health

    def replica_retried(self, call: Callable[[], _T]) -> _T:
        """Run `call` (a view whose reads use `read_session`) letting those reads use the
        replica; when the replica fails under it, run it once more with every read on the primary.
        Only work whose writes wait for its reads (`after_read`) may be run twice this way."""
        token = _replica_use.set("on")
        try:
            try:
                return call()
            except ReplicaLost:
                _replica_use.set("lost")
                return call()
        finally:
            _replica_use.reset(token)

    @contextmanager
    def read_session(self, on_source: Callable[[ReadSource], None] | None = None,
                     primary: Session | None = None) -> Iterator[Session]:
        """A session in one READ ONLY transaction, for reads that may lag: on the replica when one
        is configured, answering and within BAILING_READ_MAX_LAG_SECONDS (and the caller runs in
        `replica_retried`), else on the primary. `on_source` learns which. Writes the reads lead
        to are queued with `after_read` and done on the primary once the reads went through.

        `primary`: the request's own open session, used as it is for reads on the primary, so
        that a request never holds two connections of the primary's pool at once."""
        source, session = self._planned_source(), None
        if source.server == "replica":
            session = self._replica_session()
            if session is None:  # not answering now: the primary answers instead
                source = ReadSource("primary", "unavailable")
        if on_source is not None:
            on_source(source)
        if session is None:
            if primary is not None:
                yield primary
                return
            session = _begin_read(self._for_this_process()[1], standby=False)
        try:
            with session:
                yield session
                writes = session.info.pop(_AFTER_READ, [])
                session.rollback()  # read only: nothing to commit
        except Exception as exc:
            if source.server == "replica" and _replica_failure(exc):
                self._replica_failed()
                raise ReplicaLost() from exc
            raise
        if writes:
            with self.session() as db:
                for write in writes:
                    write(db)

    def _planned_source(self) -> ReadSource:
        """Where a read session opened now goes, as far as this process knows."""
        use = _replica_use.get()
        if use == "lost":
            return ReadSource("primary", "unavailable")
        if use == "on" and self.settings.read_database_url:
            return self.replica_health()
        return ReadSource("primary")

    def _replica_session(self) -> Session | None:
        url = self.settings.read_database_url
        assert url is not None
        try:
            return _begin_read(self._replica_for_this_process(url)[1], standby=True)
        except SQLAlchemyError as exc:
            if not _replica_failure(exc):
                raise
        self._replica_failed()
        return None

    @staticmethod
    def after_read(db: Session, write: Callable[[Session], None]) -> None:
        """`write(session)` on the primary: at once in a read-write session, or for a read
        session once its reads went through (a read-only transaction, on a standby above all,
        cannot write). A read that fails writes nothing either way."""
        if db.info.get(_READ):
            db.info.setdefault(_AFTER_READ, []).append(write)
        else:
            write(db)

    @property
    def engine(self) -> Engine:
        return self._for_this_process()[0]

    def existing_engine(self) -> Engine | None:
        """This process's engine if it has made one (never makes one, or starts a server)."""
        made = self._made
        return made[1] if made is not None and made[0] == os.getpid() else None

    @contextmanager
    def session(self, connection: Connection | None = None) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error, except
        an error marked `commit_anyway` (a refusal whose fail-closed side effect, such as
        revoking a session, must stand). On `connection` (one the caller checked out and keeps
        across several transactions) instead of one of its own from the pool."""
        sessions = self._for_this_process()[1]
        with (sessions(bind=connection) if connection is not None else sessions()) as session:
            session.begin()
            try:
                yield session
            except BaseException as exc:
                if getattr(exc, "commit_anyway", False):
                    session.commit()  # without the writes queued for the commit: work failed
                else:
                    session.rollback()
                raise
            else:
                _commit(session)

    def dispose(self) -> None:
        with self._making:
            for engine in (self.existing_engine(), self.existing_replica_engine()):
                if engine is not None:
                    engine.dispose()
            self._made = self._replica_made = None


def _begin_read(sessions: sessionmaker[Session], standby: bool) -> Session:
    """A session whose transaction already has its connection, so that a server that cannot be
    reached fails here. A standby refuses writes by itself (and any BEGIN READ WRITE, so the
    connection's read_only attribute stays unset); on the primary the transaction is made READ
    ONLY, so that a read that would write fails alike with or without a replica."""
    session = sessions()
    session.info[_READ] = True
    try:
        if standby:
            session.connection()
        else:
            session.execute(text("SET TRANSACTION READ ONLY"))
    except BaseException:
        session.close()
        raise
    return session


def _listened(engine: Engine) -> Engine:
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "checkin", _on_checkin)
    event.listen(engine, "checkout", _on_checkout)
    return engine


_AT_COMMIT = "bailing.at_commit"


def at_commit(db: Session, *statements: tuple[str, dict]) -> None:
    """A request's last writes (psycopg statements whose rows nobody reads), sent in the round
    trip of its COMMIT: they are committed with the rest or, when one fails, nothing is. They are
    prepared, as in `pipelined`, and the same rule holds for them."""
    db.info.setdefault(_AT_COMMIT, []).extend(statements)


def _driver_connection(db: Session) -> psycopg.Connection[Any]:
    """The psycopg connection under the session's transaction."""
    conn = db.connection().connection.driver_connection
    assert conn is not None  # a checked-out connection always holds its driver's
    return conn


def _commit(session: Session) -> None:
    statements = session.info.pop(_AT_COMMIT, None)
    if not statements:
        session.commit()
        return
    session.flush()  # ORM writes first, outside the pipeline (they read their row counts)
    conn = _driver_connection(session)
    try:
        try:
            with conn.pipeline():
                for sql, params in statements:
                    conn.cursor().execute(sql, params, prepare=True)
                conn.commit()  # COMMIT in the statements' round trip, synced in the pipeline
        except psycopg.Error as exc:  # as SQLAlchemy would raise it (IntegrityError, ...)
            raise DBAPIError.instance(None, None, exc, psycopg.Error,
                                      hide_parameters=True) from exc
        # Only now may the session hand the connection back to the pool: a commit inside the
        # pipeline would return it while the pipeline is still open, for another thread to take.
        session.commit()  # the transaction is already over: psycopg sends nothing more
    except BaseException:
        # The session counts its commit as done, so the pool would not roll back: do it here,
        # or the connection would go back to the pool inside the failed transaction.
        conn.rollback()
        raise


def _on_connect(dbapi_conn, _record) -> None:
    # Timestamps leave the database in UTC whatever the server's own zone is.
    with dbapi_conn.cursor() as cur:
        cur.execute("SET TIME ZONE 'UTC'")
    dbapi_conn.commit()
    # Queries are planned for the values they are run with: psycopg would otherwise prepare a
    # statement after five runs, and PostgreSQL could then keep a generic plan chosen while an
    # archive was small for its 20,000th event. Only the hot statements of `pipelined` and
    # `at_commit` are prepared (they ask for it; None here would refuse even that).
    dbapi_conn.prepare_threshold = 2**31 - 1


# A pooled connection is pinged (a round trip) before use only when it may have died while idle:
# something arrived on its socket (a server ending a connection says so first), or it sat unused
# for a while (a network drop says nothing). A dead one is replaced before the request sees it.
PING_AFTER_IDLE_SECONDS = 30.0


def _on_checkin(_dbapi_conn, record) -> None:
    record.info["idle_since"] = time.monotonic()


def _spoke_while_idle(dbapi_conn) -> bool:
    """Whether anything arrived on an idle connection's socket (poll: any descriptor number)."""
    poller = select.poll()
    poller.register(dbapi_conn.pgconn.socket, select.POLLIN)
    return bool(poller.poll(0))


def _on_checkout(dbapi_conn, record, _proxy) -> None:
    idle_since = record.info.pop("idle_since", None)
    if idle_since is None:  # a new connection
        return
    try:
        spoke = _spoke_while_idle(dbapi_conn)
    except Exception:  # noqa: BLE001 - no socket left: certainly dead
        raise DisconnectionError("the connection was closed while idle") from None
    if spoke or time.monotonic() - idle_since > PING_AFTER_IDLE_SECONDS:
        try:
            with dbapi_conn.cursor() as cur:
                cur.execute(";")
            dbapi_conn.rollback()
        except Exception:  # noqa: BLE001 - any failure here means: do not use it
            raise DisconnectionError("the connection did not answer a ping") from None


def pipelined(db: Session, *statements: tuple[str, dict]) -> list[list]:
    """Run psycopg statements (`%(name)s` parameters) in the session's transaction, all sent in
    one round trip (when the transaction has yet to begin, psycopg sends its BEGIN in one of its
    own first). Each still runs after the one before it with a snapshot of its own, as if sent
    one by one; a failing one aborts the rest and raises. Returns each one's rows (namedtuples).

    These are the hot paths, so they are prepared and may run on a generic plan: send only
    statements whose plan cannot depend on the values (lookups by key, inserts, updates by key)."""
    conn = _driver_connection(db)
    cursors = []
    with conn.pipeline():
        for sql, params in statements:
            cursor = conn.cursor(row_factory=namedtuple_row)
            cursor.execute(sql, params, prepare=True)
            cursors.append(cursor)
    return [_rows(cursor) for cursor in cursors]


def _rows(cursor: psycopg.Cursor[Any]) -> list[Any]:
    result = cursor.pgresult
    assert result is not None  # every statement of a synced pipeline has its result
    return cursor.fetchall() if result.status == ExecStatus.TUPLES_OK else []


_Model = TypeVar("_Model", bound=Base)


def attach_loaded(db: Session, instance: _Model) -> _Model:
    """An ORM object built from a row read with `pipelined`, made part of the session as if the
    ORM had loaded it (unmodified, in the identity map; the session's copy if it holds one)."""
    make_transient_to_detached(instance)
    return db.merge(instance, load=False)
