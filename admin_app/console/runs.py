"""Runs (runs:read): look a run up by its ID, session, route, conversation or turn, and read its
trace as a timeline. Also the access log (audit:read)."""
from __future__ import annotations

import json
import uuid

from flask import Blueprint, abort, render_template, request
from sqlalchemy import select, text

from ..conversation_audit.availability import probe
from ..errors import ApiError
from ..identity import access_log as access_records
from ..runtime.models import Run
from ..runtime.traces import run_trace
from .security import database, permission_required, record_read

bp = Blueprint("console_runs", __name__, url_prefix="/console")

LOOKUPS = ("run_id", "session", "route", "conversation", "turn")


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@bp.get("/runs/")
@permission_required("runs:read")
def index():
    query = {k: request.args.get(k, "").strip()[:191] for k in LOOKUPS}
    runs = []
    searched = any(query.values())
    if searched:
        stmt = select(Run).order_by(Run.created_at.desc(), Run.id).limit(100)
        for key, column in (("run_id", Run.id), ("session", Run.session_id)):
            if query[key]:
                ident = _uuid(query[key])
                stmt = stmt.where(column == ident) if ident else stmt.where(text("false"))
        if query["route"]:
            stmt = stmt.where(Run.route_key == query["route"])
        if query["conversation"]:
            stmt = stmt.where(Run.client_conversation_id == query["conversation"])
        if query["turn"]:
            stmt = stmt.where(Run.client_turn_id == query["turn"])
        with database().session() as db:
            runs = list(db.scalars(stmt))
    return render_template("console/runs.html", query=query, runs=runs, searched=searched)


@bp.get("/runs/<run_id>")
@permission_required("runs:read")
def trace(run_id: str):
    ident = _uuid(run_id)
    if ident is None:
        abort(404)
    with database().session() as db:
        try:
            data = run_trace(db, ident, probe(db))
        except ApiError:
            abort(404)
        run = db.get(Run, ident)
        context = json.dumps(run.context, indent=2, ensure_ascii=False)
        record_read(db, "run_trace_view", str(ident))
    return render_template("console/run.html", trace=data, context=context)


@bp.get("/access-log")
@permission_required("audit:read")
def access_log():
    before = request.args.get("before", "")
    before_id = int(before) if before.isascii() and before.isdigit() and len(before) < 19 else None
    with database().session() as db:
        rows, more = access_records.page(db, before_id)
    return render_template("console/access_log.html", rows=rows, more=more)
