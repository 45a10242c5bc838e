"""The typed answers: each holds only what the contract lets an agent rely on."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


# ---------------------------------------------------------------- Agent Auth

@dataclass(frozen=True)
class Authorization:
    authorization_id: str
    authorization_url: str
    expires_in: int


@dataclass(frozen=True)
class TokenSet:
    access_token: str
    refresh_token: str
    expires_in: int
    refresh_expires_in: int
    session_id: str
    client_app_id: str
    subject_display: dict | None = None
    subject_display_status: str | None = None  # None: the hub does not report it ("unsupported")


@dataclass(frozen=True)
class SessionView:
    session_id: str
    client_app_id: str
    device_label: str
    principal: dict
    on_behalf_of: str
    allowed_routes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    refresh_expires_at: datetime
    subject_display: dict | None = None
    subject_display_status: str | None = None


# ---------------------------------------------------------------- Runtime

@dataclass(frozen=True)
class Workspace:
    route: str
    name: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict
    scope: str
    risk: str
    approval_required: bool
    readonly: bool
    idempotent: bool
    usage_guidance_available: bool = False  # our spec's optional discovery flags
    description_truncated: bool = False


@dataclass(frozen=True)
class CapabilitySummary:
    revision: str
    authorized_total: int | None
    active_limit: int | None
    readonly: int | None
    writes: int | None
    approval_required: int | None


@dataclass(frozen=True)
class Bootstrap:
    workspace: Workspace
    profile_revision: str
    instructions: str
    knowledge: dict
    memory: dict
    governance: dict
    capabilities: CapabilitySummary


@dataclass(frozen=True)
class TaskBinding:
    task_id: str
    scope_hash: str

    def wire(self) -> dict:
        from .contract import SCHEMA

        return {"schema_version": SCHEMA["task_binding"], "task_id": self.task_id, "scope_hash": self.scope_hash}


@dataclass(frozen=True)
class Discovery:
    returned_count: int
    authorized_total: int
    matched_total: int | None
    matched_total_exact: bool
    limit: int
    truncated: bool
    has_more: bool


@dataclass(frozen=True)
class TurnContext:
    run_id: str
    profile_revision: str | None
    capability_revision: str
    instructions: str
    page_context: dict
    renderers: list
    memory: dict
    memory_refs: list
    knowledge: list
    knowledge_refs: list
    knowledge_delivery: str | None
    governance: dict
    active_tools: tuple[Tool, ...]
    task_binding: TaskBinding | None = None
    discovery: Discovery | None = None


@dataclass(frozen=True)
class SearchResult:
    route: str
    capability_revision: str
    query: str | None
    tools: tuple[Tool, ...]
    discovery: Discovery | None  # None when absent or internally inconsistent (then discarded)


@dataclass(frozen=True)
class UsageGuidance:
    text: str
    truncated: bool
    source_chars: int
    max_chars: int
    source_bytes: int
    max_bytes: int


@dataclass(frozen=True)
class ToolDetail:
    route: str
    capability_revision: str
    tool: Tool
    usage_guidance: UsageGuidance


@dataclass(frozen=True)
class Completion:
    run_id: str
    status: str
    idempotent_replay: bool | None = None


# ---------------------------------------------------------------- tool invocations

@dataclass(frozen=True)
class RateLimit:
    level: str
    count: int
    window_sec: int
    scope: str
    source: str


@dataclass(frozen=True)
class Invocation:
    invocation_id: str
    route: str
    tool: str
    state: str
    ok: bool
    auto_retry_allowed: bool
    text: str
    business_status: int | None = None
    approval_id: int | None = None
    retry_after_ms: int | None = None
    rate_limit: RateLimit | None = None


@dataclass(frozen=True)
class InspectionCapabilities:
    receipt_schema: str
    read_only: bool


@dataclass(frozen=True)
class Receipt:
    invocation_id: str
    agent_run_id: str
    route: str
    tool: str
    observed_at: datetime
    result: Invocation | None
    result_source: str
    dispatch_state: str
    approval_status: str
    approval_id: int | None
    journal_state: str


# ---------------------------------------------------------------- conversation audit

@dataclass(frozen=True)
class AuditCapabilities:
    cross_binding_members: bool
    member_bindings: str | None


@dataclass(frozen=True)
class ArchiveHeader:
    conversation_id: str
    state: str
    member_count: int
    confirmed_count: int
    last_sequence: int
    client_app_id: str | None = None
    route_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class AuditAck:
    conversation_id: str
    last_sequence: int


# ---------------------------------------------------------------- system info and task control

@dataclass(frozen=True)
class SystemInfo:
    workspace: str
    metadata_status: str
    revision: str | None
    system: dict | None
    availability: str
    unavailable_reason: str | None = None


@dataclass(frozen=True)
class TaskControlCapabilities:
    supported: bool
    mode: str
    inspect_invocation: bool


@dataclass(frozen=True)
class TaskView:
    task_id: str
    state: str
    revision: int
    ledger_sequence: int
    scope_hash: str
    member_count: int
    policy: dict
    counters: dict
    allowed_tools: tuple[str, ...]


# ---------------------------------------------------------------- knowledge on demand

@dataclass(frozen=True)
class KnowledgeCapabilities:
    enabled: bool
    documents: int
    delivery_modes: tuple[str, ...]
    max_query_chars: int
    max_results: int
    default_results: int
    hint_max_chars: int
    read_max_chars: int


@dataclass(frozen=True)
class KnowledgeHint:
    chunk_id: int
    document: str
    title: str
    heading: str | None
    hint: str
    hint_truncated: bool
    content_chars: int


@dataclass(frozen=True)
class KnowledgePiece:
    chunk_id: int
    document: str
    title: str
    heading: str | None
    content: str
    offset: int
    total_chars: int
    truncated: bool
    next_offset: int | None
