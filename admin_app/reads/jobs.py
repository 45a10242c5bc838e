"""Client API jobs as support staff read them (runs:read; CLIENT_API_AND_EXECUTOR.md §F): the
console's jobs list (the runs list's filters and lookups), a job with one timeline, the admin
API's list, record, audit, trace and trace search, and the client apps' tokens for the Executors
page (whose executors, tokens and queue come from jobs/executor_tokens.py and jobs/dispatch_status.py).

The jobs list is keyset paged on (created_at, id) like the runs list; a lookup matches a prefix of
any ID a job is known by (its own, its request's, its session's, its executor's, one of its tool
calls'), each branch an index range read (sql/081) that stops after one page.

A job's timeline merges, in true order, its own events (bz_job_events), its tool calls (the
invocation rows it owns, with their approvals and dispatch journal), and its completion callbacks
with every attempt. An event that only repeats what a tool call's or a callback's own rows show
(a tool event about a call shown, a `callback` event naming a callback shown) is folded into that
entry instead of being shown twice (`_Calls` says which call a tool event is about). In the admin
API's trace the job's own events are Core's audit rows, and a tool call none of them is about is
rebuilt from its rows (reads/traces.job_events).

Untrusted text (input, metadata, result, executor output) is read here as stored; lists read only
bounded previews of it, computed by the database."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso
from ..conversation_audit.availability import Availability
from ..errors import ApiError
from ..identity.models import ClientApp, Route
from ..invocations.models import Approval, Invocation
from ..jobs import dead_letters
from ..jobs.models import STATUSES, TERMINAL, Job, JobEvent
from ..jobs.view import job_record
from . import lookup
from .lookup import like_prefix, starts_with
from .traces import TRACE_STAGES, _timeline_call, approvals_of, core_job_trace, elapsed_ms, job_events, trace_event

JOB_STATUSES = STATUSES
# What a lookup matched, in the order the console names it.
MATCHES = ("job ID", "request ID", "session ID", "executor ID", "invocation ID", "tool job ID")
# Exact lookups on one field each, as links from a job's page name its peers.
EXACT = {"job_id": Job.id, "session": Job.session_id, "thread": Job.thread_key, "executor": Job.executor_id}
TIMELINE_EVENTS_MAX = 2000     # a console timeline's own events; a job has a few dozen
SOURCE_JOB = "job"             # a trace event from the job's own timeline
# The job events about one tool call (tool_lookup is about none).
TOOL_EVENTS = ("tool_call", "tool_result", "tool_call_deduped", "tool_approval_pending", "tool_approved",
               "tool_denied")

Key = lookup.Key
JOBS = lookup.Listing(Job, EXACT, frozenset({"job_id"}), Invocation.owner_job_id == Job.id, MATCHES)


JobFilters = lookup.Filters


def _branches(q: str) -> list[tuple[str, Any, bool]]:
    """(what matched, condition, through a tool call) for each ID a job is known by."""
    text = like_prefix(q)
    return [("job ID", starts_with(Job.id, q), False),
            ("request ID", Job.request_id.like(text), False),
            ("session ID", Job.session_id.like(text), False),
            ("executor ID", Job.executor_id.like(text), False),
            ("invocation ID", Invocation.invocation_id.like(text), True),
            ("tool job ID", starts_with(Invocation.id, q), True)]


def recent_jobs(db: Session, f: JobFilters, after: Key | None,
                limit: int) -> tuple[list[dict[str, Any]], Key | None]:
    """Jobs matching the filters (and the lookup, if any), newest first, after `after`; and the
    key to continue from, if more remain. Each row's `matched` names what the lookup matched;
    `input_preview` is the input's first JOB_PREVIEW_CHARS characters (limits)."""
    columns = (Job.id, Job.request_id, Job.client_app_id, Job.route_key, Job.target, Job.status,
               Job.executor_id, Job.attempts,
               func.left(Job.input, limits.JOB_PREVIEW_CHARS).label("input_preview"), Job.created_at, Job.updated_at)
    return lookup.recent(db, JOBS, columns, _branches(f.q) if f.q else [], f, after, limit)


def find(db: Session, job_ref: str) -> Job | None:
    ident = lookup.parse_uuid(job_ref)
    return db.get(Job, ident) if ident is not None else None


def _route_name(db: Session, route_key: str) -> str | None:
    return db.scalar(select(Route.name).where(Route.route_key == route_key))


def admin_record(db: Session, job: Job) -> dict[str, Any]:
    """GET /admin/api/runs/<job_id>: the job's record as GET /jobs shows it (jobs/view.py), with
    what an administrator also reads: the input (`input`, and `raw_input`: the hub keeps the text
    as it came), the principal, the thread, the executor token's name, the dispatch snapshot.
    The live claim token is not shown, only whether there is one."""
    record = job_record(job)
    record.update({
        "input": job.input,
        "raw_input": job.input,
        "principal": job.principal,
        "on_behalf_of": job.on_behalf_of,
        "continue": job.is_continue,
        "thread_key": job.thread_key,
        "executor_token": job.executor_token,
        "has_claim_token": job.claim_token is not None,
        "max_retries": job.max_retries,
        "finished_at": iso(job.finished_at),
        "dispatch": {"route_key": job.route_key, "route_name": _route_name(db, job.route_key),
                     "is_continue": job.is_continue, "retry": {"max": job.max_retries}},
    })
    record["dispatch"] = {key: value for key, value in record["dispatch"].items() if value is not None}
    return {key: value for key, value in record.items() if value is not None}


def _callbacks(db: Session, job: Job) -> list[dict[str, Any]]:
    """The job's completion callbacks with their attempts, as jobs/dead_letters.py shows them (the
    URL cut to its origin: its path and query may hold the receiver's secret)."""
    return dead_letters.of_job(db, str(job.id)) or []


def _events(db: Session, job_id: uuid.UUID, limit: int) -> list[JobEvent]:
    return list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id).limit(limit)))


@dataclass
class _Calls:
    """A job's tool calls (the invocations it owns) with their approvals, and which call a tool
    event of the job's timeline is about: the one it names (`invocation_id`, `tool_job_id`), the
    one whose approval it names (`approval_id`, the approval's number), or the only call of the
    tool it names (`tool`)."""

    calls: list[Invocation]
    approvals: dict[uuid.UUID, list[Approval]]

    @classmethod
    def of(cls, db: Session, job_id: uuid.UUID) -> _Calls:
        calls = list(db.scalars(select(Invocation).where(Invocation.owner_job_id == job_id)
                                .order_by(Invocation.created_at, Invocation.id)))
        return cls(calls, {inv.id: approvals_of(db, inv.id) for inv in calls})

    def named_by(self, event: JobEvent) -> Invocation | None:
        if event.event not in TOOL_EVENTS or not isinstance(event.detail, dict):
            return None
        detail = event.detail
        ids = {str(detail[k]) for k in ("invocation_id", "tool_job_id", "call_id") if detail.get(k)}
        for inv in self.calls:
            if inv.invocation_id in ids or str(inv.id) in ids:
                return inv
        number = detail.get("approval_id")
        if number is not None:
            for inv in self.calls:
                if any(a.number == number for a in self.approvals[inv.id]):
                    return inv
        same_tool = [inv for inv in self.calls if inv.tool == detail.get("tool")]
        return same_tool[0] if len(same_tool) == 1 else None

    def mentioned_by(self, event: JobEvent) -> set[uuid.UUID]:
        """The calls a tool event may be about: the one it names, else every call of its tool."""
        named = self.named_by(event)
        if named is not None:
            return {named.id}
        if event.event not in TOOL_EVENTS or not isinstance(event.detail, dict):
            return set()
        return {inv.id for inv in self.calls if inv.tool == event.detail.get("tool")}


def _folded(event: JobEvent, calls: _Calls, callback_ids: set[int]) -> bool:
    """Whether `event` only repeats what a tool call's or a callback's own rows show."""
    if calls.named_by(event) is not None:
        return True
    return (event.event.startswith("callback") and isinstance(event.detail, dict)
            and event.detail.get("callback_id") in callback_ids)


# How the timeline and the trace name each event: (stage, severity, title). A `finished` event's
# severity follows its status; a `callback` event's its outcome.
EVENT_VIEWS: dict[str, tuple[str, str, str]] = {
    "received": ("launch", "info", "Job received"),
    "rejected": ("launch", "error", "Job rejected"),
    "awaiting_executor": ("launch", "info", "Waiting for an executor"),
    "dispatched": ("execution", "info", "Claimed by an executor"),
    "lease_expired": ("recovery", "warning", "Lease expired: back in the queue"),
    "retry_scheduled": ("recovery", "warning", "Executor failed: retry scheduled"),
    "finished": ("execution", "info", "Job finished"),
    "expired": ("recovery", "error", "Expired in the queue"),
    "rerun": ("recovery", "info", "Rerun: back in the queue"),
    "result_ignored": ("execution", "warning", "Result ignored"),
    "result_refused": ("execution", "warning", "Result refused"),
    "tool_call": ("tool", "info", "Tool call"),
    "tool_result": ("tool", "info", "Tool result"),
    "tool_lookup": ("tool", "info", "Tool definitions looked up"),
    "tool_call_deduped": ("tool", "info", "Tool call answered from the journal"),
    "tool_approval_pending": ("approval", "warning", "Tool awaiting approval"),
    "tool_approved": ("approval", "info", "Tool approved"),
    "tool_denied": ("approval", "info", "Tool denied"),
    "callback": ("delivery", "info", "Completion callback"),
    "callback_dead": ("delivery", "error", "Completion callback given up"),
    "callback_replayed": ("delivery", "info", "Completion callback replayed"),
    "callback_queued": ("delivery", "info", "Completion callback queued"),
    "callback_resolved": ("delivery", "info", "Dead completion callback resolved"),
}


def event_view(event: str, detail: dict[str, Any]) -> tuple[str, str, str]:
    stage, severity, title = EVENT_VIEWS.get(event, ("system", "info", event.replace("_", " ").capitalize()))
    if event == "finished" and detail.get("status") in ("error", "rejected"):
        severity = "error"
    if event == "callback" and detail.get("ok") is False:
        severity = "error" if detail.get("final") else "warning"
    return stage, severity, title


def _moment(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _summary(*parts: object) -> str:
    return " · ".join(str(p) for p in parts if p not in (None, "") and not isinstance(p, dict | list))


SUMMARY_KEYS = ("status", "target", "executor_id", "tool", "attempt", "attempts", "from", "reason", "url")


def _event_summary(event: JobEvent) -> str:
    """`status done · attempts 0 · by runner-1`: the detail's telling values, and who did it."""
    detail = event.detail if isinstance(event.detail, dict) else {}
    parts = [f"{key.replace('_', ' ')} {detail[key]}" for key in SUMMARY_KEYS
             if detail.get(key) not in (None, "") and not isinstance(detail[key], dict | list)]
    return _summary(*parts, event.actor and f"by {event.actor}")


_RANK = {"event": 0, "call": 1, "callback": 2}
# A job's page shows these columns as they are (the record has them as Core writes them).
PAGE_FACTS = ("id", "request_id", "status", "client_app_id", "route_key", "target", "attempts", "max_retries",
              "executor_id", "executor_token", "claimed_at", "lease_until", "run_after", "session_id", "is_continue",
              "thread_key", "principal", "on_behalf_of", "callback_url", "finished_at")


def job_page(db: Session, job: Job) -> dict[str, Any]:
    """The console's job page: the record, and one timeline of the job's events, tool calls and
    callbacks in true order, each entry with its time since the job was received."""
    start = job.created_at
    calls = _Calls.of(db, job.id)
    callbacks = _callbacks(db, job)
    callback_ids = {c["id"] for c in callbacks}
    entries: list[tuple[datetime, str, int, dict[str, Any]]] = []
    for event in _events(db, job.id, TIMELINE_EVENTS_MAX):
        if _folded(event, calls, callback_ids):
            continue
        detail = event.detail if isinstance(event.detail, dict) else {}
        stage, severity, title = event_view(event.event, detail)
        entries.append((event.at, "event", event.id, {
            "event": event.event, "actor": event.actor, "detail": detail, "stage": stage,
            "severity": severity, "title": title}))
    for inv in calls.calls:
        entries.append((inv.created_at, "call", 0, _timeline_call(db, inv, start)))
    for callback in callbacks:
        entries.append((_moment(callback["created_at"]), "callback", callback["id"], callback))
    entries.sort(key=lambda e: (e[0], _RANK[e[1]], e[2]))
    timeline = [{"kind": kind, "at": iso(at), "offset_ms": elapsed_ms(start, at), **data}
                for at, kind, _, data in entries]
    facts = {name: getattr(job, name) for name in PAGE_FACTS}
    return {"job": facts, "record": admin_record(db, job), "timeline": timeline,
            "terminal": job.status in TERMINAL, "calls": len(calls.calls), "callbacks": len(callbacks)}


# ------------------------------------------------------------------ Core's admin API shapes


def _core_event(event: JobEvent) -> dict[str, Any]:
    detail = event.detail if isinstance(event.detail, dict) else {}
    stage, severity, title = event_view(event.event, detail)
    return trace_event(event.at, event.event, stage, severity, title, _event_summary(event), detail, SOURCE_JOB)


def _trace_events(db: Session, job: Job, calls: _Calls) -> list[dict[str, Any]]:
    """The job's events in Core's shape, oldest first, the first JOB_TRACE_EVENTS_MAX (limits):
    its own (Core's audit rows), and the governance events of each tool call none of them is about."""
    rows = _events(db, job.id, TIMELINE_EVENTS_MAX)
    covered = set().union(*(calls.mentioned_by(e) for e in rows))
    events = [_core_event(e) for e in rows]
    for inv in calls.calls:
        if inv.id not in covered:
            events += job_events(db, inv, calls.approvals[inv.id])
    events.sort(key=lambda e: e["ts"] or "")  # stable: same-time events keep their order
    return events[:limits.JOB_TRACE_EVENTS_MAX]


def audit(db: Session, job: Job) -> list[dict[str, Any]]:
    """GET /admin/api/runs/<job_id>/audit: up to JOB_AUDIT_MAX (limits) rows `{ts, event, stage,
    severity, title, summary, detail}`, oldest first."""
    keys = ("ts", "event", "stage", "severity", "title", "summary", "detail")
    events = _trace_events(db, job, _Calls.of(db, job.id))[:limits.JOB_AUDIT_MAX]
    return [{k: e[k] for k in keys} for e in events]


def lookup_of(job: Job) -> dict[str, Any]:
    return {"job_id": str(job.id), "request_id": job.request_id, "client_app_id": job.client_app_id,
            "thread_id": job.thread_key, "route_key": job.route_key, "principal": job.principal}


def job_trace(db: Session, job: Job) -> dict[str, Any]:
    """Core's job trace `{job (+ raw_input), trace: {summary, events}, approvals, messages, lookup,
    debug_bundle, debug_report}`. The hub keeps no conversation messages for a job (`messages` is
    empty) and builds no debug bundle (null, as for a tool job's trace)."""
    calls = _Calls.of(db, job.id)
    events = _trace_events(db, job, calls)
    stage_count = dict.fromkeys(TRACE_STAGES, 0)
    for event in events:
        stage_count[event["stage"]] = stage_count.get(event["stage"], 0) + 1
    every_approval = [a for inv in calls.calls for a in calls.approvals[inv.id]]
    summary: dict[str, Any] = {
        "job_id": str(job.id), "request_id": job.request_id, "status": job.status,
        "stage_count": stage_count, "event_count": len(events),
        "error_count": sum(e["severity"] == "error" for e in events),
        "warning_count": sum(e["severity"] == "warning" for e in events),
        "tool_calls": sum(e["event"] == "tool_call" for e in events),
        "tool_results": sum(e["event"] == "tool_result" for e in events),
        "approvals": len(every_approval),
        "deliveries": sum(e["stage"] == "delivery" for e in events),
        "llm_requests": 0, "perceptions": 0, "knowledge_events": 0, "message_count": 0}
    usage = job.usage if isinstance(job.usage, dict) else {}
    duration = usage.get("duration_ms")
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        summary["duration_ms"] = duration
    else:
        measured = elapsed_ms(job.created_at, job.updated_at)
        if measured is not None:
            summary["duration_ms"] = measured
    invocation_of = {inv.id: inv for inv in calls.calls}
    return {
        "job": admin_record(db, job),
        "trace": {"summary": summary, "events": events},
        "approvals": [{"id": a.number, "approval_id": str(a.id), "job_id": str(job.id),
                       "tool_job_id": str(a.job_id), "invocation_id": invocation_of[a.job_id].invocation_id,
                       "tool": a.tool, "risk": a.risk, "args_hash": a.args_hash,
                       "argument_keys": list(a.argument_keys), "status": a.status, "decided_by": a.decided_by,
                       "created_at": iso(a.created_at), "decided_at": iso(a.decided_at)}
                      for a in every_approval],
        "messages": [],
        "lookup": lookup_of(job),
        "debug_bundle": None,
        "debug_report": None,
    }


def any_job_trace(db: Session, job_ref: str, available: Availability) -> dict[str, Any]:
    """GET /admin/api/runs/<job_id>/trace: an agent's tool job (an invocation, reads/traces.py) as
    it always was, else a Client API job; 404 `not_found` for neither."""
    try:
        return core_job_trace(db, job_ref, available)
    except ApiError as err:
        job = find(db, job_ref) if err.code == "not_found" else None
        if job is None:
            raise
    return job_trace(db, job)


def _preview_columns() -> tuple[Any, ...]:
    """A list row's bounded values, computed by the database: no row brings its whole input or
    result back."""
    report = Job.result["report"]
    text_summary = case((func.jsonb_typeof(Job.result["text"]) == "string",
                         func.left(Job.result["text"].astext, limits.JOB_PREVIEW_CHARS)))
    summary = case((func.jsonb_typeof(report["summary"]) == "string",
                    func.left(report["summary"].astext, limits.JOB_PREVIEW_CHARS)), else_=text_summary)
    severity = case((func.jsonb_typeof(report["severity"]) == "string",
                     func.left(report["severity"].astext, 32)))
    visitor = case((func.jsonb_typeof(Job.metadata_["visitor_uid"]) == "string",
                    func.left(Job.metadata_["visitor_uid"].astext, 191)))
    thread = case((func.jsonb_typeof(Job.metadata_["thread_id"]).in_(("string", "number")),
                   Job.metadata_["thread_id"]))
    return (func.left(Job.input, limits.JOB_PREVIEW_CHARS).label("input_preview"), summary.label("summary"),
            severity.label("severity"), visitor.label("visitor_uid"), thread.label("thread_id"))


def run_list(db: Session, limit: int, offset: int) -> list[dict[str, Any]]:
    """GET /admin/api/runs: Core's rows, newest first."""
    query = (select(Job.id, Job.request_id, Job.status, Job.target, Job.route_key, Job.client_app_id,
                    Job.session_id, Job.created_at, Job.updated_at, *_preview_columns())
             .order_by(Job.created_at.desc(), Job.id.desc()).limit(limit).offset(offset))
    return [{"job_id": str(r.id), "request_id": r.request_id, "status": r.status, "target": r.target,
             "route": r.route_key, "profile": "default", "project": "", "source": r.client_app_id,
             "client_app_id": r.client_app_id, "session_id": r.session_id, "input_preview": r.input_preview,
             "visitor_uid": r.visitor_uid, "thread_id": r.thread_id, "severity": r.severity,
             "summary": r.summary, "created_at": iso(r.created_at), "updated_at": iso(r.updated_at)}
            for r in db.execute(query)]


SEARCH_KEYS = ("job_id", "request_id", "client_id", "client_app_id", "principal_id", "thread_id")


def search(db: Session, key: str, value: str, limit: int) -> list[dict[str, Any]]:
    """GET /admin/api/runs/trace's matches for one lookup (`key` one of SEARCH_KEYS but job_id),
    newest first: Core's match rows."""
    condition = {"request_id": Job.request_id == value,
                 "client_id": Job.client_app_id == value,
                 "client_app_id": Job.client_app_id == value,
                 "principal_id": and_(Job.principal.is_not(None), Job.principal["id"].astext == value),
                 "thread_id": Job.thread_key == value}[key]
    query = (select(Job.id, Job.request_id, Job.status, Job.target, Job.client_app_id, Job.thread_key,
                    Job.session_id, Job.route_key, Route.name.label("route_name"), Job.principal,
                    func.left(Job.input, limits.JOB_PREVIEW_CHARS).label("input_preview"),
                    Job.created_at, Job.updated_at)
             .outerjoin(Route, Route.route_key == Job.route_key)
             .where(condition).order_by(Job.created_at.desc(), Job.id.desc()).limit(limit))
    return [{"job_id": str(r.id), "request_id": r.request_id, "status": r.status, "target": r.target,
             "profile": "default", "project": "", "source": r.client_app_id, "client_app_id": r.client_app_id,
             "thread_id": r.thread_key, "session_id": r.session_id, "input_preview": r.input_preview,
             "route_key": r.route_key, "route_name": r.route_name, "principal": r.principal,
             "created_at": iso(r.created_at), "updated_at": iso(r.updated_at)}
            for r in db.execute(query)]


# ------------------------------------------------------------------ the Executors page's clients


def client_apps(db: Session) -> list[dict[str, Any]]:
    """Every client app, with whether a Client Token is issued and when (never the token)."""
    return [{"app_id": r.app_id, "name": r.name, "enabled": r.enabled, "allowed_routes": list(r.allowed_routes),
             "token_issued": r.client_token_hash is not None, "token_issued_at": iso(r.client_token_issued_at),
             "rate_limit_per_min": r.rate_limit_per_min}
            for r in db.scalars(select(ClientApp).order_by(ClientApp.app_id))]
