"""Wakes the delivery workers of this process when an approval's transaction commits, so a
notification leaves at once instead of at the next poll. Other processes find the row at their
next poll (`worker.POLL_SECONDS`)."""
from __future__ import annotations

import threading


class Bell:
    """A counter and a condition: a waiter remembers the count it saw, so a ring between its
    last look and its wait is never missed, and every waiter hears every ring."""

    def __init__(self) -> None:
        self._rung = 0
        self._condition = threading.Condition()

    @property
    def count(self) -> int:
        with self._condition:
            return self._rung

    def ring(self) -> None:
        with self._condition:
            self._rung += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """Until the count differs from `seen` or `timeout` seconds pass; the count now."""
        with self._condition:
            self._condition.wait_for(lambda: self._rung != seen, timeout)
            return self._rung


BELL = Bell()
