"""Approvals (approvals:read to see, approvals:decide to act). The queue shows bounded
summaries only; the full snapshot is loaded when asked for, and a decision carries the hash the
approver saw, so a stale page cannot approve a different snapshot."""
from __future__ import annotations

import json
import unicodedata
import uuid
from datetime import datetime

from flask import Blueprint, Response, abort, flash, redirect, render_template, request, url_for
from flask_login import current_user

from ..errors import ApiError
from ..identity.models import Admin
from ..invocations import approvals as service
from ..reads import approvals as reads
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required, record_read

bp = Blueprint("console_approvals", __name__, url_prefix="/console/approvals")

PAGE = 50
RAW_VIEW_MAX_BYTES = 2 * 1024 * 1024
# The console's cursors for the two lists; a cursor from one is refused by the other.
QUEUE = Keyset("approvals.queue", (datetime, uuid.UUID))
HISTORY = Keyset("approvals.history", (datetime, uuid.UUID))


@bp.get("/")
@permission_required("approvals:read")
def queue():
    """Pending approvals, oldest first; later pages come as htmx rows ("load more")."""
    after = QUEUE.from_request()
    with database().session() as db:
        items, next_key = reads.queue_page(db, after, PAGE)
    return _render(items, more_url(".queue", QUEUE, next_key, {}), history=False)


@bp.get("/history")
@permission_required("approvals:read")
def history():
    """Decided approvals, latest decision first, paged as the queue is."""
    after = HISTORY.from_request()
    with database().session() as db:
        items, next_key = reads.history_page(db, after, PAGE)
    return _render(items, more_url(".history", HISTORY, next_key, {}), history=True)


def _render(items: list[dict], more: str | None, history: bool) -> str:
    template = "console/partials/approval_rows.html" if rows_only() else "console/approvals.html"
    return render_template(template, items=items, more=more, history=history)


@bp.get("/count")
@permission_required("approvals:read")
def count():
    """The pending count in the navigation, polled by htmx."""
    with database().session() as db:
        pending = reads.pending_count(db)
    return render_template("console/partials/pending_count.html", pending=pending)


def _item(approval_id: str) -> dict:
    with database().session() as db:
        try:
            return service.item_view(*service.get(db, approval_id))
        except ApiError:
            abort(404)


@bp.get("/<approval_id>")
@permission_required("approvals:read")
def detail(approval_id: str):
    return render_template("console/approval.html", item=_item(approval_id),
                           can_decide=current_user.can("approvals:decide"))


# The snapshot is shown in chunks of about CHUNK_ROWS wrapped rows (a row taken as ROW_CHARS
# characters); console.css gives each chunk that estimated height, so that the browser lays out
# only the chunks on screen (laying out 1 MB of text at once blocks a frame for hundreds of ms).
CHUNK_ROWS = 100
ROW_CHARS = 120
CHUNK_CHARS = CHUNK_ROWS * ROW_CHARS


def _snapshot_chunks(text: str) -> list[str]:
    """`text` cut at line ends where it can, and a line longer than a chunk cut within, so that
    "".join(chunks) == text exactly."""
    chunks: list[str] = []
    current: list[str] = []
    rows = 0
    for line in text.splitlines(keepends=True):
        while len(line) > CHUNK_CHARS:
            if current:
                chunks.append("".join(current))
                current, rows = [], 0
            cut = _cut_point(line)
            chunks.append(line[:cut])
            line = line[cut:]
        line_rows = max(1, -(-len(line) // ROW_CHARS))
        if current and rows + line_rows > CHUNK_ROWS:
            chunks.append("".join(current))
            current, rows = [], 0
        current.append(line)
        rows += line_rows
    if current:
        chunks.append("".join(current))
    return chunks


def _cut_point(line: str) -> int:
    """Where to cut a long line: after an escaped newline or a space near the chunk's end (where
    the text would wrap anyway), never between a character and its combining marks."""
    window = line[CHUNK_CHARS - 400:CHUNK_CHARS]
    for mark in ("\\n", " "):
        found = window.rfind(mark)
        if found >= 0:
            return CHUNK_CHARS - 400 + found + len(mark)
    cut = CHUNK_CHARS
    while cut > 1 and unicodedata.combining(line[cut]):
        cut -= 1
    return cut


@bp.get("/<approval_id>/snapshot")
@permission_required("approvals:read")
def snapshot_view(approval_id: str):
    """The snapshot rendered on demand as a fragment: the pretty-printed text in one <pre>, in
    chunks the browser lays out only when they come on screen."""
    with database().session() as db:
        try:
            approval = service.snapshot(db, approval_id)
        except ApiError:
            abort(404)
        record_read(db, "snapshot_view", str(approval.id))
        raw = approval.snapshot
        args_hash = approval.args_hash
    pretty = json.dumps(json.loads(raw), indent=2, ensure_ascii=False) if len(raw) <= RAW_VIEW_MAX_BYTES else raw
    return render_template("console/partials/snapshot.html", chunks=_snapshot_chunks(pretty),
                           args_hash=args_hash, approval_id=approval_id, size=len(raw.encode("utf-8")))


@bp.get("/<approval_id>/snapshot.json")
@permission_required("approvals:read")
def snapshot_download(approval_id: str):
    """The exact bytes that were hashed and will run."""
    with database().session() as db:
        try:
            approval = service.snapshot(db, approval_id)
        except ApiError:
            abort(404)
        record_read(db, "snapshot_download", str(approval.id))
        response = Response(approval.snapshot.encode("utf-8"), mimetype="application/json")
        response.headers["Content-Disposition"] = f'attachment; filename="approval-{approval.id}.json"'
        response.headers["X-Bailing-Args-Hash"] = approval.args_hash
    return response


@bp.post("/<approval_id>/decide")
@permission_required("approvals:decide")
def decide(approval_id: str):
    decision = request.form.get("decision")
    if decision not in ("approve", "deny"):
        abort(400)
    body = {"args_hash": request.form.get("args_hash", "")}
    if request.form.get("reason", "").strip():
        body["reason"] = request.form["reason"]
    with database().session() as db:
        admin = db.get(Admin, current_user.admin_id)
        try:
            service.decide(db, admin, approval_id, "approved" if decision == "approve" else "denied", body)
            flash("Approved: the agent's resume will run exactly this snapshot." if decision == "approve"
                  else "Denied: the call will never reach the business system.", "ok")
        except ApiError as err:
            db.rollback()
            messages = {
                "approval_not_pending": "This approval was already decided; nothing was changed.",
                "approval_snapshot_changed": "The snapshot differs from the one shown; review it again.",
                "invalid_request": "A denial needs a reason." if decision == "deny" else err.message,
                "approval_not_found": "No such approval.",
            }
            flash(messages.get(err.code, err.message), "error")
    return redirect(url_for(".detail", approval_id=approval_id), code=303)
