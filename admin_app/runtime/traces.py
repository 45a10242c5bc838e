"""Run traces for support staff: a run, its visible messages, its tool jobs, its archive link."""
from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.availability import Availability
from ..conversation_audit.reads import run_audit_link
from ..errors import ApiError
from ..invocations.models import Invocation
from ..invocations.traces import (approvals_of, elapsed_ms, invocation_row, job_events, jobs_of_run,
                                  trace_event)
from ..validation import UUID_V1_5
from .models import Message, Run


def run_trace(db: Session, run_id: uuid.UUID, available: Availability) -> dict:
    run = db.get(Run, run_id)
    if run is None:
        raise ApiError("run_not_found", "No such run.")
    messages = db.scalars(select(Message).where(Message.run_id == run.id).order_by(Message.id))
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
        "messages": [_message_view(m) for m in messages],
        "jobs": jobs_of_run(db, run.id),
    }


def _message_view(m: Message) -> dict:
    return {"role": m.role, "message_id": m.message_id, "content": m.content,
            "created_at": iso(m.created_at)}


def visible_messages(db: Session, run_id: uuid.UUID) -> list[dict]:
    return [_message_view(m) for m in db.scalars(select(Message).where(Message.run_id == run_id)
                                                 .order_by(Message.id))]


# ------------------------------------------------------------------ Core-shaped run trace

SOURCE_AGENT = "local_agent"
# The usage numbers a trace may show; anything else a client reported stays out.
SAFE_USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens",
                   "tool_calls", "cost_usd")
GOVERNANCE = {"planner": "local_agent", "execution": "bailinghub_governed",
              "hidden_reasoning_sync": False, "tool_payloads": "summary_only"}


def _usage(completion: dict | None) -> dict | None:
    usage = (completion or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    kept = {k: usage[k] for k in SAFE_USAGE_KEYS
            if type(usage.get(k)) in (int, float) and usage[k] >= 0}
    return kept or None


def _completion_text(completion: dict | None, key: str) -> str | None:
    value = (completion or {}).get(key)
    return value if isinstance(value, str) else None


def agent_client_trace(db: Session, thread_ref: str, run_ref: str, available: Availability) -> dict:
    """`GET /admin/api/threads/:thread_id/agent-runs/:run_id/trace`: the run, the events the hub
    can rebuild for it, and its tool invocations. 404 unless the run is on that thread."""
    run = db.get(Run, uuid.UUID(run_ref)) if UUID_V1_5.fullmatch(run_ref) else None
    on_thread = thread_ref.isascii() and thread_ref.isdigit() and len(thread_ref) <= 19
    if run is None or not on_thread or int(thread_ref) != run.thread_id:
        raise ApiError("not_found", "Not found.")
    completion = run.completion
    model, runtime = _completion_text(completion, "model"), _completion_text(completion, "runtime")
    updated_at = run.completed_at or run.created_at
    events = [trace_event(run.created_at, "agent_client_run_started", "launch", "info",
                          "Local agent started", "The local agent plans; the hub governs and audits",
                          {"planner": "local_agent", "hidden_reasoning_sync": False}, SOURCE_AGENT)]
    invocations = []
    approvals_total = 0
    for inv in db.scalars(select(Invocation).where(Invocation.run_id == run.id)
                          .order_by(Invocation.created_at, Invocation.id)):
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
    summary = {"event_count": len(events), "tool_invocations": len(invocations),
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
