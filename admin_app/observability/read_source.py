"""Which server answered a request's reads that may lag (the read replica or the primary): kept
for the request (the console's notice reads it), sent back as X-Bailing-Read-Source on every
answer that read that way, and counted in bailing_read_sessions_total."""
from __future__ import annotations

from flask import Flask, Response, g

from ..db import ReadSource
from . import metrics

HEADER = "X-Bailing-Read-Source"


def note(source: ReadSource) -> None:
    """A read session of this request was opened on `source.server` (the last one counts: a read
    done again on the primary after the replica failed replaces the replica's)."""
    g.read_source = source
    metrics.read_session(source.server, source.problem)


def current() -> ReadSource | None:
    source = g.get("read_source")
    return source if isinstance(source, ReadSource) else None


def install(app: Flask) -> None:
    @app.after_request
    def _read_source_header(response: Response) -> Response:
        source = current()
        if source is not None:
            response.headers[HEADER] = source.server
        return response
