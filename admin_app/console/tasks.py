"""Task control in the console (TASK_CONTROL.md §12): the tasks, one task with its usage, members,
linked invocations and bound runs, the controls (pause, resume, cancel) and the create form.

Viewing needs clients:read; the create form and the controls need clients:write and are not
rendered without it (the server refuses them too). Every change is a POST form with the console's
CSRF token, answered with a 303 to a GET page: a refresh repeats only the read, and a read never
verifies a member, moves a counter or re-sends a request.

Each control form carries a request_id made when the page was rendered and the revision of the
snapshot shown, so re-submitting that same form repeats the same request; a stale revision is
refused (TASK_REVISION_CONFLICT) and the page then shows the task as it is now with a new form,
never retrying by itself. The create form's request_id is made once and kept, with what was
entered, across a failure that may be retried (in the signed session cookie, small drafts only);
a definitive refusal lets the operator correct the form, which then is a new request."""
from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, session, url_for
from flask_login import current_user

from ..canonical import utc_now
from ..errors import ApiError
from ..reads import tasks as reads
from ..tasks import admin as service
from ..tasks import rules
from .paging import InvalidCursor, Keyset, more_url, rows_only
from .security import database, is_htmx, permission_required, read_db, replica_reads

bp = Blueprint("console_tasks", __name__, url_prefix="/console/tasks")

PAGE = 30  # tasks per page, as the admin API's default
INVOCATIONS_PAGE = 50
RUNS_PAGE = 20
MEMBER_ROWS = 3  # empty member rows the create form offers (static/console.js adds more)
# The console's cursors for its lists; a cursor from one is refused by another.
TASKS = Keyset("tasks", (uuid.UUID,))
INVOCATIONS = Keyset("tasks.invocations", (uuid.UUID,))
RUNS = Keyset("tasks.runs", (datetime, uuid.UUID))
# A create draft kept across a retryable failure lives in the signed session cookie: larger ones
# are not kept (the cookie would be refused), and the operator enters the form again.
DRAFT_MAX_BYTES = 2500
DRAFT = "task_draft"
TOO_LARGE = " The form was too large to keep: enter it again."
RETRY = "task_retry"
# Refusals after which the same create request can never succeed: correct the form, new request.
DEFINITIVE_CREATE = ("TASK_INVALID_INPUT", "TASK_SCOPE_BLOCKED", "TASK_EXPIRED", "TASK_CONFLICT")
DEFINITIVE_CONTROL = ("TASK_INVALID_INPUT", "TASK_NOT_FOUND", "TASK_REVISION_CONFLICT", "TASK_SCOPE_BLOCKED",
                      "TASK_EXPIRED", "TASK_CANCELLED", "TASK_CONTROL_CONFLICT")
TOOL_SPLIT = re.compile(r"[\s,]+")

# The suggested labels of §12.3.
BUDGET_LABELS = {None: "no write charge", "reserved": "reserved", "consumed": "counted", "released": "released"}
PERMIT_LABELS = {"none": "no permit", "held": "in flight", "unknown": "outcome unknown", "settled": "settled"}
OUTCOME_LABELS = {None: "pending", "confirmed_dispatched": "confirmed sent",
                  "confirmed_not_dispatched": "confirmed not sent", "unknown": "unknown, permit kept"}

# (button, confirmation title, what it does and does not do) of each control (§12.4).
CONTROLS = {
    "pause": ("Pause", "Pause this task",
              ("No new call of this task gets a dispatch permit once the pause is recorded. Calls already in "
               "flight keep going and are settled as usual; nothing is cancelled and the budget does not change. "
               "Resume it to continue.")),
    "resume": ("Resume", "Resume this task",
               ("Resuming verifies every member again first; if one fails, the task becomes blocked instead. It "
                "adds no budget, changes no member and runs nothing: a call that waited for the pause still needs "
                "the agent to resume it.")),
    "cancel": ("Cancel", "Cancel this task",
               ("Cancelling is final: no new call of this task is dispatched, ever. It rolls nothing back in the "
                "business systems, calls already in flight still finish and are recorded, and the member sessions "
                "stay task-required in all their conversations.")),
}
DONE = {
    "pause": "Paused: no new call of this task gets a dispatch permit until it is resumed.",
    "resume": "Resumed: every member verified again. Nothing was dispatched by this.",
    "cancel": "Cancelled: no new call of this task will be dispatched. Nothing was rolled back.",
}


def _now() -> datetime:
    return utc_now()


# ---------------------------------------------------------------- views of a task

def _writes_limit(limit: int | None) -> str:
    if limit is None:
        return "no limit"
    return "0 (reads only)" if limit == 0 else str(limit)


def _shown(task: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The admin task view with what the pages show beside it."""
    policy, counters = task["policy"], task["counters"]
    return {**task, "effective_state": rules.effective_state(task["state"], policy["expires_at"], now),
            "expired": rules.expired(policy["expires_at"], now),
            "short_id": task["task_id"][:8],
            "workspaces": sorted({m["workspace"] for m in task["members"]}),
            "writes_used": counters["write_reserved"] + counters["write_consumed"],
            "writes_limit": _writes_limit(policy["max_write_calls"])}


def _offered(task: dict[str, Any]) -> list[str]:
    """The controls the page offers for this snapshot (§12.4)."""
    offered = []
    if task["state"] in ("active", "blocked"):
        offered.append("pause")
    if task["state"] == "paused" and not task["expired"]:
        offered.append("resume")
    if task["state"] != "cancelled":
        offered.append("cancel")
    return offered


def _invocation(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "kind": "read" if row["readonly"] else "write",
            "budget_label": BUDGET_LABELS.get(row["budget_state"], row["budget_state"]),
            "permit_label": PERMIT_LABELS.get(row["permit_state"], row["permit_state"]),
            "outcome_label": OUTCOME_LABELS.get(row["outcome"], row["outcome"])}


def _failed_page(err: ApiError, template: str, **context):
    """A load that failed shows its error, never an empty list."""
    return render_template(template, error=err, **context), err.status


# ---------------------------------------------------------------- the list

@bp.get("/")
@permission_required("clients:read")
@replica_reads
def index():
    """Every task in the API's order (task id, descending), "load more" by cursor."""
    after = TASKS.from_request()
    try:
        with read_db() as db:
            page = service.list_tasks(db, PAGE, str(after[0]) if after else None)
    except ApiError as err:
        if rows_only():
            return render_template("console/tasks_rows.html", tasks=[], more=None, error=err)
        return _failed_page(err, "console/tasks.html", tasks=[], more=None,
                            can_write=current_user.can("clients:write"))
    now = _now()
    tasks = [_shown(t, now) for t in page["items"]]
    next_key = (uuid.UUID(page["next_cursor"]),) if page["next_cursor"] else None
    more = more_url(".index", TASKS, next_key, {})
    if rows_only():
        return render_template("console/tasks_rows.html", tasks=tasks, more=more, error=None)
    return render_template("console/tasks.html", tasks=tasks, more=more, error=None,
                           can_write=current_user.can("clients:write"))


# ---------------------------------------------------------------- one task

def _runs_cursor():
    value = request.args.get("runs_cursor", "")
    if not value:
        return None
    try:
        return RUNS.decode(value)
    except InvalidCursor:
        abort(400, description="This “load more” link is damaged or belongs to another list. "
                               "Open the task again from its first page.")


def _control_form(task: dict[str, Any], action: str) -> dict[str, Any]:
    """A control form for this snapshot: a request id made now, or the one of the same control
    whose earlier submission failed in a way that may be retried (same task, same revision)."""
    kept = session.get(RETRY)
    if isinstance(kept, dict) and kept.get("task_id") == task["task_id"] and kept.get("action") == action \
            and kept.get("expected_revision") == task["revision"] and isinstance(kept.get("request_id"), str):
        request_id = kept["request_id"]
    else:
        request_id = f"console-{action}-{uuid.uuid4()}"
    label, title, explain = CONTROLS[action]
    return {"action": action, "label": label, "title": title, "explain": explain, "request_id": request_id,
            "expected_revision": task["revision"]}


@bp.get("/<task_id>")
@permission_required("clients:read")
def detail(task_id: str):
    """The task as stored now, a page of its invocation records and of its bound runs. A read:
    no member is verified, nothing is locked, no counter moves."""
    inv_after = INVOCATIONS.from_request()
    runs_after = _runs_cursor()
    try:
        with database().session() as db:
            view = service.detail(db, task_id, INVOCATIONS_PAGE, str(inv_after[0]) if inv_after else None)
            runs, runs_next = reads.bound_runs(db, view["task"]["task_id"], runs_after, RUNS_PAGE)
    except ApiError as err:
        if err.code in ("TASK_NOT_FOUND", "TASK_INVALID_INPUT"):
            abort(404)
        return _failed_page(err, "console/tasks_detail.html", task=None, can_write=False)
    task = _shown(view["task"], _now())
    if task["task_id"] != task_id:  # the canonical (lower-case) address
        return redirect(url_for(".detail", task_id=task["task_id"]), code=301)
    invocations = [_invocation(r) for r in view["invocations"]]
    inv_next = (uuid.UUID(view["next_cursor"]),) if view["next_cursor"] else None
    inv_more = more_url(".detail", INVOCATIONS, inv_next, {"task_id": task_id})
    runs_more = (url_for(".detail", task_id=task_id, runs_cursor=RUNS.encode(runs_next))
                 if runs_next is not None else None)
    links = {"can_read_runs": current_user.can("runs:read"),
             "can_read_approvals": current_user.can("approvals:read")}
    if rows_only():
        return render_template("console/tasks_invocation_rows.html", invocations=invocations,
                               more=inv_more, **links)
    if is_htmx() and runs_after is not None:
        return render_template("console/tasks_run_rows.html", runs=runs, more=runs_more, **links)
    can_write = current_user.can("clients:write")
    forms = [_control_form(task, action) for action in _offered(task)] if can_write else []
    return render_template("console/tasks_detail.html", task=task, error=None, invocations=invocations,
                           inv_more=inv_more, runs=runs, runs_more=runs_more, can_write=can_write,
                           forms=forms, **links)


@bp.post("/<task_id>/control")
@permission_required("clients:write")
def control(task_id: str):
    """Pause, resume or cancel, as the form's snapshot saw the task; then back to the task."""
    action = request.form.get("action", "")
    if action not in CONTROLS:
        abort(400)
    raw_revision = request.form.get("expected_revision", "")
    body = {"request_id": request.form.get("request_id", ""), "action": action,
            # A number the form carried; anything else goes on as text and is refused as such.
            "expected_revision": int(raw_revision) if raw_revision.isascii() and raw_revision.isdigit()
            else raw_revision}
    back = url_for(".detail", task_id=task_id)
    try:
        # A resume whose verification fails blocks the task: that is committed with the refusal.
        with database().session() as db:
            view = service.control(db, current_user.username, task_id, body)
    except ApiError as err:
        if err.code in DEFINITIVE_CONTROL:
            session.pop(RETRY, None)
        else:  # the outcome is not known: the same form (same request id) is offered again
            session[RETRY] = {"task_id": task_id, "action": action, "request_id": body["request_id"],
                              "expected_revision": body["expected_revision"]}
        if err.code == "TASK_NOT_FOUND" or not rules.UUID.fullmatch(task_id):
            flash("No such task.", "error")
            return redirect(url_for(".index"), code=303)
        flash(_control_refused(err, action, body["expected_revision"]), "error")
        return redirect(back, code=303)
    session.pop(RETRY, None)
    flash(f"{DONE[action]} The task is at revision {view['revision']}.", "ok")
    return redirect(url_for(".detail", task_id=view["task_id"]), code=303)


def _control_refused(err: ApiError, action: str, expected: object) -> str:
    name = CONTROLS[action][0].lower()
    if err.code == "TASK_REVISION_CONFLICT":
        return (f"TASK_REVISION_CONFLICT: not applied. The task changed after the page you used was loaded "
                f"(it showed revision {expected}; {err.message}) Nothing was changed. The task as it is now is "
                f"shown below: decide again.")
    if err.code == "TASK_SCOPE_BLOCKED":
        return (f"TASK_SCOPE_BLOCKED: not resumed. {err.message} The task is blocked now: fix the cause, "
                f"then pause and resume it again.")
    if err.code == "TASK_EXPIRED":
        return "TASK_EXPIRED: not resumed. The task's deadline has passed; nothing was changed."
    if err.code == "TASK_CANCELLED":
        return f"TASK_CANCELLED: the task is cancelled; it cannot {name} any more. Nothing was changed."
    if err.code in DEFINITIVE_CONTROL:
        return f"{err.code}: not applied. {err.message} Nothing was changed."
    return (f"{err.code}: {err.message} Whether the {name} was recorded is not known: submitting the "
            f"same form again repeats the same request.")


# ---------------------------------------------------------------- the create form

def _empty_member() -> dict[str, str]:
    return {"pick": "", "session_id": "", "client_app_id": "", "workspace": "", "conversation": "", "tools": ""}


def _new_draft() -> dict[str, Any]:
    return {"request_id": f"console-create-{uuid.uuid4()}", "members": [], "budget": "limit",
            "budget_limit": "", "max_concurrent": "2", "deadline": "", "deadline_utc": ""}


def _draft() -> dict[str, Any]:
    kept = session.get(DRAFT)
    return kept if isinstance(kept, dict) and isinstance(kept.get("request_id"), str) else _new_draft()


def _keep(draft: dict[str, Any]) -> bool:
    if len(json.dumps(draft)) > DRAFT_MAX_BYTES:
        session.pop(DRAFT, None)
        return False
    session[DRAFT] = draft
    return True


@bp.get("/new")
@permission_required("clients:write")
def new():
    """The create form, with a request id made once; after a failure, what was entered."""
    draft = _draft()
    with database().session() as db:
        sessions = reads.active_sessions(db, _now())
        workspaces = reads.workspaces(db)
    members = list(draft["members"])
    members += [_empty_member() for _ in range(max(MEMBER_ROWS - len(members), 1))]
    members = members[:rules.MAX_MEMBERS]
    return render_template("console/tasks_new.html", draft=draft, members=members, sessions=sessions,
                           workspaces=workspaces, picker_max=reads.PICKER_MAX,
                           max_members=rules.MAX_MEMBERS, kept=DRAFT in session)


@bp.post("/new/discard")
@permission_required("clients:write")
def discard():
    session.pop(DRAFT, None)
    flash("The form was cleared; a new one is a new request.", "ok")
    return redirect(url_for(".new"), code=303)


def _form_draft(kept: dict[str, Any]) -> dict[str, Any]:
    """What the form sent, in the draft's shape; the request id is the form's own."""
    form = request.form
    members = []
    for i in range(rules.MAX_MEMBERS):
        row = {key: form.get(f"m{i}-{key}", "").strip() for key in _empty_member()}
        if any(row.values()):
            members.append(row)
    request_id = form.get("request_id", "") or kept["request_id"]
    return {"request_id": request_id, "members": members, "budget": form.get("budget", ""),
            "budget_limit": form.get("budget_limit", "").strip(),
            "max_concurrent": form.get("max_concurrent", "").strip(), "deadline": form.get("deadline", "").strip(),
            "deadline_utc": form.get("deadline_utc", "").strip()}


def _number(value: str) -> int | str:
    return int(value) if value.isascii() and value.isdigit() else value


def _deadline(draft: dict[str, Any]) -> str | None:
    """The deadline as the API takes it (UTC, milliseconds). The browser converts its local time
    (static/console.js); without JavaScript the time is read in the console's declared zone."""
    if draft["deadline_utc"]:
        try:
            moment = datetime.fromisoformat(draft["deadline_utc"].replace("Z", "+00:00"))
        except ValueError:
            raise _Refused("The deadline is not a time.") from None
        if moment.tzinfo is None:
            raise _Refused("The deadline is not a time.")
    elif draft["deadline"]:
        try:
            moment = datetime.fromisoformat(draft["deadline"])
        except ValueError:
            raise _Refused("The deadline must be a date and time such as 2026-12-01T18:00.") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=ZoneInfo(current_app.config.get("DISPLAY_TIMEZONE", "UTC")))
    else:
        return None
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Refused(ValueError):
    """The form cannot make a request as filled in; nothing was sent."""


def _member(row: dict[str, str], index: int, picked: dict[str, Any] | None) -> dict[str, Any]:
    where = f"Member {index + 1}"
    if row["pick"]:
        if picked is None:
            raise _Refused(f"{where}: the session picked is no longer active (revoked or expired).")
        session_id, app = picked["session_id"], picked["client_app_id"]
        allowed = picked["allowed_routes"]
        if row["workspace"] and "*" not in allowed and row["workspace"] not in allowed:
            raise _Refused(f"{where}: the session may not use workspace {row['workspace']}; "
                           f"it may use {', '.join(allowed) or 'none'}.")
    else:
        session_id, app = row["session_id"], row["client_app_id"]
        if not session_id or not app:
            raise _Refused(f"{where}: pick a session, or enter its session id and client app id.")
    if not row["workspace"] or not row["conversation"] or not row["tools"]:
        raise _Refused(f"{where}: a workspace, the client's conversation id and at least one tool are needed.")
    return {"session_id": session_id, "client_app_id": app, "workspace": row["workspace"],
            "client_conversation_id": row["conversation"],
            "allowed_tools": [t for t in TOOL_SPLIT.split(row["tools"]) if t]}


def _create_body(draft: dict[str, Any], picked: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    if request.form.get("acknowledge") != "yes":
        raise _Refused("Tick the acknowledgement: the sessions become task-required for good.")
    if not draft["members"]:
        raise _Refused("Add at least one member.")
    members = [_member(row, i, picked.get(row["pick"])) for i, row in enumerate(draft["members"])]
    if draft["budget"] == "limit":
        limit = _number(draft["budget_limit"])
        if not isinstance(limit, int) or limit < 1:
            raise _Refused("The write limit must be a whole number of at least 1 (or choose reads only or "
                           "no limit).")
        budget: int | None = limit
    elif draft["budget"] == "reads_only":
        budget = 0
    elif draft["budget"] == "none":
        budget = None
    else:
        raise _Refused("Choose a write budget: a limit, reads only or no limit.")
    return {"request_id": draft["request_id"], "members": members,
            "policy": {"max_write_calls": budget, "max_concurrent": _number(draft["max_concurrent"]),
                       "expires_at": _deadline(draft)}}


@bp.post("/")
@permission_required("clients:write")
def create():
    """Create the task the form describes, then open it. A refusal keeps what was entered: with
    the same request id when the same request may be retried, with a new one when it cannot."""
    draft = _form_draft(_draft())
    try:
        with database().session() as db:
            now = _now()
            picked = {row["pick"]: (reads.session_of(db, row["pick"], now) if rules.UUID.fullmatch(row["pick"])
                                    else None)
                      for row in draft["members"] if row["pick"]}
        body = _create_body(draft, picked)
    except _Refused as refused:
        kept = _keep(draft)  # nothing was sent: the same request id stays
        flash(f"Not created: {refused}" + ("" if kept else TOO_LARGE), "error")
        return redirect(url_for(".new"), code=303)
    try:
        with database().session() as db:
            view = service.create(db, current_user.username, body)
    except ApiError as err:
        definitive = err.code in DEFINITIVE_CREATE
        if definitive:
            draft["request_id"] = _new_draft()["request_id"]
        kept = _keep(draft)
        flash(_create_refused(err, definitive, kept), "error")
        return redirect(url_for(".new"), code=303)
    session.pop(DRAFT, None)
    flash(f"Task created: {view['task_id']}. The member sessions are task-required from now on.", "ok")
    return redirect(url_for(".detail", task_id=view["task_id"]), code=303)


def _create_refused(err: ApiError, definitive: bool, kept: bool) -> str:
    if err.code == "TASK_CONFLICT":
        text = ("TASK_CONFLICT: not created. An earlier submission of this form already made a task with other "
                "content; look for it in the list before creating another. Submitting again makes a new request.")
    elif definitive:
        text = f"{err.code}: not created. {err.message} Correct the form; submitting it again is a new request."
    else:
        text = (f"{err.code}: {err.message} Whether the task was created is not known: submitting the form "
                f"again repeats the same request.")
    return text if kept else text + TOO_LARGE
