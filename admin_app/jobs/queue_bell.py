"""How a waiting claim learns at once that work arrived: PostgreSQL LISTEN/NOTIFY.

`announce` (jobs/claims.py) sends `NOTIFY bz_jobs_queued` in the transaction that queues a job,
so the notice leaves when, and only if, that transaction commits, from whichever process or host
committed it. Each serving process keeps ONE connection of its own (outside the pool) that
LISTENs, and rings a process-wide bell; the claims waiting in that process wait on the bell and
hold no database connection while they wait. So however many executors long-poll, a process
uses its pool only for the short claim attempts, plus this one connection.

The bound: N executors waiting in a process hold no pooled connection and one listener
connection between them; a notice wakes only the claims waiting for its target, each of which
takes a pooled connection for one short transaction (its claim attempt). Waiting claims also look
again without a notice every claims.POLL_LISTENING_SECONDS (for what nothing announces: a pause,
a due run_after), every claims.POLL_DEAF_SECONDS while the listener is down.

The listener starts with the first claim that waits and ends after IDLE_SECONDS without one; a
lost connection is opened again by the next wait."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from ..db import Database

log = logging.getLogger(__name__)

CHANNEL = "bz_jobs_queued"
IDLE_SECONDS = 30.0
LISTEN_TICK_SECONDS = 0.5  # how often the listener looks up from the socket to see if it may stop


class QueueBell:
    """The bell of one database in one process. A notice names its target; a waiter reads the
    bell's mark for its targets (`mark`) before its claim attempt and waits for the mark to move,
    so a notice that arrives between the attempt and the wait is never missed, and a notice for
    another target wakes nobody but those who want it."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        self._cond = threading.Condition()
        self._everyone = 0  # rung for all: the listener (re)connected
        self._by_target: dict[str, int] = {}
        self.listening = False  # connected and LISTENing: notices will arrive
        self._thread: threading.Thread | None = None
        self._last_wait = time.monotonic()
        self._waiting = 0
        self._warned = False  # said once per outage

    def ring(self, target: str | None = None) -> None:
        with self._cond:
            if target is None:
                self._everyone += 1
            else:
                self._by_target[target] = self._by_target.get(target, 0) + 1
            self._cond.notify_all()

    def mark(self, targets: list[str]) -> tuple[int, int]:
        with self._cond:
            return self._everyone, sum(self._by_target.get(t, 0) for t in targets)

    def wait(self, targets: list[str], seen: tuple[int, int], timeout: float) -> bool:
        """Wait up to `timeout` for a notice for `targets` after the mark `seen`; True when one
        came. Starts the listener when it is not running."""
        self._ensure_listening()
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: self._mark(targets) != seen, timeout)
            finally:
                self._waiting -= 1
                self._last_wait = time.monotonic()

    def _mark(self, targets: list[str]) -> tuple[int, int]:  # under the lock
        return self._everyone, sum(self._by_target.get(t, 0) for t in targets)

    def _ensure_listening(self) -> None:
        with self._cond:
            self._last_wait = time.monotonic()
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._listen, name="bailing-job-bell", daemon=True)
            self._thread.start()

    def _idle(self) -> bool:
        with self._cond:
            return self._waiting == 0 and time.monotonic() - self._last_wait > IDLE_SECONDS

    def _listen(self) -> None:
        try:
            with self._connect() as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                self.listening, self._warned = True, False
                # A notice may have been sent before LISTEN took effect: wake the waiters once,
                # so they look again now that nothing more is missed.
                self.ring()
                while not self._idle():
                    for notice in conn.notifies(timeout=LISTEN_TICK_SECONDS):
                        self.ring(notice.payload)
        except psycopg.Error as err:
            with self._cond:
                quiet = self._warned or self._waiting == 0  # nobody is waiting: the next wait retries
            if not quiet:
                self._warned = True
                log.warning("job bell: not listening (%s); claims poll until it is back",
                            str(err).splitlines()[0] if str(err) else type(err).__name__)
        finally:
            self.listening = False


def bell_for(database: Database) -> QueueBell:
    """The bell of `database` in this process: its listener connects on its own (not from the
    pool), starting the embedded server again when it had stopped."""
    return QueueBell(lambda: database.reviving(lambda info: psycopg.connect(info, autocommit=True)))
