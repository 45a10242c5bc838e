"""BAILING_EVIDENCE_HEAD_SECONDS (default 300; 0 turns it off): each serving process signs a tree
head at that cadence when leaves arrived since the latest head. Several processes may: a head is
made under a lock, and one already made at the tree's size is kept (heads.make_head)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..background import ProcessThread, interval_from, next_pause
from ..db import Database
from .heads import make_head_if_grown

ENV = "BAILING_EVIDENCE_HEAD_SECONDS"
DEFAULT_SECONDS = 300.0
LONGEST_PAUSE_SECONDS = 3600.0


def seconds_from(raw: str | None) -> float:
    """Unset or empty: the default; at or below 0: off; unreadable stops the start."""
    return interval_from(ENV, raw, DEFAULT_SECONDS)


@dataclass
class HeadWorker:
    database: Database
    data_dir: Path
    seconds: float = DEFAULT_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-evidence-heads", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop(timeout)

    def head_once(self) -> None:
        with self.database.session() as db:
            make_head_if_grown(db, self.data_dir)

    def _run(self) -> None:
        wait = self.seconds
        while not self.runner.stop_event.wait(wait):
            wait = next_pause(self.head_once, "evidence heads", wait, self.seconds,
                              max(self.seconds, LONGEST_PAUSE_SECONDS))


def init_app(app) -> None:
    """Sign heads on a schedule from the process's first request, unless the setting is 0."""
    seconds = seconds_from(os.environ.get(ENV))
    if seconds > 0:
        hub = app.extensions["bailing"]
        worker = HeadWorker(hub.db, hub.settings.data_dir, seconds)
        app.extensions["bailing.evidence_heads"] = worker
        app.before_request(worker.ensure_started)
