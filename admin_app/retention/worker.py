"""BAILING_RETENTION_PURGE_SECONDS (default 6 h; 0 turns it off): each serving process runs the
retention purge at that cadence, the first time a minute after its first request. Several
processes may: a run holds purge.RUN_LOCK and another process's pass meanwhile skips; a pass with
no policy that expires anything records nothing."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..background import ProcessThread, interval_from, next_pause
from ..db import Database
from . import purge

log = logging.getLogger(__name__)

ENV = "BAILING_RETENTION_PURGE_SECONDS"
DEFAULT_SECONDS = 6 * 3600.0
FIRST_PASS_SECONDS = 60.0


def seconds_from(raw: str | None) -> float:
    """Unset or empty: the default; at or below 0: off; unreadable stops the start."""
    return interval_from(ENV, raw, DEFAULT_SECONDS)


@dataclass
class PurgeWorker:
    database: Database
    seconds: float = DEFAULT_SECONDS
    first_pass_seconds: float = FIRST_PASS_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-retention-purge", self._run, again=False)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop(timeout)

    def purge_once(self) -> None:
        report = purge.run(self.database, purge.SCHEDULER, scheduled=True)
        if report and report["redacted"]:
            log.info("retention purge: %d messages redacted in %d archives (%d held archives skipped)",
                     report["redacted"], report["archives"], report["held"])

    def _run(self) -> None:
        wait = self.first_pass_seconds
        while not self.runner.stop_event.wait(wait):
            # A failed pass is tried again at the next one, not sooner.
            next_pause(self.purge_once, "retention purge", self.seconds, self.seconds, self.seconds)
            wait = self.seconds


def init_app(app) -> None:
    """Purge on a schedule from the process's first request, unless the setting is 0."""
    seconds = seconds_from(os.environ.get(ENV))
    if seconds > 0:
        worker = PurgeWorker(app.extensions["bailing"].db, seconds)
        app.extensions["bailing.retention_purge"] = worker
        app.before_request(worker.ensure_started)
