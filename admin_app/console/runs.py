"""Runs (runs:read): the most recent runs, or those a lookup by ID, session, route, conversation or
turn names, and a run's trace as a timeline. Also the access log (audit:read)."""
from __future__ import annotations

import uuid
from datetime import datetime

from flask import Blueprint, abort, render_template, request

from ..conversation_audit.availability import probe
from ..errors import ApiError
from ..reads import access_log as access_log_reads
from ..reads import runs as run_reads
from ..reads.traces import run_trace_with_context
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required, record_read

bp = Blueprint("console_runs", __name__, url_prefix="/console")

PAGE = 50
ACCESS_LOG_PAGE = 100
# The console's cursors for the two lists; a cursor from one is refused by the other.
RUNS = Keyset("runs", (datetime, uuid.UUID))
ACCESS_LOG = Keyset("access-log", (int,))


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@bp.get("/runs/")
@permission_required("runs:read")
def index():
    """The most recent runs, or those a lookup names; later pages come as htmx rows."""
    lookups = {k: request.args.get(k, "").strip()[:191] for k in run_reads.LOOKUPS}
    after = RUNS.from_request()
    with database().session() as db:
        runs, next_key = run_reads.recent_runs(db, lookups, after, PAGE)
    template = "console/partials/run_rows.html" if rows_only() else "console/runs.html"
    return render_template(template, query=lookups, runs=runs, searched=any(lookups.values()),
                           more=more_url(".index", RUNS, next_key, lookups))


@bp.get("/runs/<run_id>")
@permission_required("runs:read")
def trace(run_id: str):
    ident = _uuid(run_id)
    if ident is None:
        abort(404)
    with database().session() as db:
        try:
            data, context = run_trace_with_context(db, ident, probe(db))
        except ApiError:
            abort(404)
        record_read(db, "run_trace_view", str(ident))
    return render_template("console/run.html", trace=data, context=context)


@bp.get("/access-log")
@permission_required("audit:read")
def access_log():
    """Newest first; later pages come as htmx rows."""
    after = ACCESS_LOG.from_request()
    with database().session() as db:
        rows, next_key = access_log_reads.page(db, after, ACCESS_LOG_PAGE)
    template = "console/partials/access_log_rows.html" if rows_only() else "console/access_log.html"
    return render_template(template, rows=rows, more=more_url(".access_log", ACCESS_LOG, next_key, {}))
