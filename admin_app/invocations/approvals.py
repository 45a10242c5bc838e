"""The approvers' side: one approval, its exact snapshot, and decisions (the lists are in
reads.approvals).

A decision is one conditional UPDATE (pending and the same args_hash the approver saw), so two
approvers racing, or an approver looking at a stale page, can never both win or decide on a
snapshot other than the one shown.

An approval may expire (a route's `approvals.ttl_seconds`, per tool `tool_ttl_seconds`): past
its `expires_at`, an approval not yet consumed can no longer be decided or resumed. Expiry is a
comparison with the clock wherever it matters (`expired`, `expired_clause`), never a status
written by a sweeper, so it holds to the instant.

An approval is named by its UUID (`id`, as the console and admin API always did) or by its
number (`approval_id`, as agents see it).

A call is an agent session's or a Client API job's (sql/081; admin_app.jobs, a package above this
one): a job's approval shows the job (its id and request id, Core's `job_id`/`request_id`, and its
client app) where a session's shows the session, and its owner hears of each decision
(`on_decided`) to rerun a finished job (CLIENT_API_AND_EXECUTOR.md §C.7)."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (ColumnElement, CursorResult, DateTime, Interval, Select, Text, and_, column, func, literal,
                        select, table, text, update)
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Session, defer

from .. import limits
from ..canonical import iso, utc_now
from ..errors import ApiError, invalid_request
from ..evidence import leaves
from ..evidence import log as evidence_log
from ..identity.models import Admin, AgentSession
from ..observability.metrics import tool_call_outcome
from ..validation import Checker
from ..tasks import metering
from .models import Approval, Invocation

NUMBER_MAX = 2**63 - 1

# The job that owns a job's call (sql/081), read as a plain table: its package sits above this one.
JOBS = table("bz_jobs", column("id", UUID(as_uuid=True)), column("client_app_id", Text),
             column("request_id", Text))
# The client app that asked for a call: its agent session's, or its job's.
REQUESTER_APP = func.coalesce(AgentSession.client_app_id, JOBS.c.client_app_id)

# What the owner of a call does when its approval is decided (approval id, "approved"/"denied"):
# True when it reran its work. An agent resumes its own call, so nothing is registered for it;
# admin_app.jobs registers the rerun of a finished job here.
DecisionHook = Callable[[Session, uuid.UUID, str], bool]
_decision_hooks: list[DecisionHook] = []


def on_decided(hook: DecisionHook) -> DecisionHook:
    if hook not in _decision_hooks:
        _decision_hooks.append(hook)
    return hook


DECISION_COLUMNS = ("id, number, args_hash, status, decided_by, decided_at, decision_reason, decided_via, "
                    "decision_id, decided_credential")


def decision_evidence_of(db: Session, refs: list[str]) -> dict[str, bytes]:
    """The leaf data of the decisions `refs` name (approval:<id>), as their rows stand now."""
    ids = [uuid.UUID(ref.split(":", 1)[1]) for ref in refs]
    rows = db.execute(text(f"SELECT {DECISION_COLUMNS} FROM bz_tool_approvals WHERE id = ANY(:ids)"),  # noqa: S608
                      {"ids": ids}).mappings()
    return {leaves.decision_ref(row["id"]): leaves.decision_data(row) for row in rows}


def after_decision(db: Session, approval_id: uuid.UUID, decision: str) -> bool:
    """Record the decision in the evidence log and tell the owners of the call, every one, in the
    deciding transaction; True when one reran its work. Both doors (approvers, business systems)
    come through here."""
    row = db.execute(text(f"SELECT {DECISION_COLUMNS} FROM bz_tool_approvals WHERE id = :id"),  # noqa: S608 - fixed columns
                     {"id": approval_id}).mappings().one()
    evidence_log.append_leaves(db, [(leaves.DECISION, leaves.decision_ref(approval_id), leaves.decision_data(row))])
    reran = False
    for hook in _decision_hooks:
        reran = hook(db, approval_id, decision) or reran
    return reran


def _not_found() -> ApiError:
    return ApiError("approval_not_found")


def _reference(value: str):
    """The column and value an approval reference names: a positive number, or a UUID."""
    if value.isascii() and value.isdigit() and len(value) <= 19 and 1 <= int(value) <= NUMBER_MAX:
        return Approval.number, int(value)
    try:
        return Approval.id, uuid.UUID(value)
    except ValueError:
        raise _not_found() from None


def parse_id(db: Session, value: str) -> uuid.UUID:
    """The UUID of the approval `value` names (404 when it names none)."""
    column, key = _reference(value)
    if column is Approval.id:
        return key
    found = db.scalar(select(Approval.id).where(Approval.number == key))
    if found is None:
        raise _not_found()
    return found


def expiry(route_approvals: dict[str, Any], tool: str) -> ColumnElement[datetime] | None:
    """When an approval made now for `tool` expires under its route's settings (None: never):
    counted from the database's clock, as the approval's `created_at` is."""
    ttl = (route_approvals.get("tool_ttl_seconds") or {}).get(tool, route_approvals.get("ttl_seconds"))
    return func.now() + literal(timedelta(seconds=ttl), Interval()) if ttl else None


def expired(approval: Approval, now: datetime) -> bool:
    """Past its time-to-live and not yet used: neither a decision nor a resume can act on it any
    more (a denial stays a denial; a consumed approval has run)."""
    return (approval.expires_at is not None and approval.expires_at <= now
            and approval.consumed_at is None and approval.status != "denied")


def instant(now: datetime) -> ColumnElement[datetime]:
    """`now` as a timestamptz parameter: compared with a timestamptz column whatever the
    connection's time zone (a plain timestamp parameter would be read in that zone)."""
    return literal(now, DateTime(timezone=True))


def expired_clause(now: datetime) -> ColumnElement[bool]:
    """`expired` in SQL, for lists and counts."""
    return and_(Approval.expires_at <= instant(now), Approval.consumed_at.is_(None),
                Approval.status != "denied")


def decidable_clause(now: datetime) -> ColumnElement[bool]:
    """Pending and not expired: what the queue lists and a decision may act on."""
    return and_(Approval.status == "pending",
                (Approval.expires_at.is_(None)) | (Approval.expires_at > instant(now)))


def item_view(approval: Approval, inv: Invocation, session: AgentSession | None,
              job_app: str | None = None, job_request: str | None = None) -> dict:
    """What a queue shows: never the snapshot itself. A job's call (`inv.owner_job_id`) shows
    its job: Core's `job_id` and `request_id`, the job's client app (`job_app`)."""
    job = inv.owner_job_id
    requester: dict[str, Any] = {"session_id": str(inv.session_id) if job is None else None}
    if job is not None:
        requester["job_id"] = str(job)
    requester.update(client_app_id=session.client_app_id if session else job_app,
                     principal=approval.principal, on_behalf_of=approval.on_behalf_of)
    return {
        "id": str(approval.id),
        "approval_id": approval.number,
        "job_id": str(inv.id) if job is None else str(job),
        "request_id": inv.invocation_id if job is None else job_request,
        "invocation_id": inv.invocation_id,
        "provider": inv.provider,
        "tool": approval.tool,
        "scope": inv.scope,
        "route": approval.route_key,
        "risk": approval.risk,
        "status": approval.status,
        "args_hash": approval.args_hash,
        "snapshot_bytes": approval.snapshot_bytes,
        "argument_keys": list(approval.argument_keys),
        "summary": approval.summary,
        "prompt": approval.prompt,
        "policy": approval.policy,
        "requester": requester,
        "on_behalf_of": approval.on_behalf_of,
        "invocation_status": inv.status,
        "created_at": iso(approval.created_at),
        "decided_at": iso(approval.decided_at),
        "decided_by": approval.decided_by,
        "decision_reason": approval.decision_reason,
        "reason": approval.decision_reason,
        "decision_id": approval.decision_id,
        "decided_via": approval.decided_via,
        "decided_credential": approval.decided_credential,
        "consumed_at": iso(approval.consumed_at),
        "expires_at": iso(approval.expires_at),
        "expired": expired(approval, utc_now()),
        "run_id": str(inv.run_id) if inv.run_id else None,
    }


def summary_select() -> Select[tuple[Approval, Invocation, AgentSession | None, str | None, str | None]]:
    """An approval with its invocation and its session, or its job's client app and request id
    (item_view's arguments), without the argument snapshot: it can be a mebibyte, and lists
    (reads.approvals) and summaries show only its size and hash (snapshot() reads it)."""
    return (select(Approval, Invocation, AgentSession, JOBS.c.client_app_id, JOBS.c.request_id)
            .join(Invocation, Invocation.id == Approval.job_id)
            .outerjoin(AgentSession, AgentSession.id == Invocation.session_id)
            .outerjoin(JOBS, JOBS.c.id == Invocation.owner_job_id)
            .options(defer(Approval.snapshot)))


def get(db: Session, approval_ref: str) -> tuple[Approval, Invocation, AgentSession | None, str | None, str | None]:
    column, key = _reference(approval_ref)
    row = db.execute(summary_select().where(column == key)).first()
    if row is None:
        raise _not_found()
    return row._tuple()


def snapshot(db: Session, approval_ref: str) -> Approval:
    column, key = _reference(approval_ref)
    approval = db.scalar(select(Approval).where(column == key))
    if approval is None:
        raise _not_found()
    return approval


DOORS = ("console", "admin_api", "business_system")  # where a decision came from (sql/075)


def decide(db: Session, admin: Admin, approval_ref: str, decision: str, body: dict,
           door: str = "admin_api") -> dict:
    checker = Checker()
    checker.obj(body, "", required=("args_hash",), optional=("reason",))
    if "args_hash" in body:
        checker.string(body["args_hash"], "args_hash", min_len=64, max_len=64)
    if "reason" in body:
        checker.string(body["reason"], "reason", max_len=limits.APPROVAL_REASON_MAX)
    reason = body.get("reason") if isinstance(body.get("reason"), str) else None
    if decision == "denied" and not checker.problems and not (reason and reason.strip()):
        checker.add("reason", "a denial needs a reason")
    if checker.problems:
        raise invalid_request(checker)
    approval_id = parse_id(db, approval_ref)
    now = utc_now()
    # The invocation's row first, as a resume takes it: the two then never wait on each other
    # in opposite orders (approval, then task, here; task, then approval, there).
    job_id = db.scalar(select(Approval.job_id).where(Approval.id == approval_id))
    if job_id is not None:
        db.execute(select(Invocation.id).where(Invocation.id == job_id).with_for_update())
    decided = db.execute(
        update(Approval)
        .where(Approval.id == approval_id, decidable_clause(now),
               Approval.args_hash == body["args_hash"])
        .values(status=decision, decided_by=admin.username, decided_at=now,
                decision_reason=reason, decided_via=door)
        .returning(Approval.id)).first()
    if decided is None:
        current = db.get(Approval, approval_id)
        if current is None:
            raise _not_found()
        if current.status != "pending":
            raise ApiError("approval_not_pending", f"This approval was already {current.status}.")
        if expired(current, now):
            raise ApiError("approval_expired")
        raise ApiError("approval_snapshot_changed")
    if decision == "denied":
        end_denied(db, approval_id)
    rerun = after_decision(db, approval_id, decision)
    db.expire_all()
    # `ok` and `rerun` as upstream answers a decision: an agent's call never reruns by itself,
    # the agent resumes it; a finished job is queued again (its owner's hook).
    return {**item_view(*get(db, str(approval_id))), "ok": True, "rerun": rerun}


def end_denied(db: Session, approval_id: uuid.UUID) -> None:
    """A denied call never reaches the business system: its invocation ends here, whoever denied."""
    job_id = db.scalar(select(Approval.job_id).where(Approval.id == approval_id))
    ended = db.execute(text("""
        UPDATE bz_tool_invocations SET status = 'denied', reason = 'approval_denied', updated_at = now()
        WHERE id = :job AND status = 'awaiting_approval'"""), {"job": job_id})
    assert isinstance(ended, CursorResult)  # an UPDATE's result, which counts its rows
    if ended.rowcount:
        tool_call_outcome(db, "denied")
        metering.release(db, job_id, "approval_denied")  # a task's write budget comes back now
