"""Engine and sessions. One lazily created engine per process, so forked gunicorn workers
each get their own connection pool instead of sharing sockets inherited from the master."""
from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, make_transient_to_detached, sessionmaker

from .config import Settings


class Base(DeclarativeBase):
    """Typed mappings of tables created by sql/*.sql; nothing here creates or alters a table."""


def sqlalchemy_url(url: str) -> str:
    """Accept the usual postgres:// and postgresql:// forms; always drive them with psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    raise ValueError("BAILING_DATABASE_URL must be a postgresql:// URL")


class Database:
    def __init__(self, settings: Settings):
        self.settings = settings
        # (pid, engine, session factory) of the process that made them, published in one
        # assignment: a worker's first request and its notification thread reach for them at the
        # same moment, and neither may see an engine whose factory is not there yet.
        self._made: tuple[int, Engine, sessionmaker[Session]] | None = None
        self._making = threading.Lock()
        self._url: str | None = None

    def url(self) -> str:
        """The configured URL, or the embedded server's, which is started on first use."""
        if self.settings.database_url:
            return self.settings.database_url
        if self._url is None:
            from . import embedded_pg

            self._url = embedded_pg.ensure_running(self.settings.data_dir)
        return self._url

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
        event.listen(engine, "connect", _on_connect)
        event.listen(engine, "checkin", _on_checkin)
        event.listen(engine, "checkout", _on_checkout)
        return engine

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
            engine = self.existing_engine()
            if engine is not None:
                engine.dispose()
            self._made = None


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
