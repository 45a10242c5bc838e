"""Typed mappings of sql/004_tool_invocations.sql."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ForeignKey, Identity, Text, event
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column, object_session

from ..db import Base
from ..observability.metrics import tool_call_outcome

# Invocation statuses counted as dispatch outcomes (`in_progress` is a step, not an outcome).
OUTCOMES = frozenset({"executed", "business_rejected", "awaiting_approval", "denied",
                      "rejected_before_dispatch", "reconciliation_required"})


class Invocation(Base):
    __tablename__ = "bz_tool_invocations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    session_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))  # None: a job's call (sql/081)
    owner_job_id: Mapped[uuid.UUID | None] = mapped_column("job_id", UUID(as_uuid=True), default=None)  # sql/081
    invocation_id: Mapped[str]
    route_key: Mapped[str]
    run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    tool: Mapped[str]
    provider: Mapped[str]
    scope: Mapped[str]
    request_hash: Mapped[str]
    args_hash: Mapped[str]
    argument_keys: Mapped[list[str]] = mapped_column(ARRAY(Text))
    execution_fingerprint: Mapped[str]
    capability_revision: Mapped[str]
    on_behalf_of: Mapped[str | None]
    status: Mapped[str]
    reason: Mapped[str | None]
    business_status: Mapped[int | None]
    result_body: Mapped[Any] = mapped_column(JSONB, nullable=True)
    # The gate that refused the call (sql/074), kept with its `rejected_before_dispatch` result.
    rate_limit: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


@event.listens_for(Invocation.status, "set")
def _count_outcome(target: Invocation, value: str, oldvalue: object, _initiator: object) -> None:
    # Every status an invocation takes through the ORM (admin_app/invocations/service.py) passes
    # here, however many places decide it; counted when that transaction commits. (An approver's
    # denial is written by SQL in approvals.decide, which reports it itself.)
    if value != oldvalue and value in OUTCOMES:
        db = object_session(target)
        if db is not None:
            tool_call_outcome(db, value)


class Approval(Base):
    __tablename__ = "bz_tool_approvals"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # The numeric identity agents see as `approval_id` (sql/059); assigned by the database.
    number: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_tool_invocations.id"))
    tool: Mapped[str]
    route_key: Mapped[str]
    risk: Mapped[str]
    policy: Mapped[dict[str, Any]] = mapped_column(JSONB)
    prompt: Mapped[str | None]
    snapshot: Mapped[str]
    args_hash: Mapped[str]
    snapshot_bytes: Mapped[int]
    argument_keys: Mapped[list[str]] = mapped_column(ARRAY(Text))
    summary: Mapped[str]
    principal: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    on_behalf_of: Mapped[str | None]
    status: Mapped[str] = mapped_column(default="pending")
    decided_by: Mapped[str | None]
    decided_at: Mapped[datetime | None]
    decision_reason: Mapped[str | None]
    consumed_at: Mapped[datetime | None]
    # Past this instant the approval can no longer be decided or resumed (sql/068); None: never.
    expires_at: Mapped[datetime | None]
    # A business decision's own id, unique across approvals; the door a decision came through
    # (console, admin_api, business_system) and, for the business door, its credential (sql/075).
    decision_id: Mapped[str | None]
    decided_via: Mapped[str | None]
    decided_credential: Mapped[str | None]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")


class JournalEntry(Base):
    __tablename__ = "bz_tool_journal"

    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_tool_invocations.id"),
                                              primary_key=True)
    state: Mapped[str]
    idempotency_key: Mapped[str]
    method: Mapped[str]
    path: Mapped[str]
    body_sha256: Mapped[str]
    http_status: Mapped[int | None]
    failure: Mapped[str | None]
    started_at: Mapped[datetime] = mapped_column(server_default="now()")
    finished_at: Mapped[datetime | None]


class DeferredCall(Base):
    """The sealed arguments of a call the rate-limit gates refused before it had an approval
    (sql/074): what its resume runs."""
    __tablename__ = "bz_tool_deferred_calls"

    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_tool_invocations.id"),
                                              primary_key=True)
    snapshot: Mapped[str]
    args_hash: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
