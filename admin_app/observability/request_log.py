"""Request ids and the request log: one line per request on stderr, from logger `bailing.request`.

A line holds the request id, method, route (the URL rule, never the raw path), status, duration
and client address; never a body, a query string, a header value, a token or an argument. The
hub's other log records (loggers `admin_app.*` and `bailing.*`) go through the same handler, with
the request id of the request they were written in.
"""
from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from typing import TextIO

from flask import Flask, Response, current_app, g, has_request_context, request
from pythonjsonlogger.json import JsonFormatter

from . import metrics

HEADER = "X-Request-Id"
# An incoming id is kept only in this form, so it can be logged and echoed as it is.
VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HUB_LOGGERS = ("admin_app", "bailing")

logger = logging.getLogger("bailing.request")


def request_id_from(value: str | None) -> str:
    """The client's id when it is well formed, otherwise a new one."""
    if value is not None and VALID_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


def route_of_request() -> str:
    rule = request.url_rule
    return rule.rule if rule is not None else metrics.UNMATCHED


# ------------------------------------------------------------------ handler and formats

class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = g.get("request_id") if has_request_context() else None
        return True


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        if rid:
            line += f" request_id={rid}"
        return line


def _json_formatter() -> logging.Formatter:
    return JsonFormatter("{levelname}{name}{message}", style="{", timestamp=True,
                         rename_fields={"levelname": "level", "name": "logger"})


class _Stderr(logging.StreamHandler[TextIO]):
    """Writes to whatever sys.stderr is when a record is emitted (gunicorn may redirect it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure(log_format: str, level: str) -> None:
    """One stderr handler for the hub's loggers, in `log_format` (json or text), at `level`.
    Called by every create_app: a later call replaces the format and level, never adds a line."""
    formatter = _json_formatter() if log_format == "json" else _TextFormatter()
    for name in HUB_LOGGERS:
        hub_logger = logging.getLogger(name)
        handler = next((h for h in hub_logger.handlers if isinstance(h, _Stderr)), None)
        if handler is None:
            handler = _Stderr()
            handler.addFilter(_RequestIdFilter())
            hub_logger.addHandler(handler)
        handler.setFormatter(formatter)
        # Records still propagate to the root logger, which has no handler under gunicorn or
        # `bailing-admin run`; one configured there by the operator prints them a second time.
        hub_logger.setLevel(level)


# ------------------------------------------------------------------ per request

def _begin() -> None:
    g.request_id = request_id_from(request.headers.get(HEADER))
    g.request_started = time.perf_counter()


def _finish(response: Response) -> Response:
    response.headers[HEADER] = _request_id()
    g.response_status = response.status_code
    return response


def _request_id() -> str:
    if "request_id" not in g:  # a request that failed before its first before_request function
        g.request_id = request_id_from(request.headers.get(HEADER))
    request_id: str = g.request_id
    return request_id


def _done(exc: BaseException | None) -> None:
    # Teardown runs for every request, so an error that escaped every handler gets its line too.
    status = g.get("response_status")
    if status is None or exc is not None:
        status = 500
    started = g.get("request_started")
    seconds = time.perf_counter() - started if started is not None else 0.0
    route = route_of_request()
    method = metrics.method_label(request.method)
    if route != metrics.METRICS_PATH:  # scrapes would otherwise dominate a quiet hub's figures
        metrics.observe_request(method, route, status, seconds)
    duration_ms = round(seconds * 1000, 1)
    logger.info("%s %s %s %sms", method, route, status, duration_ms,
                extra={"request_id": _request_id(), "method": method, "route": route,
                       "status": status, "duration_ms": duration_ms,
                       "remote_addr": request.remote_addr})
    if metrics.multiprocess_dir():  # other workers' scrapes read this worker's pool from its file
        metrics.update_pool(current_app)


def install(app: Flask) -> None:
    """Hooks placed to run first (the id exists for every other before_request function, a
    console refusal included) and last (the header is on whatever response the others made)."""
    app.before_request_funcs.setdefault(None, []).insert(0, _begin)
    app.after_request_funcs.setdefault(None, []).insert(0, _finish)  # run in reverse order
    app.teardown_request_funcs.setdefault(None, []).insert(0, _done)  # idem
