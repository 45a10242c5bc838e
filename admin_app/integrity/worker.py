"""BAILING_EVIDENCE_VERIFY_SECONDS (default 3600; 0 turns it off): each serving process runs a
verifier pass (verifier.run_pass) at that cadence, counted from its first request. Several
processes each run theirs: a pass only reads and records itself, so two at once cost twice the
reading and nothing else; the console and the metrics read the latest finished one."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..background import ProcessThread, interval_from, next_pause
from ..db import Database
from .verifier import run_pass

ENV = "BAILING_EVIDENCE_VERIFY_SECONDS"
DEFAULT_SECONDS = 3600.0
LONGEST_PAUSE_SECONDS = 6 * 3600.0
EXTENSION = "bailing.evidence_verifier"


def seconds_from(raw: str | None) -> float:
    """Unset or empty: the default; at or below 0: off; unreadable stops the start."""
    return interval_from(ENV, raw, DEFAULT_SECONDS)


@dataclass
class VerifyWorker:
    database: Database
    seconds: float = DEFAULT_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-evidence-verifier", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop(timeout)

    def verify_once(self) -> None:
        run_pass(self.database)

    def _run(self) -> None:
        wait = self.seconds
        while not self.runner.stop_event.wait(wait):
            wait = next_pause(self.verify_once, "evidence verifier", wait, self.seconds,
                              max(self.seconds, LONGEST_PAUSE_SECONDS))


def init_app(app) -> None:
    """Verify on a schedule from the process's first request, unless the setting is 0."""
    seconds = seconds_from(os.environ.get(ENV))
    if seconds > 0:
        worker = VerifyWorker(app.extensions["bailing"].db, seconds)
        app.extensions[EXTENSION] = worker
        app.before_request(worker.ensure_started)
