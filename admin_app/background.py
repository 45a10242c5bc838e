"""The background threads of a hub process (notification deliveries, spec auto refresh, the
configuration-change log's retention): each is started by the process's first request, so every
process, a forked gunicorn worker too, runs its own, and a pass that fails never ends it."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from . import migrations
from .db import Database

log = logging.getLogger(__name__)

SCHEMA_POLL_FIRST_SECONDS = 0.5  # then doubled up to the worker's own poll


@dataclass
class ProcessThread:
    """One daemon thread running `target`, which returns once `stop` is set. `again`: started
    anew by a later request if it ended; otherwise once per process (a schedule counted from the
    process's start)."""

    name: str
    target: Callable[[], None]
    again: bool = True
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def _running(self) -> bool:
        return self.thread is not None and (self.thread.is_alive() or not self.again)

    def ensure_started(self) -> None:
        if self._running():
            return
        with self._lock:
            if self._running():
                return
            self.stop_event.clear()
            self.thread = threading.Thread(target=self.target, name=self.name, daemon=True)
            self.thread.start()

    def stop(self, timeout: float) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout)


def interval_from(env: str, raw: str | None, default: float) -> float:
    """A worker's interval setting: unset or empty is `default`, a number at or below 0 is off
    (0.0); anything else unreadable stops the start, naming the setting."""
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{env} must be a number of seconds, got {raw!r}") from None
    return value if value > 0 else 0.0


def next_pause(run_pass: Callable[[], object], what: str, pause: float, normal: float,
               longest: float) -> float:
    """Run one pass and return the wait before the next: `normal` after a success, doubled up to
    `longest` after a failure (the database away or not migrated, said once per outage; a bug,
    logged with its trace)."""
    try:
        run_pass()
        return normal
    except SQLAlchemyError as err:
        if pause == normal:
            log.warning("%s paused: %s", what, str(err).splitlines()[0])
    except Exception:
        log.exception("%s pass failed", what)
    return min(pause * 2, longest)


# (database URL, migrations folder) seen with nothing pending by a worker of this process: a
# migration is never undone, so the others need not ask again (each asks with a connection of its
# own and reads every migration file).
_SCHEMA_READY: set[tuple[str, Path]] = set()


def wait_for_schema(database: Database, sql_dir: Path, stop: threading.Event, what: str,
                    longest: float) -> bool:
    """Before a worker's first pass: wait while migrations are pending, as they are while a fresh
    hub's schema is applied (the demo serves before it migrates), so that a table not there yet is
    not reported as a failure. Said once at INFO; a database that cannot be asked, or a broken
    migration folder, is a warning (once). True once nothing is pending; False when stopped.
    Checked only at the start: a table missing later is a real failure, which `next_pause` reports."""
    pause, said, warned = min(SCHEMA_POLL_FIRST_SECONDS, longest), False, False
    if (database.url(), sql_dir) in _SCHEMA_READY:  # another worker of this process saw it complete
        return True
    while not stop.is_set():
        try:
            state = database.reviving(lambda conninfo: migrations.status(conninfo, sql_dir))
        except (psycopg.Error, migrations.MigrationError) as err:
            if not warned:
                log.warning("%s wait: the schema could not be read: %s", what, str(err).splitlines()[0])
                warned = True
        else:
            if not state.pending:
                _SCHEMA_READY.add((database.url(), sql_dir))
                return True
            if not said:
                log.info("%s wait for the schema: %d migrations pending (bailing-admin db upgrade)",
                         what, len(state.pending))
                said = True
        stop.wait(pause)
        pause = min(pause * 2, longest)
    return False
