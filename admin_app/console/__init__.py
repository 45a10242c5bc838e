"""The admin console (Flask + htmx): conversations, approvals, run traces, tasks, access log, admins."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from flask import Flask, current_app

from . import (access_log, admins, approvals, auth, conversations, delivery, error_pages, notifications, pause,
               runs, security, tasks, text)


def init_app(app: Flask) -> None:
    security.init_app(app)
    delivery.init_app(app)  # compression, fingerprinted static URLs
    error_pages.init_app(app)
    app.jinja_env.filters["display_time"] = display_time
    app.jinja_env.filters["filesize"] = filesize
    app.jinja_env.filters["duration"] = duration
    app.jinja_env.filters["reveal"] = text.reveal  # hidden characters shown as markers
    app.register_blueprint(auth.bp)
    app.register_blueprint(conversations.bp)
    app.register_blueprint(approvals.bp)
    app.register_blueprint(notifications.bp)
    app.register_blueprint(runs.bp)
    app.register_blueprint(tasks.bp)
    app.register_blueprint(access_log.bp)
    app.register_blueprint(admins.bp)
    from . import providers  # tool providers: spec pull and probes

    app.register_blueprint(providers.bp)
    from . import dead_letters  # completion callbacks of jobs that failed for good

    app.register_blueprint(dead_letters.bp)
    from . import jobs  # Client API jobs beside the runs, their executors and tokens

    app.register_blueprint(jobs.bp)
    from . import config_changes  # the configuration-change log (issue 33)

    app.register_blueprint(config_changes.bp)
    from . import retention  # retention policies, legal holds, erasure requests (issue 33)

    retention.init_app(app)
    pause.init_app(app)  # the control, and the banner on every page while paused
    from . import evidence  # the verifier's banner, and a transcript's Verify (issue 33)

    evidence.init_app(app)


def display_time(value: str, precise: bool = False) -> str:
    """An RFC 3339 time in the console's declared zone (BAILING_DISPLAY_TIMEZONE); to the
    millisecond if `precise`."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return str(value)
    zone = current_app.config.get("DISPLAY_TIMEZONE", "UTC")
    local = moment.astimezone(ZoneInfo(zone))
    if precise:
        return local.strftime("%Y-%m-%d %H:%M:%S.") + f"{local.microsecond // 1000:03d} " + zone
    return local.strftime("%Y-%m-%d %H:%M:%S ") + zone


def duration(ms: int | None) -> str:
    """Milliseconds as a person reads them: 85 ms, 1.204 s, 3 min 05 s."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    return f"{minutes} min {seconds:02d} s"


def filesize(value: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)
