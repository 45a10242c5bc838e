"""Run and tool-job traces (runs:read) for support staff, in the admin API and the console: a run,
its visible messages, its tool jobs and its archive link; a job's milestones, key names, approval
state and business status. Never argument values or business response bodies."""
from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..conversation_audit.availability import Availability
from ..errors import ApiError
from ..invocations.approvals import expired
from ..invocations.models import Approval, Invocation, JournalEntry
from ..invocations.service import Dispatcher
from ..runtime.models import Message, Run
from ..validation import UUID_V1_5
from .archives import run_audit_link

# ------------------------------------------------------------------ run traces


def _found_run(db: Session, run_id: uuid.UUID) -> Run:
    run = db.get(Run, run_id)
    if run is None:
        raise ApiError("run_not_found")
    return run


def run_trace(db: Session, run_id: uuid.UUID, available: Availability) -> dict[str, Any]:
    return _run_trace_of(db, _found_run(db, run_id), available)


def run_trace_with_context(db: Session, run_id: uuid.UUID,
                           available: Availability) -> tuple[dict[str, Any], str]:
    """The run trace and the context the hub answered the run with, as indented JSON: the
    console's trace page shows both."""
    run = _found_run(db, run_id)
    return _run_trace_of(db, run, available), json.dumps(run.context, indent=2, ensure_ascii=False)


def _run_trace_of(db: Session, run: Run, available: Availability) -> dict[str, Any]:
    return {
        "schema": "bailing.agent-run-trace.v1",
        "run": {
            "run_id": str(run.id),
            "session_id": str(run.session_id),
            "client_app_id": run.client_app_id,
            "route_key": run.route_key,
            "thread_id": run.thread_id,
            "client_conversation_id": run.client_conversation_id,
            "user_message_id": run.user_message_id,
            "status": run.status,
            "profile_revision": run.profile_revision,
            "capability_revision": run.capability_revision,
            "created_at": iso(run.created_at),
            "completed_at": iso(run.completed_at),
            # conversation_audit_id and client_turn_id appear once an archive links the run.
            **run_audit_link(db, run.id, available),
        },
        "messages": visible_messages(db, run.id),
        "jobs": jobs_of_run(db, run.id),
    }


def visible_messages(db: Session, run_id: uuid.UUID) -> list[dict[str, Any]]:
    return [{"role": m.role, "message_id": m.message_id, "content": m.content, "created_at": iso(m.created_at)}
            for m in db.scalars(select(Message).where(Message.run_id == run_id).order_by(Message.id))]


# ------------------------------------------------------------------ the console's run timeline
# Entries at the same instant keep this order: the run is created before its first message, a
# call comes after the message that asked for it, the answer before the run completes.
_RANK = {"run_created": 0, "message": 1, "call": 2, "run_completed": 3}
# Statuses that end a call without a journal row to time it by.
_ENDED = ("executed", "business_rejected", "denied", "rejected_before_dispatch")


def run_timeline(db: Session, run_id: uuid.UUID, available: Availability) -> dict[str, Any]:
    """The console's trace page: the run trace (as the admin API has it), the frozen context, one
    timeline of the run, its messages and its tool calls in true order (each entry with its time
    since the run began, each call with its milestones and duration), and the archive's turn."""
    run = _found_run(db, run_id)
    start = run.created_at
    entries: list[tuple[datetime, str, dict[str, Any]]] = [(start, "run_created", {})]
    for m in db.scalars(select(Message).where(Message.run_id == run.id).order_by(Message.id)):
        entries.append((m.created_at, "message",
                        {"role": m.role, "message_id": m.message_id, "content": m.content}))
    for inv in _invocations_of_run(db, run.id):
        entries.append((inv.created_at, "call", _timeline_call(db, inv, start)))
    if run.completed_at is not None:
        entries.append((run.completed_at, "run_completed", {"status": run.status}))
    order = sorted(range(len(entries)), key=lambda i: (entries[i][0], _RANK[entries[i][1]], i))
    timeline = [{"kind": kind, "at": iso(at), "offset_ms": elapsed_ms(start, at), **data}
                for at, kind, data in (entries[i] for i in order)]
    return {"trace": _run_trace_of(db, run, available),
            "context": json.dumps(run.context, indent=2, ensure_ascii=False),
            "timeline": timeline, "archive": archive_turn(db, run.id, available)}


def _timeline_call(db: Session, inv: Invocation, start: datetime) -> dict[str, Any]:
    approval = db.scalar(select(Approval).where(Approval.job_id == inv.id))
    journal = db.get(JournalEntry, inv.id)
    marks: list[tuple[str, datetime | None]] = [("created", inv.created_at)]
    if approval is not None:
        marks += [("approval requested", approval.created_at),
                  (f"approval {approval.status} by {approval.decided_by}", approval.decided_at),
                  ("approval consumed", approval.consumed_at)]
        if expired(approval, utc_now()):
            marks.append(("approval expired: it can no longer be decided or resumed", approval.expires_at))
    if inv.status == "rejected_before_dispatch" and inv.reason == "rate_limited" and inv.rate_limit:
        marks.append((_rate_limited_mark(inv.rate_limit), inv.updated_at))
    finished = inv.updated_at if inv.status in _ENDED else None
    if journal is not None:
        outcome = f"HTTP {journal.http_status}" if journal.http_status else "no answer"
        marks += [("journal started: request sent", journal.started_at),
                  (f"journal finished: {journal.state}, {outcome}", journal.finished_at)]
        finished = journal.finished_at
    reached = sorted(((label, at) for label, at in marks if at is not None), key=lambda m: m[1])
    milestones = [{"label": label, "at": iso(at), "offset_ms": elapsed_ms(start, at)} for label, at in reached]
    return {"job": job_view(db, inv), "milestones": milestones,
            "duration_ms": elapsed_ms(inv.created_at, finished),
            "approval": None if approval is None else {"id": str(approval.id), "number": approval.number},
            # What support quotes to the business system: the request carried both.
            "idempotency_key": journal.idempotency_key if journal is not None else None,
            "failure": journal.failure if journal is not None else None}


def _rate_limited_mark(limit: dict[str, Any]) -> str:
    """The milestone of a call held back by a rate-limit gate, e.g. `rate limited by the tool
    gate (10 per 60 s, declaration): resume after 5400 ms`."""
    # A client gate's refusal of a resume tells no wait (BUSINESS_SIDE §D.1).
    wait = f"resume after {limit['retry_after_ms']} ms" if "retry_after_ms" in limit else "resume later"
    return (f"rate limited by the {limit['level']} gate ({limit['count']} per {limit['window_sec']} s, "
            f"{limit['source']}): {wait}")


def archive_turn(db: Session, run_id: uuid.UUID, available: Availability) -> dict[str, Any] | None:
    """Where the archive holds the run: its turn's start (or the run link, if the turn has no
    start event), as the sequence a transcript opens at."""
    if not available.archives:
        return None
    row = db.execute(text("""
        SELECT l.archive_id, l.client_turn_id, l.sequence AS link,
               (SELECT max(s.sequence) FROM bz_agent_conversation_events s
                 WHERE s.archive_id = l.archive_id AND s.client_turn_id = l.client_turn_id
                   AND s.kind = 'turn_start' AND s.sequence <= l.sequence) AS turn_start
          FROM bz_agent_conversation_events l WHERE l.run_id = :run"""), {"run": run_id}).first()
    if row is None:
        return None
    return {"archive_id": str(row.archive_id), "client_turn_id": row.client_turn_id,
            "sequence": row.turn_start or row.link}


# ------------------------------------------------------------------ tool job traces


def job_view(db: Session, inv: Invocation) -> dict[str, Any]:
    approval = db.scalar(select(Approval).where(Approval.job_id == inv.id))
    journal = db.get(JournalEntry, inv.id)
    status, reason = inv.status, inv.reason
    if journal is not None and journal.state == "dispatching" and Dispatcher.gone(db, inv.id):
        # Sent, and nobody left to record its answer: unknown, as the receipt and a resume say.
        status, reason = "reconciliation_required", "no_outcome_recorded"
    return {
        "job_id": str(inv.id),
        "invocation_id": inv.invocation_id,
        "session_id": str(inv.session_id) if inv.session_id else None,  # None: a Client API job's call
        "route_key": inv.route_key,
        "run_id": str(inv.run_id) if inv.run_id else None,
        "tool": inv.tool,
        "scope": inv.scope,
        "status": status,
        "reason": reason,
        "argument_keys": list(inv.argument_keys),
        "args_hash": inv.args_hash,
        "business_status": inv.business_status,
        # The rate-limit gate holding the call back, and the wait the agent was told (sql/074).
        "rate_limit": inv.rate_limit if status == "rejected_before_dispatch" and reason == "rate_limited" else None,
        "approval": None if approval is None else {
            "id": str(approval.id), "state": approval.status, "decided_by": approval.decided_by,
            "decided_at": iso(approval.decided_at), "consumed_at": iso(approval.consumed_at)},
        "journal": None if journal is None else {
            "state": journal.state, "method": journal.method, "http_status": journal.http_status,
            "started_at": iso(journal.started_at), "finished_at": iso(journal.finished_at)},
        "created_at": iso(inv.created_at),
        "updated_at": iso(inv.updated_at),
    }


def _invocations_of_run(db: Session, run_id: uuid.UUID) -> list[Invocation]:
    return list(db.scalars(select(Invocation).where(Invocation.run_id == run_id)
                           .order_by(Invocation.created_at, Invocation.id)))


def jobs_of_run(db: Session, run_id: uuid.UUID) -> list[dict[str, Any]]:
    return [job_view(db, inv) for inv in _invocations_of_run(db, run_id)]


def job_trace(db: Session, job_ref: str, available: Availability) -> dict[str, Any]:
    try:
        job_id = uuid.UUID(job_ref)
    except ValueError:
        raise ApiError("job_not_found") from None
    inv = db.get(Invocation, job_id)
    if inv is None:
        raise ApiError("job_not_found")
    job = job_view(db, inv)
    if inv.run_id is not None:
        job.update(run_audit_link(db, inv.run_id, available))
    return {"schema": "bailing.tool-job-trace.v1", "job": job}


# ------------------------------------------------------------------ Core-shaped traces
# The trace views of the admin API's Core paths. Events are rebuilt from what the hub records
# (the invocation, its approval and its dispatch journal); their detail keeps scalars only, and
# for a tool call the argument key names, never values.

TRACE_SOURCE_HUB = "hub_governance"
TRACE_STAGES = ("launch", "context", "summary", "recovery", "approval", "tool", "delivery", "channel",
                "execution", "config", "system")
# States that ask an operator to look (warning) or that went wrong (error).
_WARNING_STATES = ("awaiting_approval", "denied", "business_rejected", "rejected_before_dispatch")
_ERROR_STATES = ("reconciliation_required",)


def trace_event(ts: datetime | None, event: str, stage: str, severity: str, title: str, summary: str,
                detail: dict[str, Any], source: str, tool_job_id: str | None = None) -> dict[str, Any]:
    item = {"ts": iso(ts), "event": event, "stage": stage, "severity": severity, "title": title,
            "summary": summary, "detail": detail, "source": source}
    if tool_job_id is not None:
        item["tool_job_id"] = tool_job_id
    return item


def _summary(*parts: object) -> str:
    return " · ".join(str(p) for p in parts if p not in (None, ""))


def _state_severity(inv: Invocation) -> str:
    if inv.status in _ERROR_STATES or (inv.status == "executed" and inv.business_status is not None
                                       and not 200 <= inv.business_status < 300):
        return "error"
    return "warning" if inv.status in _WARNING_STATES else "info"


def _approval_number(approval: Approval) -> int | str:
    return getattr(approval, "number", None) or str(approval.id)


def job_events(db: Session, inv: Invocation, approvals: list[Approval]) -> list[dict[str, Any]]:
    """The governance events of one tool job, oldest first."""
    job_id = str(inv.id)
    base = {"tool": inv.tool, "scope": inv.scope, "route": inv.route_key,
            "invocation_id": inv.invocation_id}
    events = [trace_event(inv.created_at, "agent_tool_invocation_created", "tool", "info",
                          "Tool invocation created", _summary(inv.tool, inv.route_key), dict(base),
                          TRACE_SOURCE_HUB, job_id)]
    for approval in approvals:
        number = _approval_number(approval)
        events.append(trace_event(approval.created_at, "tool_approval_pending", "approval", "warning",
                                  "Tool awaiting approval", _summary(number, inv.tool),
                                  {"approval_id": number, "tool": inv.tool}, TRACE_SOURCE_HUB, job_id))
        if expired(approval, utc_now()):
            assert approval.expires_at is not None  # expired() holds only for a set expiry
            events.append(trace_event(approval.expires_at, "tool_approval_expired", "approval", "warning",
                                      "Tool approval expired", _summary(number, inv.tool),
                                      {"approval_id": number, "tool": inv.tool}, TRACE_SOURCE_HUB, job_id))
        if approval.decided_at is not None and approval.status in ("approved", "denied"):
            event = "tool_approved" if approval.status == "approved" else "tool_denied"
            events.append(trace_event(approval.decided_at, event, "approval", "info",
                                      "Tool approved" if approval.status == "approved" else "Tool denied",
                                      _summary(number, inv.tool, approval.decided_by),
                                      {"approval_id": number, "tool": inv.tool, "by": approval.decided_by},
                                      TRACE_SOURCE_HUB, job_id))
    journal = db.get(JournalEntry, inv.id)
    if journal is not None:
        call: dict[str, Any] = {"tool": inv.tool, "scope": inv.scope, "method": journal.method,
                                "path": journal.path}
        if inv.argument_keys:
            call["argument_keys"] = list(inv.argument_keys)
        events.append(trace_event(journal.started_at, "tool_call", "tool", "info", "Tool call",
                                  _summary(inv.tool, inv.scope, journal.method, journal.path), call,
                                  TRACE_SOURCE_HUB, job_id))
        if journal.finished_at is not None:
            result = {"tool": inv.tool, "status": journal.http_status}
            events.append(trace_event(journal.finished_at, "tool_result", "tool",
                                      "error" if journal.http_status is None or journal.http_status >= 400
                                      else "info", "Tool result",
                                      _summary(inv.tool, journal.http_status and f"HTTP {journal.http_status}"),
                                      result, TRACE_SOURCE_HUB, job_id))
    if inv.status == "rejected_before_dispatch" and inv.reason == "rate_limited" and inv.rate_limit:
        limit = inv.rate_limit
        events.append(trace_event(inv.updated_at, "tool_rate_limited", "tool", "warning", "Tool rate limited",
                                  _summary(inv.tool, f"{limit['level']} gate",
                                           f"{limit['count']}/{limit['window_sec']}s",
                                           limit.get("retry_after_ms") and f"retry after {limit['retry_after_ms']} ms"),
                                  {"tool": inv.tool, **limit}, TRACE_SOURCE_HUB, job_id))
    state: dict[str, Any] = {**base, "state": inv.status}
    if inv.business_status is not None:
        state["business_status"] = inv.business_status
    events.append(trace_event(inv.updated_at, "agent_tool_invocation_state", "tool", _state_severity(inv),
                              "Tool invocation state",
                              _summary(inv.tool, inv.status, inv.business_status and f"business={inv.business_status}"),
                              state, TRACE_SOURCE_HUB, job_id))
    return sorted(events, key=lambda e: e["ts"])  # stable: same-time events keep their order


def approvals_of(db: Session, job_id: uuid.UUID) -> list[Approval]:
    return list(db.scalars(select(Approval).where(Approval.job_id == job_id)
                           .order_by(Approval.created_at, Approval.id)))


def elapsed_ms(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None or end < start:
        return None
    return int((end - start).total_seconds() * 1000)


def invocation_row(inv: Invocation, approvals: list[Approval], event_count: int) -> dict[str, Any]:
    """One invocation of a run trace."""
    latest = approvals[-1] if approvals else None
    executed = inv.status == "executed"
    row = {"job_id": str(inv.id), "invocation_id": inv.invocation_id, "tool": inv.tool,
           "status": inv.status, "state": inv.status,
           "ok": (inv.business_status is not None and 200 <= inv.business_status < 300) if executed else None,
           "business_status": inv.business_status,
           "approval_status": latest.status if latest else None,
           "approval_id": _approval_number(latest) if latest else None,
           "event_count": event_count}
    duration = elapsed_ms(inv.created_at, inv.updated_at)
    if duration is not None:
        row["duration_ms"] = duration
    row.update(created_at=iso(inv.created_at), updated_at=iso(inv.updated_at))
    return row


def core_job_trace(db: Session, job_ref: str, available: Availability) -> dict[str, Any]:
    """`GET /admin/api/runs/:job_id/trace`: the job, its events, approvals and the run's visible
    messages. Argument values are never kept by the hub, so `raw_input` is null."""
    try:
        job_id = uuid.UUID(job_ref)
    except ValueError:
        raise ApiError("not_found") from None
    inv = db.get(Invocation, job_id)
    if inv is None:
        raise ApiError("not_found")
    approvals = approvals_of(db, inv.id)
    events = job_events(db, inv, approvals)
    messages = visible_messages(db, inv.run_id) if inv.run_id is not None else []
    job = {**job_view(db, inv), "raw_input": None}
    if inv.run_id is not None:
        job.update(run_audit_link(db, inv.run_id, available))
    stage_count = dict.fromkeys(TRACE_STAGES, 0)
    for event in events:
        stage_count[event["stage"]] += 1
    # Deliveries, model requests, perceptions and knowledge events belong to hub-run jobs; an
    # agent's tool job has none.
    summary = {"job_id": str(inv.id), "request_id": inv.invocation_id, "status": inv.status,
               "stage_count": stage_count, "event_count": len(events),
               "error_count": sum(e["severity"] == "error" for e in events),
               "warning_count": sum(e["severity"] == "warning" for e in events),
               "tool_calls": sum(e["event"] == "tool_call" for e in events),
               "tool_results": sum(e["event"] == "tool_result" for e in events),
               "approvals": len(approvals), "deliveries": 0, "llm_requests": 0, "perceptions": 0,
               "knowledge_events": 0, "message_count": len(messages)}
    duration = elapsed_ms(inv.created_at, inv.updated_at)
    if duration is not None:
        summary["duration_ms"] = duration
    return {
        "job": job,
        "trace": {"summary": summary, "events": events},
        "approvals": [{"id": _approval_number(a), "approval_id": str(a.id), "job_id": str(a.job_id),
                       "tool": a.tool, "risk": a.risk, "args_hash": a.args_hash,
                       "argument_keys": list(a.argument_keys), "status": a.status,
                       "decided_by": a.decided_by,
                       "created_at": iso(a.created_at), "decided_at": iso(a.decided_at)}
                      for a in approvals],
        "messages": messages,
        "lookup": None,
        "debug_bundle": None,
        "debug_report": None,
    }


# ------------------------------------------------------------------ Core-shaped run trace

SOURCE_AGENT = "local_agent"
# The usage numbers a trace may show; anything else a client reported stays out.
SAFE_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens",
                   "tool_calls", "cost_usd")
GOVERNANCE = {"planner": "local_agent", "execution": "bailinghub_governed",
              "hidden_reasoning_sync": False, "tool_payloads": "summary_only"}


def _usage(completion: dict[str, Any] | None) -> dict[str, Any] | None:
    usage = (completion or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    kept = {k: usage[k] for k in SAFE_USAGE_KEYS
            if type(usage.get(k)) in (int, float) and usage[k] >= 0}
    return kept or None


def _completion_text(completion: dict[str, Any] | None, key: str) -> str | None:
    value = (completion or {}).get(key)
    return value if isinstance(value, str) else None


def agent_client_trace(db: Session, thread_ref: str, run_ref: str, available: Availability) -> dict[str, Any]:
    """`GET /admin/api/threads/:thread_id/agent-runs/:run_id/trace`: the run, the events the hub
    can rebuild for it, and its tool invocations. 404 unless the run is on that thread."""
    run = db.get(Run, uuid.UUID(run_ref)) if UUID_V1_5.fullmatch(run_ref) else None
    on_thread = thread_ref.isascii() and thread_ref.isdigit() and len(thread_ref) <= 19
    if run is None or not on_thread or int(thread_ref) != run.thread_id:
        raise ApiError("not_found")
    completion = run.completion
    model, runtime = _completion_text(completion, "model"), _completion_text(completion, "runtime")
    updated_at = run.completed_at or run.created_at
    events = [trace_event(run.created_at, "agent_client_run_started", "launch", "info",
                          "Local agent started", "The local agent plans; the hub governs and audits",
                          {"planner": "local_agent", "hidden_reasoning_sync": False}, SOURCE_AGENT)]
    invocations = []
    approvals_total = 0
    for inv in _invocations_of_run(db, run.id):
        approvals = approvals_of(db, inv.id)
        approvals_total += len(approvals)
        tool_events = job_events(db, inv, approvals)
        events.extend(tool_events)
        invocations.append(invocation_row(inv, approvals, len(tool_events)))
    if run.completed_at is not None:
        severity = {"completed": "info", "failed": "error"}.get(run.status, "warning")
        events.append(trace_event(run.completed_at, "agent_client_run_completed", "delivery", severity,
                                  "Local agent submitted its final reply",
                                  " · ".join(v for v in (run.status, model, runtime) if v),
                                  {"status": run.status}, SOURCE_AGENT))
    events.sort(key=lambda e: e["ts"])  # stable: same-time events keep their order
    summary: dict[str, Any] = {"event_count": len(events), "tool_invocations": len(invocations),
                               "approvals": approvals_total,
                               "warning_count": sum(e["severity"] == "warning" for e in events),
                               "error_count": sum(e["severity"] == "error" for e in events)}
    duration = elapsed_ms(run.created_at, updated_at)
    if duration is not None:
        summary["duration_ms"] = duration
    summary["partial"] = False
    return {
        "kind": "agent_client_run",
        "run": {
            "run_id": str(run.id), "thread_id": run.thread_id, "client_app_id": run.client_app_id,
            "route_key": run.route_key, "status": run.status, "model": model, "runtime": runtime,
            "usage": _usage(completion), "created_at": iso(run.created_at),
            "updated_at": iso(updated_at), "completed_at": iso(run.completed_at),
            "governance": dict(GOVERNANCE),
            # conversation_audit_id and client_turn_id appear once an archive links the run.
            **run_audit_link(db, run.id, available),
        },
        "trace": {"summary": summary, "events": events},
        "invocations": invocations,
    }
