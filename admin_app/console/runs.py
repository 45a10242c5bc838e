"""Support triage (runs:read): the runs list (filtered, and looked up by a prefix of any ID a run
is known by), the unresolved tool calls, and a run's trace as one timeline in true order."""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, current_app, render_template, request
from flask_login import current_user

from ..conversation_audit.availability import probe
from ..errors import ApiError
from ..limits import RUN_LOOKUP_LENGTH
from ..reads import runs as run_reads
from ..reads.traces import run_timeline
from .paging import Keyset, more_url, rows_only
from .security import permission_required, read_db, record_read, replica_reads

bp = Blueprint("console_runs", __name__, url_prefix="/console")

PAGE = 50
# The console's cursors for its lists; a cursor from one is refused by another.
RUNS = Keyset("runs", (datetime, uuid.UUID))
CALLS = Keyset("runs.unresolved", (datetime, uuid.UUID))
RUN_FILTERS = ("q", "status", "app", "route", "from", "to", *run_reads.EXACT)
# The exact lookups as the page names them.
EXACT_NAMES = {"run_id": "run ID", "session": "session ID", "conversation": "conversation ID",
               "turn": "turn ID"}
CALL_FILTERS = ("state", "app", "route", "tool")
NAME_MAX = 191  # an app, route or tool name in a filter


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class BadFilter(ValueError):
    """A filter value the list cannot use; its message says what is expected."""


def _moment(name: str, value: str, end: bool) -> datetime | None:
    """A date (the whole day) or a date and time, in the console's zone unless it names one; for
    the end of a range, the first instant after it."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadFilter(f"{name} must be a date such as 2026-12-01 or a date and time such as "
                        "2026-12-01T09:30.") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(current_app.config.get("DISPLAY_TIMEZONE", "UTC")))
    whole_day = len(value) == 10 and moment.time() == time(0)
    return moment + timedelta(days=1) if end and whole_day else moment


def _name(label: str, value: str) -> str:
    if len(value) > NAME_MAX:
        raise BadFilter(f"{label} is at most {NAME_MAX} characters.")
    return value


def triage_filters(raw: dict[str, str], statuses: tuple[str, ...],
                   exact_keys: Iterable[str]) -> run_reads.RunFilters:
    """The runs or jobs list's filters (reads/lookup.Filters) from the query's text, or BadFilter
    saying what is wrong; `statuses` and `exact_keys` are the list's own."""
    low, high = RUN_LOOKUP_LENGTH
    if raw["q"] and not low <= len(raw["q"]) <= high:
        raise BadFilter(f"Look up needs at least {low} and at most {high} characters of an ID "
                        f"(this one has {len(raw['q'])}).")
    if raw["status"] and raw["status"] not in statuses:
        raise BadFilter("Status is one of: " + ", ".join(statuses) + ".")
    created_from = _moment("Created from", raw["from"], end=False)
    created_to = _moment("Created to", raw["to"], end=True)
    if created_from and created_to and created_from >= created_to:
        raise BadFilter("Created from must come before created to.")
    exact = tuple((k, raw[k][:NAME_MAX]) for k in exact_keys if raw[k])
    return run_reads.RunFilters(q=raw["q"], status=raw["status"], app=_name("App", raw["app"]),
                                route=_name("Route", raw["route"]), created_from=created_from,
                                created_to=created_to, exact=exact)


def _raw(names: tuple[str, ...]) -> dict[str, str]:
    return {name: request.args.get(name, "").strip() for name in names}


@bp.get("/runs/")
@permission_required("runs:read")
@replica_reads
def index():
    """The most recent runs, filtered and looked up; later pages come as htmx rows. A filter it
    cannot use is answered 400 with the form and what is wrong, before anything is read."""
    raw = _raw(RUN_FILTERS)
    try:
        filters = triage_filters(raw, run_reads.RUN_STATUSES, run_reads.EXACT)
    except BadFilter as bad:
        if rows_only():
            abort(400, description=str(bad))
        return render_template("console/runs.html", query=raw, runs=[], error=str(bad),
                               statuses=run_reads.RUN_STATUSES, exact=EXACT_NAMES, more=None), 400
    after = RUNS.from_request()
    with read_db() as db:
        runs, next_key = run_reads.recent_runs(db, filters, after, PAGE)
    template = "console/partials/run_rows.html" if rows_only() else "console/runs.html"
    return render_template(template, query=raw, runs=runs, statuses=run_reads.RUN_STATUSES,
                           exact=EXACT_NAMES, more=more_url(".index", RUNS, next_key, raw))


@bp.get("/runs/unresolved")
@permission_required("runs:read")
@replica_reads
def unresolved():
    """Every tool call that still needs someone (outcome unknown, failed, in progress), newest
    first, filtered by state, app, route and tool; each links to its run and its approval."""
    raw = _raw(CALL_FILTERS)
    try:
        if raw["state"] and raw["state"] not in run_reads.UNRESOLVED:
            raise BadFilter("State is one of: " + ", ".join(run_reads.UNRESOLVED) + ".")
        filters = run_reads.CallFilters(state=raw["state"], app=_name("App", raw["app"]),
                                        route=_name("Route", raw["route"]), tool=_name("Tool", raw["tool"]))
    except BadFilter as bad:
        if rows_only():
            abort(400, description=str(bad))
        return render_template("console/unresolved.html", query=raw, calls=[], error=str(bad),
                               states=run_reads.UNRESOLVED, more=None), 400
    after = CALLS.from_request()
    with read_db() as db:
        calls, next_key = run_reads.unresolved_calls(db, filters, after, PAGE)
    template = "console/partials/call_rows.html" if rows_only() else "console/unresolved.html"
    return render_template(template, query=raw, calls=calls, states=run_reads.UNRESOLVED,
                           approvals=current_user.can("approvals:read"),
                           more=more_url(".unresolved", CALLS, next_key, raw))


# What a call's status means and what support does next, in the words of the runtime's
# contract (AGENT_CLIENT_RUNTIME_API, TOOL_GOVERNANCE).
STATE_HELP = {
    "reconciliation_required": (
        ("The hub sent this request to the business system and does not know whether the business "
         "system applied it: the connection failed or the answer was lost after the request left. "
         "The hub never sends it again by itself, not even for a read."),
        ("Check in the business system whether the change took effect: look the request up by the "
         "idempotency key and job ID it carried (headers X-Bailing-Idempotency-Key and "
         "X-Bailing-Job-Id). Tell the person who asked what happened. The agent must not repeat the "
         "call nor make another one to the same effect: resuming this invocation ID answers "
         "reconciliation_required again and sends nothing. Neither the hub nor upstream Core offers a "
         "way to mark it settled, so it stays on the unresolved list: what you found in the business "
         "system is the answer.")),
    "business_rejected": (
        "The business system received the request and refused it; nothing changed there.",
        ("Read the business status. If the user still wants the change, the agent makes a corrected "
         "call under a new invocation ID.")),
    "rejected_before_dispatch": (
        "The hub refused the call before sending anything; the business system never saw it.",
        ("Fix what the reason names. A rate-limited call may be resumed once its delay has passed; "
         "anything else needs a new call under a new invocation ID.")),
    "in_progress": (
        "The request is on its way to the business system, or its answer has not been recorded yet.",
        ("Wait for the tool's timeout. The agent resumes the same invocation ID to learn the outcome; "
         "an attempt still unanswered after its timeout reads as reconciliation_required.")),
    "awaiting_approval": (
        "The call waits for an approver's decision; nothing has been sent.",
        ("An approver decides it under Approvals. The agent then resumes the same invocation ID, "
         "which sends the approved snapshot once.")),
    "denied": ("An approver denied the call; nothing was sent.",
               "Nothing to reconcile. The agent tells the user; a new request needs a new call."),
}
REASONS = {
    "transport_failure": "the connection failed or the answer could not be read after the request was sent",
    "no_dispatch_record": "an attempt was recorded without its journal row, so whether it was sent is unknown",
    "no_outcome_recorded": ("the request was sent but its answer could not be recorded: the worker sending it "
                            "stopped, or the hub's database failed while it waited"),
    "provider_secret_unavailable": "the hub could not read the provider's signing secret",
    "approval_denied": "an approver denied it",
    "approval_snapshot_unusable": "the approved arguments no longer match their hash",
    "approval_expired": "its approval expired before the call could run (nothing was sent)",
}


@bp.get("/runs/<run_id>")
@permission_required("runs:read")
@replica_reads
def trace(run_id: str):
    ident = _uuid(run_id)
    if ident is None:
        abort(404)
    with read_db() as db:
        try:
            view = run_timeline(db, ident, probe(db))
        except ApiError:
            abort(404)
        record_read(db, "run_trace_view", str(ident))
    return render_template("console/run.html", trace=view["trace"], context=view["context"],
                           timeline=view["timeline"], archive=view["archive"], help=STATE_HELP,
                           reasons=REASONS, approvals=current_user.can("approvals:read"))
