"""gunicorn settings for the hub's metrics in multiprocess mode:

    PROMETHEUS_MULTIPROC_DIR=/run/bailing-metrics \
        gunicorn -c python:admin_app.observability.gunicorn_conf --workers 4 'admin_app:create_app()'

Each worker keeps its counters in files in PROMETHEUS_MULTIPROC_DIR (a folder for this alone),
and any worker answering /metrics sums them all. Command-line options still apply; this module
sets only the hooks below, and no access log (the hub writes its own request log on stderr).
"""
from __future__ import annotations

import os
from pathlib import Path

accesslog = None  # the hub's request log says more, and never holds a query string


def on_starting(server) -> None:
    """Before any worker starts: a fresh folder, or a restart would add the last run's counts."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()


def child_exit(server, worker) -> None:
    """A worker is gone: its live gauges (pool figures) leave the scrape; its counters stay in."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
