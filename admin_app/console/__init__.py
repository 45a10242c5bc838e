"""The admin console (Flask + htmx): conversations, approvals, run traces, access log, admins."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from flask import Flask, current_app

from . import admins, approvals, auth, conversations, runs, security


def init_app(app: Flask) -> None:
    security.init_app(app)
    app.jinja_env.filters["display_time"] = display_time
    app.jinja_env.filters["filesize"] = filesize
    app.register_blueprint(auth.bp)
    app.register_blueprint(conversations.bp)
    app.register_blueprint(approvals.bp)
    app.register_blueprint(runs.bp)
    app.register_blueprint(admins.bp)


def display_time(value: str) -> str:
    """An RFC 3339 time in the console's declared zone (BAILING_DISPLAY_TIMEZONE)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return str(value)
    zone = current_app.config.get("DISPLAY_TIMEZONE", "UTC")
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S ") + zone


def filesize(value: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return str(value)
