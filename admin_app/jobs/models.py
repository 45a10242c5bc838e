"""Typed mappings of the tables sql/081_client_api_jobs.sql creates (the SQL owns the schema)."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ForeignKey, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from ..db import Base

# Core's six job statuses (§A.1), and which are final.
STATUSES = ("queued", "running", "dispatched", "done", "error", "rejected")
TERMINAL = ("done", "error", "rejected")
IN_FLIGHT = ("queued", "running", "dispatched")


class ExecutorTarget(Base):
    __tablename__ = "bz_executor_targets"

    name: Mapped[str] = mapped_column(primary_key=True)
    description: Mapped[str] = mapped_column(default="")
    enabled: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class ExecutorToken(Base):
    __tablename__ = "bz_executor_tokens"

    name: Mapped[str] = mapped_column(primary_key=True)
    token_hash: Mapped[str]
    token_last4: Mapped[str]
    allowed_targets: Mapped[list[str]] = mapped_column(ARRAY(Text))
    enabled: Mapped[bool] = mapped_column(default=True)
    description: Mapped[str] = mapped_column(default="")
    last_seen_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class Executor(Base):
    __tablename__ = "bz_executors"

    executor_id: Mapped[str] = mapped_column(primary_key=True)
    token_name: Mapped[str | None] = mapped_column(default=None)
    targets: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    capabilities: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True), default=None)
    last_seen_at: Mapped[datetime] = mapped_column(server_default="now()")


class Job(Base):
    __tablename__ = "bz_jobs"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    request_id: Mapped[str]
    client_app_id: Mapped[str] = mapped_column(ForeignKey("bz_client_apps.app_id"))
    route_key: Mapped[str]
    target: Mapped[str]
    status: Mapped[str]
    input: Mapped[str]
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, default=dict)
    principal: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True), default=None)
    on_behalf_of: Mapped[str | None] = mapped_column(default=None)
    callback_url: Mapped[str | None] = mapped_column(default=None)
    session_id: Mapped[str]
    is_continue: Mapped[bool] = mapped_column(default=False)
    thread_key: Mapped[str]
    attempts: Mapped[int] = mapped_column(default=0)
    max_retries: Mapped[int] = mapped_column(default=0)
    run_after: Mapped[datetime | None] = mapped_column(default=None)
    executor_id: Mapped[str | None] = mapped_column(default=None)
    executor_token: Mapped[str | None] = mapped_column(default=None)
    claim_token: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    dispatched_at: Mapped[datetime | None] = mapped_column(default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    result: Mapped[Any | None] = mapped_column(JSONB(none_as_null=True), default=None)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True), default=None)
    error: Mapped[str | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class JobEvent(Base):
    __tablename__ = "bz_job_events"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_jobs.id"))
    at: Mapped[datetime] = mapped_column(server_default="clock_timestamp()")
    event: Mapped[str]
    actor: Mapped[str | None] = mapped_column(default=None)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)


class JobCallback(Base):
    __tablename__ = "bz_job_callbacks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_jobs.id"))
    url: Mapped[str]
    body: Mapped[str]
    state: Mapped[str] = mapped_column(default="pending")
    attempts: Mapped[int] = mapped_column(default=0)
    next_at: Mapped[datetime] = mapped_column(server_default="now()")
    leased_until: Mapped[datetime | None] = mapped_column(default=None)
    last_status: Mapped[int | None] = mapped_column(default=None)
    last_error: Mapped[str | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    replayed_by: Mapped[str | None] = mapped_column(default=None)
    # sql/081: the dead-letter list (§D.3).
    died_at: Mapped[datetime | None] = mapped_column(default=None)
    resolved_at: Mapped[datetime | None] = mapped_column(default=None)
    resolved_by: Mapped[str | None] = mapped_column(default=None)


class JobCallbackAttempt(Base):
    __tablename__ = "bz_job_callback_attempts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    callback_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("bz_job_callbacks.id"))
    attempt: Mapped[int]
    at: Mapped[datetime] = mapped_column(server_default="now()")
    http_status: Mapped[int | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(default=None)
    duration_ms: Mapped[int]
