"""Auto refresh: every PASS_SECONDS each serving process runs `refresh.refresh_due`.

Every process of every host runs the pass; the database decides who pulls what (a due provider
is claimed and its attempt time moved in one statement, refresh.py), so a provider is pulled once
per `auto_refresh_min`, measured from its last attempt, however many processes there are, and a
restart does not pull everything again (Core keeps the attempt times in memory; here they are
the provider's `spec_pull_attempted_at`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..background import ProcessThread, next_pause, wait_for_schema
from ..db import Database
from .refresh import refresh_due

PASS_SECONDS = 60.0
ERROR_PAUSE_MAX_SECONDS = 600.0  # the longest wait after the database failed a pass


@dataclass
class SpecRefreshWorker:
    """The auto-refresh thread of one hub process, started by its first request."""

    database: Database
    pass_seconds: float = PASS_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-spec-refresh", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 25.0) -> None:
        """Ends the thread after the pull in flight (if any) is recorded."""
        self.runner.stop(timeout)

    def _run(self) -> None:
        stop, pause = self.runner.stop_event, self.pass_seconds
        if not wait_for_schema(self.database, self.database.settings.sql_dir, stop, "spec auto refresh",
                               self.pass_seconds):
            return
        while not stop.is_set():
            pause = next_pause(lambda: refresh_due(self.database, stop), "spec auto refresh", pause,
                               self.pass_seconds, ERROR_PAUSE_MAX_SECONDS)
            stop.wait(pause)
