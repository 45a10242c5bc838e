"""A sliding-window request limit kept in process memory.

Used where a limit protects the hub from being flooded (authorization requests per client and
caller address) and where losing the counts on a restart is harmless. Each worker process keeps its
own counts, so a deployment with N workers admits at most N times the limit.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable


SWEEP_ABOVE_KEYS = 1024  # idle keys are dropped once this many are held


class WindowLimit:
    def __init__(self, limit: int, window_seconds: float):
        self.limit, self.window = limit, window_seconds
        self._hits: dict[Hashable, deque] = {}
        self._lock = threading.Lock()

    def allow(self, key: Hashable) -> bool:
        """Count one attempt under `key`; False when the window already holds `limit` of them."""
        now = time.monotonic()
        horizon = now - self.window
        with self._lock:
            if len(self._hits) > SWEEP_ABOVE_KEYS:
                self._hits = {k: h for k, h in self._hits.items() if h[-1] > horizon}
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= horizon:
                hits.popleft()
            if len(hits) >= self.limit:
                return False
            hits.append(now)
            return True
