"""The wire contract's identifiers, schema strings and limits, defined once for the SDK."""
from __future__ import annotations

import re

ROUTE_KEY = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # conversation, turn, message, event ids
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.IGNORECASE)
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RENDERER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # control characters but tab, LF, CR

SCHEMA = {
    "workspaces": "bailing.agent-workspaces.v1",
    "bootstrap": "bailing.agent-runtime-profile.v1",
    "turn": "bailing.agent-turn-context.v1",
    "search": "bailing.agent-capability-search.v1",
    "tool_detail": "bailing.agent-tool-detail.v1",
    "invocation": "bailing.agent-tool-invocation.v1",
    "inspection": "bailing.agent-invocation-inspection-capabilities.v1",
    "receipt": "bailing.agent-invocation-receipt.v1",
    "completion": "bailing.agent-run-completion.v1",
    "task_binding": "bailing.agent-task-binding.v1",
    "audit": "bailing.agent-conversation-audit.v1",
    "audit_ack": "bailing.agent-conversation-audit-ack.v1",
    "audit_capabilities": "bailing.agent-conversation-audit-capabilities.v1",
    "audit_create_v2": "bailing.agent-conversation-audit-create.v2",
}

# Agent Auth
TOKEN_MAX_CHARS = 8192
ACCESS_TTL_RANGE = (1, 31 * 86400)
REFRESH_TTL_RANGE = (1, 366 * 86400)
DEVICE_LABEL_MAX = 128
ON_BEHALF_OF_MAX = 256
REFRESH_MARGIN_SECONDS = 60  # renew the access token this long before it expires

# Runtime
WORKSPACES_MAX = 128
INSTRUCTIONS_MAX = 100_000
PROFILE_BUNDLE_MAX_BYTES = 64 * 1024  # governance + knowledge + memory, as JSON
ACTIVE_TOOLS_MAX = 12
SEARCH_LIMIT_DEFAULT = 12
SEARCH_QUERY_MAX = 2000
USER_INPUT_MAX = 64_000
RENDERERS_MAX = 20
KNOWLEDGE_DELIVERY = ("inline", "on_demand")

# Tool projection
DESCRIPTION_MAX = 1200
SCOPE_MAX = 256
INPUT_SCHEMA_MAX_BYTES = 64 * 1024
RISKS = ("low", "medium", "high")
GUIDANCE_MAX_CHARS = 32768
GUIDANCE_MAX_BYTES = 65536

# Invocations (our spec's budgets win over the older SDK's 16 KiB)
ARGUMENTS_MAX_BYTES = 1024 * 1024
ENVELOPE_MAX_BYTES = 2 * 1024 * 1024
INVOCATION_TEXT_MAX = 8192
STATES = ("executed", "business_rejected", "awaiting_approval", "denied", "rejected_before_dispatch",
          "reconciliation_required", "in_progress")
BUSINESS_STATUS_RANGE = (100, 599)
RETRY_AFTER_RANGE = (1, 86_400_000)
RATE_WINDOWS = (1, 60, 3600, 86400)
RATE_LEVELS = ("tool", "provider")
RATE_SOURCES = ("declaration", "tool_override", "provider_default", "provider_total")
RESULT_SOURCES = ("job", "journal", "none")
DISPATCH_STATES = ("not_dispatched", "attempted", "unknown")
APPROVAL_STATUSES = ("pending", "approved", "denied")
JOURNAL_STATES = ("absent", "dispatching", "response_recorded", "completed", "uncertain",
                  "evidence_degraded", "unknown")

# Completion
RUN_STATUSES = ("completed", "failed", "cancelled")
CONTENT_MAX = 64_000
MODEL_MAX = 191
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens", "tool_calls", "cost_usd")

# Conversation audit
ARCHIVE_MEMBERS_MAX = 64
ARCHIVE_LABEL_MAX = 128
BATCH_EVENTS_MAX = 50
BATCH_JSON_MAX_BYTES = 192 * 1024
ARCHIVE_STATES = ("enrolling", "ready")
EVENT_KINDS = {"turn_start": (), "user_message": ("content",), "assistant_message": ("content",),
               "run_link": ("run_id", "member_session_id"), "turn_end": ("status",)}

# System info and task control (every body carries `schema_version`)
SCHEMA.update({
    "system_info": "bailing.agent-system-info.v1",
    "task_capabilities": "bailing.agent-task-control-capabilities.v1",
    "task": "bailing.agent-task.v1",
})
SYSTEM_NAME_MAX, SYSTEM_SUMMARY_MAX = 120, 400
SYSTEM_LIST_MAX, SYSTEM_DOMAIN_MAX, SYSTEM_BOUNDARY_MAX = 6, 120, 160
UNAVAILABLE_REASONS = ("agent_client_disabled", "agent_direct_disabled")
TASK_STATES = ("active", "paused", "blocked", "cancelled")
TASK_CONTROLS = ["pause", "resume", "cancel"]

# The error codes an agent may act on; any other code is reported without a public code.
TASK_CODES = ("TASK_REQUIRED", "TASK_UNSUPPORTED", "TASK_SCOPE_BLOCKED", "TASK_MEMBER_MISMATCH",
              "TASK_BINDING_CONFLICT", "TASK_PAUSED", "TASK_CANCELLED", "TASK_EXPIRED",
              "TASK_WRITE_BUDGET_EXHAUSTED", "TASK_CONCURRENCY_EXHAUSTED", "TASK_TOOL_NOT_ALLOWED",
              "TASK_REVISION_CONFLICT", "TASK_RECORD_INVALID", "TASK_UNAVAILABLE", "TASK_NOT_FOUND",
              "TASK_RUN_INACTIVE", "TASK_INVALID_INPUT", "TASK_DISPATCH_UNCERTAIN")
PUBLIC_CODES = frozenset((
    "unauthorized", "not_found", "method_not_allowed", "invalid_request", "hub_paused",
    "agent_tools_unavailable", "agent_runtime_unavailable", "invalid_route", "route_not_allowed",
    "route_unavailable", "agent_direct_disabled", "audience_not_allowed", "agent_client_disabled",
    "arguments_too_large", "page_context_too_large", "turn_conflict", "run_not_found", "run_completion_conflict",
    "assistant_message_conflict", "agent_run_conflict", "invocation_conflict", "capability_changed",
    "tool_not_found", "invocation_not_found", "invocation_storage_unavailable", "invocation_record_invalid",
    "agent_tool_internal_error", "knowledge_unavailable",
    "conversation_audit_authorization_invalid", "conversation_audit_not_found", "conversation_audit_not_ready",
    "conversation_audit_conflict", "conversation_audit_limit", "conversation_audit_unavailable",
    "conversation_audit_cross_binding_unavailable", "conversation_audit_internal_error",
    "invalid_client", "invalid_grant", "unsupported_grant_type", "rate_limited", "agent_authorize_url_invalid",
    "expired", "invalid_state", "access_denied", "subject_display_unavailable",
    *TASK_CODES,
))

# Knowledge on demand (our spec; the official SDK has no method for it)
SCHEMA.update({
    "knowledge_capabilities": "bailing.agent-knowledge-capabilities.v1",
    "knowledge_search": "bailing.agent-knowledge-search.v1",
    "knowledge_read": "bailing.agent-knowledge-read.v1",
})
KNOWLEDGE_QUERY_MAX = 1000
KNOWLEDGE_RESULTS_MAX = 20
KNOWLEDGE_HINT_MAX = 240
KNOWLEDGE_READ_MAX = 16000
