"""Approvals (approvals:read to see, approvals:decide to act). The queue shows bounded
summaries only; the page's viewer (static/snapshot.js) reads the full snapshot as its exact bytes
(at once when small, when asked for when large), and a decision carries the hash the approver
saw, so a stale page cannot approve a different snapshot.

The queue is worked by several approvers at once: it pages by key, its filters stay in the URL
(and travel with the rows' links, so that "decide and open the next" keeps to them), and an open
page asks `live` every few seconds which of its rows are still to be decided."""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, abort, flash, jsonify, redirect, render_template, request, url_for
from flask_login import current_user

from ..catalog.compiler import TOOL_NAME
from ..errors import ApiError
from ..identity.models import Admin
from ..invocations import approvals as service
from ..reads import approvals as reads
from .paging import InvalidCursor, Keyset, more_url, rows_only
from .security import database, permission_required, read_db, record_read, replica_reads

bp = Blueprint("console_approvals", __name__, url_prefix="/console/approvals")

PAGE = 50
LIVE_SECONDS = 5  # how often an open queue asks which of its rows are still pending
# A snapshot up to this size is shown as the approval page loads; a larger one when asked for
# (static/snapshot.js fetches the exact bytes from snapshot.json?view=1 either way).
INLINE_SNAPSHOT_MAX_BYTES = 16 * 1024
# The console's cursors for the lists; a cursor from one is refused by another.
QUEUE = Keyset("approvals.queue", (datetime, uuid.UUID))
QUEUE_NEWEST = Keyset("approvals.queue-newest", (datetime, uuid.UUID))
HISTORY = Keyset("approvals.history", (datetime, uuid.UUID))
FILTERS = ("risk", "tool", "route", "app", "requester", "age", "order")
ORDERS = ("oldest", "newest")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
REQUESTER_MAX = 191  # on_behalf_of's bound


def _queue_filter(source: Mapping[str, str]) -> tuple[reads.QueueFilter, dict[str, Any], list[str]]:
    """The queue's filter from a query string or a form: the filter, the values given (kept in
    every link), and an error for each value that does not fit (a 400 page, never dropped)."""
    given: dict[str, Any] = {k: source.get(k, "").strip() for k in FILTERS if source.get(k, "").strip()}
    errors: list[str] = []
    checks = (("risk", "Risk", lambda v: v in reads.RISKS, f"one of {', '.join(reads.RISKS)}"),
              ("tool", "Tool", lambda v: bool(TOOL_NAME.match(v)), "a tool name"),
              ("route", "Route", lambda v: bool(NAME.match(v)), "a route key"),
              ("app", "App", lambda v: bool(NAME.match(v)), "an app id"),
              ("requester", "Requester", lambda v: len(v) <= REQUESTER_MAX, f"at most {REQUESTER_MAX} characters"),
              ("age", "Waiting longer than", lambda v: v in reads.AGES, f"one of {', '.join(reads.AGES)}"),
              ("order", "Order", lambda v: v in ORDERS, f"one of {', '.join(ORDERS)}"))
    for key, label, fits, expected in checks:
        if key in given and not fits(given[key]):
            errors.append(f"{label}: “{given[key]}” is not {expected}.")
    if errors:
        return reads.QueueFilter(), given, errors
    return reads.QueueFilter(
        risk=given.get("risk"), tool=given.get("tool"), route=given.get("route"), app=given.get("app"),
        requester=given.get("requester"), older_than=reads.AGES.get(given.get("age", "")),
        newest_first=given.get("order") == "newest"), given, errors


def _queue_keyset(f: reads.QueueFilter) -> Keyset:
    return QUEUE_NEWEST if f.newest_first else QUEUE


@bp.get("/")
@permission_required("approvals:read")
@replica_reads
def queue():
    """Decidable approvals, oldest first unless asked otherwise, narrowed by the URL's filters;
    later pages come as htmx rows ("load more")."""
    f, given, errors = _queue_filter(request.args)
    if errors:
        return render_template("console/approvals.html", items=[], more=None, history=False, errors=errors,
                               filters=given, facets=None, ages=reads.AGES, risks=reads.RISKS), 400
    keyset = _queue_keyset(f)
    after = keyset.from_request()
    whole = not rows_only()
    with read_db() as db:
        screen = reads.queue_screen(db, f, after, PAGE, whole)
    items = [{**item, "key": keyset.encode(key)} for item, key in screen.rows]
    more = more_url(".queue", keyset, screen.next_key, given)
    if not whole:
        return render_template("console/partials/approval_rows.html", items=items, more=more,
                               history=False, filters=given)
    return render_template("console/approvals.html", items=items, more=more, history=False, errors=[],
                           filters=given, facets=screen.facets, count=screen.count, ages=reads.AGES,
                           risks=reads.RISKS, live_seconds=LIVE_SECONDS, live_max=reads.LIVE_MAX)


@bp.get("/live")
@permission_required("approvals:read")
@replica_reads
def live():
    """For an open queue page showing the rows from cursor `first` to cursor `last` (none: an
    empty page), its filters alike: which are still to be decided, the filter's count and the
    arrivals after the last."""
    f, _given, errors = _queue_filter(request.args)
    keyset = _queue_keyset(f)
    window = None
    if "first" in request.args or "last" in request.args:
        try:
            window = keyset.decode(request.args.get("first", "")), keyset.decode(request.args.get("last", ""))
        except InvalidCursor:
            errors.append("first and last must be rows of this queue.")
    if errors:
        return jsonify({"errors": errors}), 400
    with read_db() as db:
        return jsonify(reads.live(db, f, window))


@bp.get("/history")
@permission_required("approvals:read")
@replica_reads
def history():
    """Decided and expired approvals, latest first, paged as the queue is."""
    after = HISTORY.from_request()
    with read_db() as db:
        items, next_key = reads.history_page(db, after, PAGE)
    more = more_url(".history", HISTORY, next_key, {})
    template = "console/partials/approval_rows.html" if rows_only() else "console/approvals.html"
    return render_template(template, items=items, more=more, history=True, errors=[], filters={})


@bp.get("/count")
@permission_required("approvals:read")
@replica_reads
def count():
    """The pending count in the navigation, polled by htmx."""
    with read_db() as db:
        pending = reads.pending_count(db)
    return render_template("console/partials/pending_count.html", pending=pending)


@bp.get("/<approval_id>")
@permission_required("approvals:read")
def detail(approval_id: str):
    """One approval with what led to it: the requesting session, its run and, for a reader who
    may see runs, the user's message of that turn (recorded in the access log as a read of the
    run). The queue's filters come along, for "decide and open the next"."""
    _f, given, errors = _queue_filter(request.args)
    if errors:
        abort(400, description=" ".join(errors))
    can_read_runs = current_user.can("runs:read")
    with database().session() as db:
        try:
            item = service.item_view(*service.get(db, approval_id))
        except ApiError:
            abort(404)
        context = reads.decision_context(db, item["run_id"], with_message=can_read_runs)
        if context and context["user_message"] is not None:
            record_read(db, "run_trace_view", context["run_id"])
    return render_template("console/approval.html", item=item, context=context, filters=given,
                           can_decide=current_user.can("approvals:decide"), can_read_runs=can_read_runs,
                           inline_snapshot=item["snapshot_bytes"] <= INLINE_SNAPSHOT_MAX_BYTES)


@bp.get("/<approval_id>/snapshot.json")
@permission_required("approvals:read")
def snapshot_download(approval_id: str):
    """The exact bytes that were hashed and will run: a file to save, or with `?view=1` the same
    bytes inline for the page's viewer, recorded as a view rather than a download."""
    view = request.args.get("view") == "1"
    with database().session() as db:
        try:
            approval = service.snapshot(db, approval_id)
        except ApiError:
            abort(404)
        record_read(db, "snapshot_view" if view else "snapshot_download", str(approval.id))
        response = Response(approval.snapshot.encode("utf-8"), mimetype="application/json")
        if not view:
            response.headers["Content-Disposition"] = f'attachment; filename="approval-{approval.id}.json"'
        response.headers["X-Bailing-Args-Hash"] = approval.args_hash
    return response


@bp.post("/<approval_id>/decide")
@permission_required("approvals:decide")
def decide(approval_id: str):
    """Approve or deny the snapshot shown (its hash comes with the form); with `then=next`, open
    the next approval of the same filtered queue after a decision that went through."""
    decision = request.form.get("decision")
    if decision not in ("approve", "deny"):
        abort(400)
    f, given, errors = _queue_filter(request.form)
    if errors:
        abort(400, description=" ".join(errors))
    body = {"args_hash": request.form.get("args_hash", "")}
    if request.form.get("reason", "").strip():
        body["reason"] = request.form["reason"]
    following: uuid.UUID | None = None
    with database().session() as db:
        admin = db.get(Admin, current_user.admin_id)
        try:
            decided = service.decide(db, admin, approval_id, "approved" if decision == "approve" else "denied",
                                     body, door="console")
        except ApiError as err:
            db.rollback()
            plain = err.code == "invalid_request" and decision == "approve"  # the hash field, not a reason
            flash(err.message if plain else DECISION_REFUSED.get(err.code, err.message), "error")
            return redirect(url_for(".detail", approval_id=approval_id, **given), code=303)
        if decided["rerun"]:  # a finished job's call (CLIENT_API_AND_EXECUTOR.md §C.7)
            flash("Approved: the finished job was queued again; its next run may make exactly this call.", "ok")
        else:
            flash("Approved: the agent's resume will run exactly this snapshot." if decision == "approve"
                  else "Denied: the call will never reach the business system.", "ok")
        if request.form.get("then") == "next":
            current = service.get(db, approval_id)[0]
            following = reads.next_pending(db, f, current)
    if request.form.get("then") != "next":
        return redirect(url_for(".detail", approval_id=approval_id, **given), code=303)
    if following is None:
        flash("Nothing else is waiting in this queue.", "ok")
        return redirect(url_for(".queue", **given), code=303)
    return redirect(url_for(".detail", approval_id=str(following), **given), code=303)


DECISION_REFUSED = {
    "approval_not_pending": "This approval was already decided; nothing was changed.",
    "approval_expired": "This approval expired; it can no longer be decided and nothing was changed.",
    "approval_snapshot_changed": "The snapshot differs from the one shown; review it again.",
    "invalid_request": "A denial needs a reason.",
    "approval_not_found": "No such approval.",
}
