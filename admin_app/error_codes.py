"""Every error code the hub answers with, in one place: its HTTP status, the default message,
and where the code is specified. `ApiError(code)` takes its status from here, so a code cannot
be raised with two statuses, and tests/test_error_codes.py checks that every raise names a code
listed here and that the OpenAPI documents agree.

"hub" marks a code of the hub's own admin API or CLI (documented in openapi/admin-api.json);
every other entry names the specification section that fixes it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorCode:
    status: int
    message: str  # the default message, when the raise gives none
    documented: str  # where the code is specified


CODES: dict[str, ErrorCode] = {
    # 400 Bad Request
    "TASK_INVALID_INPUT": ErrorCode(400, "The request is not valid.",
                        "TASK_CONTROL.md § 3.1 Formats"),
    "invalid_client": ErrorCode(400, "The client is unknown, disabled or has no authorization page.",
                        "AGENT_AUTH_API.en.md § 6. Errors"),
    "invalid_grant": ErrorCode(400, "The request is not valid.",
                        "AGENT_AUTH_API.en.md § 6. Errors"),
    "invalid_request": ErrorCode(400, "The request is not valid.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "invalid_route": ErrorCode(400, "The route key is not a valid route.",
                        "WIRE_CONTRACT.md § 2.1 Route gate"),
    "unsupported_grant_type": ErrorCode(400, "grant_type must be authorization_code or refresh_token.",
                        "WIRE_CONTRACT.md § 3. `/agent-auth/v1` — Agent Auth"),
    # 401 Unauthorized
    "unauthorized": ErrorCode(401, "A valid bearer token is required.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    # 403 Forbidden
    "agent_client_disabled": ErrorCode(403, "The Agent Client Runtime is not enabled on this route.",
                        "WIRE_CONTRACT.md § 2.1 Route gate"),
    "agent_direct_disabled": ErrorCode(403, "Business tools are not enabled on this route.",
                        "WIRE_CONTRACT.md § 2.1 Route gate"),
    "audience_not_allowed": ErrorCode(403, "This route's audience does not include this session.",
                        "WIRE_CONTRACT.md § 2.1 Route gate"),
    "conversation_audit_authorization_invalid": ErrorCode(403, "Not allowed.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "forbidden": ErrorCode(403, "This requires the runs:read permission.",
                        "TASK_CONTROL.md § 6.7 Release without a permit"),
    "route_not_allowed": ErrorCode(403, "This session is not allowed to use this route.",
                        "AGENT_AUTH_API.en.md § 6. Errors"),
    "wrong_password": ErrorCode(403, "The current password is not right.",
                        "hub: openapi/admin-api.json"),
    # 404 Not Found
    "admin_not_found": ErrorCode(404, "No admin by that name.",
                        "hub: openapi/admin-api.json"),
    "approval_not_found": ErrorCode(404, "No such approval.",
                        "hub: openapi/admin-api.json"),
    "client_not_found": ErrorCode(404, "Not found.",
                        "hub: openapi/admin-api.json"),
    "conversation_audit_not_found": ErrorCode(404, "No such conversation audit.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "invocation_not_found": ErrorCode(404, "No such invocation for this session.",
                        "TASK_CONTROL.md § 8.6 `POST /agent-api/v1/tool-invocations/{invocation_id}/resume`"),
    "job_not_found": ErrorCode(404, "No such tool job.",
                        "hub: openapi/admin-api.json"),
    "knowledge_not_found": ErrorCode(404, "No such knowledge chunk in this workspace.",
                        "hub: openapi/admin-api.json"),
    "knowledge_unavailable": ErrorCode(404, "This workspace has no knowledge enabled.",
                        "hub: openapi/admin-api.json"),
    "not_found": ErrorCode(404, "Not found.",
                        "TASK_CONTROL.md § 8.2 `GET /agent-api/v1/tasks/{task_id}`"),
    "route_unavailable": ErrorCode(404, "The route is unavailable.",
                        "WIRE_CONTRACT.md § 2.1 Route gate"),
    "run_not_found": ErrorCode(404, "No such run.",
                        "TASK_CONTROL.md § 8.4 Capability search"),
    "session_not_found": ErrorCode(404, "No such agent session.",
                        "hub: openapi/admin-api.json"),
    "token_not_found": ErrorCode(404, "That admin holds no token with this id.",
                        "hub: openapi/admin-api.json"),
    "tool_not_found": ErrorCode(404, "No such tool in this workspace.",
                        "AGENT_CLIENT_RUNTIME_API.en.md § Read usage guidance by tool name"),
    # 405 Method Not Allowed
    "method_not_allowed": ErrorCode(405, "Method not allowed.",
                        "WIRE_CONTRACT.md § 1. Conventions shared by every surface"),
    # 409 Conflict
    "TASK_REQUIRED": ErrorCode(409, "This session is enrolled in a task: act through a bound run.",
                        "TASK_CONTROL.md § 2.3 Enrolment marker"),
    "admin_disabled": ErrorCode(409, "The request conflicts with the current state.",
                        "hub: openapi/admin-api.json"),
    "admin_exists": ErrorCode(409, "The request conflicts with the current state.",
                        "hub: openapi/admin-api.json"),
    "agent_run_conflict": ErrorCode(409, "This run is not a turn of this session in this route.",
                        "WIRE_CONTRACT.md § 2.10 `POST /agent-api/v1/tool-invocations`"),
    "approval_not_pending": ErrorCode(409, "The request conflicts with the current state.",
                        "hub: openapi/admin-api.json"),
    "approval_snapshot_changed": ErrorCode(409, "The snapshot hash differs from the one you reviewed; review it again.",
                        "hub: openapi/admin-api.json"),
    "assistant_message_conflict": ErrorCode(
        409, "assistant_message_id is already bound to another run of this conversation.",
        "WIRE_CONTRACT.md § 2.9 `POST /agent-api/v1/runs/:run_id/complete`"),
    "capability_changed": ErrorCode(409, "The capability revision is stale; rediscover tools.",
                        "AGENT_CLIENT_RUNTIME_API.en.md § Read usage guidance by tool name"),
    "conversation_audit_conflict": ErrorCode(409, "The request conflicts with the current state.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "conversation_audit_not_ready": ErrorCode(409, "Some members have not confirmed yet.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "invalid_state": ErrorCode(409, "The request conflicts with the current state.",
                        "WIRE_CONTRACT.md § 3. `/agent-auth/v1` — Agent Auth"),
    "invocation_conflict": ErrorCode(409, "This invocation_id was used for a different call.",
                        "TOOL_GOVERNANCE.md § Invocation outcomes (upstream's names)"),
    "own_account": ErrorCode(409, "The request conflicts with the current state.",
                        "hub: openapi/admin-api.json"),
    "run_completion_conflict": ErrorCode(409, "The request conflicts with the current state.",
                        "WIRE_CONTRACT.md § 2.9 `POST /agent-api/v1/runs/:run_id/complete`"),
    "turn_conflict": ErrorCode(409, "The request conflicts with the current state.",
                        "TASK_CONTROL.md § 8.3 Turns: `task_binding`"),
    # 410 Gone
    "expired": ErrorCode(410, "This authorization request has expired.",
                        "AGENT_AUTH_API.en.md § 5. Business-page rules"),
    # 413 Content Too Large
    "arguments_too_large": ErrorCode(413, "The request is too large.",
                        "AGENT_CLIENT_RUNTIME_API.en.md § Endpoints"),
    "conversation_audit_limit": ErrorCode(413, "The request is too large.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "page_context_too_large": ErrorCode(413, "The request is too large.",
                        "WIRE_CONTRACT.md § 2.4 `POST /agent-api/v1/workspaces/:route/turns`"),
    "request_too_large": ErrorCode(413, "The request is too large.",
                        "hub: openapi/admin-api.json"),
    # 415 Unsupported Media Type
    "unsupported_media_type": ErrorCode(415, "Unsupported media type.",
                        "hub: openapi/admin-api.json"),
    # 429 Too Many Requests
    "rate_limited": ErrorCode(429, "Too many authorization requests; try again in a minute.",
                        "WIRE_CONTRACT.md § 3. `/agent-auth/v1` — Agent Auth"),
    # 500 Internal Server Error
    "agent_tool_internal_error": ErrorCode(500, "Internal error.",
                        "WIRE_CONTRACT.md § 2.10 `POST /agent-api/v1/tool-invocations`"),
    "conversation_audit_internal_error": ErrorCode(500, "Internal server error.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "http_error": ErrorCode(500, "Internal server error.",
                        "hub: openapi/admin-api.json"),
    "internal_error": ErrorCode(500, "Internal server error.",
                        "hub: openapi/admin-api.json"),
    # 501 Not Implemented
    "TASK_UNSUPPORTED": ErrorCode(501, "This task binding schema is not supported.",
                        "TASK_CONTROL.md § 8.2 `GET /agent-api/v1/tasks/{task_id}`"),
    # 503 Service Unavailable
    "agent_authorize_url_invalid": ErrorCode(
        503, "The client's authorization page is not a valid HTTPS or loopback URL.",
        "WIRE_CONTRACT.md § 3. `/agent-auth/v1` — Agent Auth"),
    "conversation_audit_cross_binding_unavailable": ErrorCode(
        503, "Cross-system member bindings are not available on this hub.",
        "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"),
    "conversation_audit_unavailable": ErrorCode(503, "Conversation audit is not available on this hub.",
                        "AGENT_CONVERSATION_AUDIT.en.md § Agent Conversation Audit v1"),
    "invocation_storage_unavailable": ErrorCode(503, "The invocation state could not be saved; nothing was sent.",
                        "WIRE_CONTRACT.md § 2.10 `POST /agent-api/v1/tool-invocations`"),
}


def status_of(code: str) -> int:
    return CODES[code].status
