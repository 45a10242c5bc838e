"""Client API jobs in the console (CLIENT_API_AND_EXECUTOR.md §F): the Jobs tab of the runs list
(the runs list's filters and ID-prefix lookups), a job's page with one timeline and, for
`runs:write` holders, its rerun; and the Executors page: executors, executor tokens, targets,
leases, blocked threads, and the client apps' Client Tokens.

Job input, metadata, results and executor output are untrusted: escaped (Jinja autoescape, and
`reveal` for hidden characters) and bounded on the page, the whole value on demand. A token is
shown once, in the answer to the form that issued it, and never again."""
from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from ..config_audit.log import record_change
from ..errors import ApiError
from ..identity import clients as client_service
from ..jobs import callbacks, dispatch_status, executor_tokens
from ..jobs import rerun as reruns
from ..reads import jobs as job_reads
from .paging import Keyset, more_url, rows_only
from .runs import BadFilter, triage_filters
from .security import database, is_htmx, permission_required, read_db, record_read, replica_reads

bp = Blueprint("console_jobs", __name__, url_prefix="/console")

PAGE = 50
JOBS = Keyset("runs.jobs", (datetime, uuid.UUID))
JOB_FILTERS = ("q", "status", "app", "route", "from", "to", *job_reads.EXACT)
# The exact lookups as the page names them.
EXACT_NAMES = {"job_id": "job ID", "session": "session ID", "thread": "thread", "executor": "executor ID"}
# The filters the runs list and the jobs list share: the tabs carry them across.
SHARED_FILTERS = ("q", "app", "route", "from", "to")
# A job's untrusted values on its page: at most this many characters each, then "Show all".
SHOWN_CHARS = 4000
PARTS = ("input", "metadata", "result", "usage", "error")
# An event's detail and an executor's capabilities: names and values, each cut to this many.
FACT_CHARS, FACTS_MAX = 500, 50


def _raw(names: tuple[str, ...]) -> dict[str, str]:
    return {name: request.args.get(name, "").strip() for name in names}


def shared(query: dict[str, str]) -> dict[str, str]:
    """The filters of `query` that the other tab of the runs list takes too."""
    return {k: query[k] for k in SHARED_FILTERS if query.get(k)}


@bp.get("/runs/jobs")
@permission_required("runs:read")
@replica_reads
def index() -> ResponseReturnValue:
    """Client API jobs, newest first, filtered and looked up as the runs list is; later pages come
    as htmx rows. A filter it cannot use is answered 400 with the form and what is wrong."""
    raw = _raw(JOB_FILTERS)
    page = {"query": raw, "statuses": job_reads.JOB_STATUSES, "exact": EXACT_NAMES, "shared": shared(raw)}
    try:
        filters = triage_filters(raw, job_reads.JOB_STATUSES, job_reads.EXACT)
    except BadFilter as bad:
        if rows_only():
            abort(400, description=str(bad))
        return render_template("console/jobs.html", jobs=[], error=str(bad), more=None, **page), 400
    after = JOBS.from_request()
    with read_db() as db:
        jobs, next_key = job_reads.recent_jobs(db, filters, after, PAGE)
    template = "console/partials/job_rows.html" if rows_only() else "console/jobs.html"
    return render_template(template, jobs=jobs, more=more_url(".index", JOBS, next_key, raw), **page)


def _shown(value: Any, json_value: bool) -> dict[str, Any] | None:
    """A value as its page shows it: its text (JSON indented), whether it is cut, its length."""
    if value is None:
        return None
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) if json_value else str(value)
    return {"text": text[:SHOWN_CHARS], "cut": len(text) > SHOWN_CHARS, "length": len(text)}


def _parts(job: Any) -> dict[str, Any]:
    return {"input": _shown(job.input, False), "metadata": _shown(job.metadata_, True),
            "result": _shown(job.result, True), "usage": _shown(job.usage, True),
            "error": _shown(job.error, False)}


def _bounded(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= FACT_CHARS else text[:FACT_CHARS] + "…"


def _facts(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """An event's detail as (name, value) lines, bounded: it holds names, ids and counts, but
    some of them (an executor's id, a reason) came from outside."""
    return [(_bounded(k), _bounded(v)) for k, v in sorted(detail.items())[:FACTS_MAX]]


def _found(db: Any, job_id: str) -> Any:
    job = job_reads.find(db, job_id)
    if job is None:
        abort(404)
    return job


@bp.get("/jobs/<job_id>")
@permission_required("runs:read")
@replica_reads
def detail(job_id: str) -> ResponseReturnValue:
    with read_db() as db:
        job = _found(db, job_id)
        view = job_reads.job_page(db, job)
        parts = _parts(job)
        record_read(db, "job_trace_view", str(job.id))
    facts = view["job"]
    for entry in view["timeline"]:
        if entry["kind"] == "event":
            entry["facts"] = _facts(entry["detail"])
    return render_template("console/job.html", job=facts, record=view["record"], timeline=view["timeline"],
                           terminal=view["terminal"], parts=parts, shown_chars=SHOWN_CHARS,
                           callback_url=callbacks.shown_url(facts["callback_url"]) if facts["callback_url"] else None,
                           can_rerun=current_user.can("runs:write"), approvals=current_user.can("approvals:read"))


@bp.get("/jobs/<job_id>/<part>")
@permission_required("runs:read")
@replica_reads
def whole(job_id: str, part: str) -> ResponseReturnValue:
    """One of a job's values whole ("Show all"): for htmx the value alone, in place of its
    preview; opened as a link, a page of its own."""
    if part not in PARTS:
        abort(404)
    with read_db() as db:
        job = _found(db, job_id)
        value = {"input": job.input, "metadata": job.metadata_, "result": job.result, "usage": job.usage,
                 "error": job.error}[part]
        if value is None:
            abort(404)
        text = value if part in ("input", "error") else json.dumps(value, indent=2, ensure_ascii=False,
                                                                   sort_keys=True)
        record_read(db, "job_trace_view", str(job.id))
    template = "console/partials/job_value.html" if is_htmx() else "console/job_value.html"
    return render_template(template, job_id=job_id, part=part, text=text)


@bp.post("/jobs/<job_id>/rerun")
@permission_required("runs:write")
def rerun(job_id: str) -> ResponseReturnValue:
    """A finished job back in the queue under the same ID (the button shows only on finished
    jobs; the service refuses one in flight all the same)."""
    try:
        with database().session() as db:
            reruns.rerun(db, job_id, current_user.username, via="console")
    except ApiError as err:
        if err.status == 404:
            abort(404)
        flash(err.message, "error")
        return redirect(url_for(".detail", job_id=job_id), code=303)
    flash("The job is queued again under the same ID; executors of its target were told.", "ok")
    return redirect(url_for(".detail", job_id=job_id), code=303)


# ------------------------------------------------------------------ executors, tokens, clients


def _executors_page(status: int = 200, **extra: Any) -> ResponseReturnValue:
    with read_db() as db:
        queue = dispatch_status.dispatch_status(db)
        executors = executor_tokens.list_executors(db)
        tokens = executor_tokens.list_tokens(db)
        targets = dispatch_status.targets(db)
        clients = job_reads.client_apps(db) if current_user.can("clients:read") else None
    held = {row["target"]: row for row in queue["by_target"]}
    for target in targets:
        target.update({k: held.get(target["name"], {}).get(k, 0) for k in ("queued", "running", "dispatched")})
    for executor in executors:
        caps = executor["capabilities"]
        executor["capabilities_text"] = _bounded(caps) if caps is not None else None
    return render_template("console/executors.html", executors=executors, tokens=tokens, targets=targets,
                           counts=queue["summary"], leases=queue["leases"], blocked=queue["blocked_threads"],
                           clients=clients, can_write=current_user.can("runs:write"),
                           can_write_clients=current_user.can("clients:write"),
                           online_seconds=int(executor_tokens.ONLINE_WITHIN.total_seconds()), **extra), status


@bp.get("/executors/")
@permission_required("runs:read")
@replica_reads
def executors() -> ResponseReturnValue:
    return _executors_page()


def _targets_of(raw: str) -> list[str]:
    return [t.strip() for t in raw.split(",") if t.strip()]


def _token_change(action: str, name: str | None = None) -> ResponseReturnValue:
    """Issue, rotate or revoke an executor token; a new token is shown in this answer only."""
    form_name = request.form.get("name", "").strip()
    try:
        with database().session() as db:
            if action == "issue":
                done = executor_tokens.issue(db, form_name, _targets_of(request.form.get("targets", "")),
                                             request.form.get("description", "").strip())
                record_change(db, current_user.username, "POST", "executor-tokens")
            elif action == "rotate":
                assert name is not None
                done = executor_tokens.rotate(db, name)
                record_change(db, current_user.username, "POST", "executor-tokens")
            else:
                assert name is not None
                done = executor_tokens.revoke(db, name)
                record_change(db, current_user.username, "DELETE", f"executor-tokens/{name}")
    except ApiError as err:
        return _executors_page(400 if err.status < 500 else err.status, token_error=err.message,
                               form={"name": form_name, "targets": request.form.get("targets", ""),
                                     "description": request.form.get("description", "")})
    if action == "revoke":
        flash(f"Executor token {done['name']} is revoked: it is refused from now on.", "ok")
        return redirect(url_for(".executors"), code=303)
    return _executors_page(new_token={"kind": "executor", "name": done["name"], "token": done["token"],
                                      "rotated": done.get("rotated", False)})


@bp.post("/executors/tokens")
@permission_required("runs:write")
def issue_token() -> ResponseReturnValue:
    return _token_change("issue")


@bp.post("/executors/tokens/<name>/rotate")
@permission_required("runs:write")
def rotate_token(name: str) -> ResponseReturnValue:
    return _token_change("rotate", name)


@bp.post("/executors/tokens/<name>/revoke")
@permission_required("runs:write")
def revoke_token(name: str) -> ResponseReturnValue:
    return _token_change("revoke", name)


@bp.post("/executors/clients/<app_id>/token/rotate")
@permission_required("clients:write")
def rotate_client_token(app_id: str) -> ResponseReturnValue:
    """Issue (or rotate) a client app's Client Token, shown once."""
    return _client_token("rotate", app_id)


@bp.post("/executors/clients/<app_id>/token/revoke")
@permission_required("clients:write")
def revoke_client_token(app_id: str) -> ResponseReturnValue:
    return _client_token("revoke", app_id)


def _client_token(action: str, app_id: str) -> ResponseReturnValue:
    try:
        with database().session() as db:
            if action == "rotate":
                done = client_service.rotate_client_token(db, app_id)
                record_change(db, current_user.username, "POST", f"clients/{app_id}/token")
            else:
                done = client_service.revoke_client_token(db, app_id)
                record_change(db, current_user.username, "DELETE", f"clients/{app_id}/token")
    except ApiError as err:
        return _executors_page(400 if err.status < 500 else err.status, client_error=err.message)
    if action == "revoke":
        flash(f"The Client Token of {app_id} is revoked: it is refused from now on." if done["revoked"]
              else f"{app_id} had no Client Token: nothing to revoke.", "ok")
        return redirect(url_for(".executors") + "#clients", code=303)
    return _executors_page(new_token={"kind": "client", "name": app_id, "token": done["client_token"],
                                      "rotated": done.get("rotated", False)})
