"""Operability: Prometheus metrics at GET /metrics and one log line per request with its id.

See docs/monitoring.md for what is exposed and how to run it under gunicorn."""
from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    # Imported here, not at the top: gunicorn's master loads gunicorn_conf from this package and
    # must not create metrics (their files would belong to the master, in multiprocess mode).
    from . import metrics, read_source, request_log

    settings = app.extensions["bailing"].settings
    request_log.configure(settings.log_format, settings.log_level)
    request_log.install(app)
    app.register_blueprint(metrics.bp)
    read_source.install(app)
