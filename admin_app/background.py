"""The background threads of a hub process (notification deliveries, spec auto refresh, the
configuration-change log's retention): each is started by the process's first request, so every
process, a forked gunicorn worker too, runs its own, and a pass that fails never ends it."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)


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
