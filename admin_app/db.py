"""Engine and sessions. One lazily created engine per process, so forked gunicorn workers
each get their own connection pool instead of sharing sockets inherited from the master."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

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
        self._engine: Engine | None = None
        self._pid: int | None = None
        self._sessions: sessionmaker[Session] | None = None
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

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            engine = create_engine(
                sqlalchemy_url(self.url()),
                pool_size=self.settings.db_pool_size,
                max_overflow=self.settings.db_max_overflow,
                pool_pre_ping=True,
                pool_recycle=1800,
                connect_args={"connect_timeout": 5, "application_name": "bailing-hub"},
            )
            event.listen(engine, "connect", _on_connect)
            self._engine = engine
            self._pid = os.getpid()
            self._sessions = sessionmaker(engine, expire_on_commit=False)
        return self._engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error, except
        an error marked `commit_anyway` (a refusal whose fail-closed side effect, such as
        revoking a session, must stand)."""
        self.engine  # noqa: B018 - makes sure this process has its engine and factory
        assert self._sessions is not None
        with self._sessions() as session:
            session.begin()
            try:
                yield session
            except BaseException as exc:
                if getattr(exc, "commit_anyway", False):
                    session.commit()
                else:
                    session.rollback()
                raise
            else:
                session.commit()

    def dispose(self) -> None:
        if self._engine is not None and self._pid == os.getpid():
            self._engine.dispose()
        self._engine = None
        self._sessions = None


def _on_connect(dbapi_conn, _record) -> None:
    # Timestamps leave the database in UTC whatever the server's own zone is.
    with dbapi_conn.cursor() as cur:
        cur.execute("SET TIME ZONE 'UTC'")
        # Statements are prepared after a few runs; a generic plan chosen while an archive was
        # small would then stay for its 20,000th event. Planning per call costs far less.
        cur.execute("SET plan_cache_mode = force_custom_plan")
    dbapi_conn.commit()


def pipelined(db: Session, *statements: tuple[str, dict]) -> list[list]:
    """Run psycopg statements (`%(name)s` parameters) in the session's transaction, all sent in
    one round trip. Each still runs after the one before it with a snapshot of its own, as if sent
    one by one; a failing one aborts the rest and raises. Returns each one's rows (namedtuples)."""
    from psycopg.rows import namedtuple_row

    conn = db.connection().connection.driver_connection
    cursors = []
    with conn.pipeline():
        for sql, params in statements:
            cursor = conn.cursor(row_factory=namedtuple_row)
            cursor.execute(sql, params)
            cursors.append(cursor)
    return [cursor.fetchall() if cursor.description else [] for cursor in cursors]
