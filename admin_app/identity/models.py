"""Typed mappings of the identity tables that sql/001_core_records.sql creates. The SQL files own the schema;
these classes only describe it to Python (nothing here creates or alters a table)."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ForeignKey, Text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from ..db import Base


class ClientApp(Base):
    __tablename__ = "bz_client_apps"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    app_id: Mapped[str]
    name: Mapped[str]
    allowed_routes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    enabled: Mapped[bool]
    agent_authorize_url: Mapped[str | None]
    # The client gate (sql/079, identity/client_gate.py): calls a minute for the whole client; 0 = off.
    rate_limit_per_min: Mapped[int] = mapped_column(default=0)
    client_token_hash: Mapped[str | None]
    client_token_issued_at: Mapped[datetime | None]
    client_token_sealed: Mapped[str | None] = mapped_column(default=None)  # sql/081: callbacks sign with it
    job_budget: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True), default=None)  # sql/081
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class Route(Base):
    __tablename__ = "bz_routes"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    route_key: Mapped[str]
    name: Mapped[str]
    description: Mapped[str]
    enabled: Mapped[bool]
    audience: Mapped[dict[str, Any]] = mapped_column(JSONB)
    target_config: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # The Client API's work (sql/081): the executor target, and {retry, default_callback_url,
    # max_calls, budget}.
    target: Mapped[str | None] = mapped_column(default=None)
    job_settings: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    agent_client: Mapped[dict[str, Any]] = mapped_column(JSONB)
    tools: Mapped[dict[str, Any]] = mapped_column(JSONB)
    permission: Mapped[str]
    # {"ttl_seconds": N, "tool_ttl_seconds": {operation: N}} (sql/068): how long an approval lasts.
    # Deferred, and written only when a configuration gives it: reading and configuring routes
    # keep working on a database whose migrations stop before 068 (the audit's degraded modes).
    approvals: Mapped[dict[str, Any]] = mapped_column(JSONB, deferred=True)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class ToolProvider(Base):
    __tablename__ = "bz_tool_providers"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str]
    base_url: Mapped[str]
    openapi: Mapped[dict[str, Any]] = mapped_column(JSONB)
    secret_env: Mapped[str]
    timeout_ms: Mapped[int]
    compiler_version: Mapped[int | None]
    compile_warnings: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, default=list)
    # Tool rate-limit policies (sql/074): the provider gate per minute (0 = off), and the
    # operator's policy over the tools' declarations (None = the declarations as they are).
    rate_limit_per_min: Mapped[int] = mapped_column(default=120)
    tool_rate_limits: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    # Spec pull (sql/078, admin_app/providers): where `openapi` is pulled from, how its access is
    # verified and how often it is pulled again; the pull's and the probes' last results.
    spec_url: Mapped[str | None] = mapped_column(nullable=True)
    spec_access_policy: Mapped[str] = mapped_column(default="signed_required")
    auto_refresh_min: Mapped[int] = mapped_column(default=0)
    spec_refreshed_at: Mapped[datetime | None] = mapped_column(nullable=True)
    spec_pull_attempted_at: Mapped[datetime | None] = mapped_column(nullable=True)
    spec_pull_status: Mapped[str | None] = mapped_column(nullable=True)
    spec_pull_error: Mapped[str | None] = mapped_column(nullable=True)
    spec_access_probe: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    authz_probe: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class AgentSession(Base):
    __tablename__ = "bz_agent_sessions"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    client_app_id: Mapped[str] = mapped_column(ForeignKey("bz_client_apps.app_id"))
    principal: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    on_behalf_of: Mapped[str | None]
    allowed_routes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    device_label: Mapped[str | None]
    access_token_hash: Mapped[str]
    access_expires_at: Mapped[datetime]
    refresh_token_hash: Mapped[str | None]
    refresh_expires_at: Mapped[datetime]
    identity_hash: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    refreshed_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    task_enrolled: Mapped[bool] = mapped_column(default=False)
    subject_display: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))  # sql/076


class Admin(Base):
    __tablename__ = "bz_admins"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    username: Mapped[str]
    password_hash: Mapped[str]
    role: Mapped[str]
    disabled: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class AdminToken(Base):
    __tablename__ = "bz_admin_tokens"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    admin_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("bz_admins.id"))
    token_hash: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    expires_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class AgentAuthorization(Base):
    __tablename__ = "bz_agent_authorizations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    client_app_id: Mapped[str]
    redirect_uri: Mapped[str]
    state: Mapped[str]
    requested_routes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    device_label: Mapped[str | None]
    code_challenge: Mapped[str]
    status: Mapped[str] = mapped_column(default="pending")
    principal: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    on_behalf_of: Mapped[str | None]
    approved_routes: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    code_hash: Mapped[str | None]
    code_expires_at: Mapped[datetime | None]
    session_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    expires_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    subject_display: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))  # sql/076


class RefreshHistory(Base):
    __tablename__ = "bz_agent_refresh_history"

    token_hash: Mapped[str] = mapped_column(primary_key=True)
    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    rotated_at: Mapped[datetime] = mapped_column(server_default="now()")
