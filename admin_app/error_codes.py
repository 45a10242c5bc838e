"""Every error code the hub answers with, in one place: its HTTP status, the default message,
and where the code is specified. `ApiError(code)` takes its status and default message from
here, so a code cannot be raised with two statuses; tests/test_error_codes.py checks that every
raise names a code listed here, that every code listed is raised, and that the OpenAPI documents
agree on the statuses.

`documented` names the specification section that fixes the code for the surface the hub
raises it on; "hub:" marks a code of the hub's own, and names where the hub documents it.
A raise passes its own message only when it says more than the default (which field, which
limit, which name).
"""
from __future__ import annotations

from dataclasses import dataclass

WIRE = "WIRE_CONTRACT.md § "
AUDIT = "AGENT_CONVERSATION_AUDIT.en.md § Limits and errors"
TASKS = "TASK_CONTROL.md § 10. Error codes"
AGENT_AUTH = WIRE + "3. `/agent-auth/v1` — Agent Auth"
ROUTE_GATE = WIRE + "2.1 Route gate"
INVOKE = WIRE + "2.10 `POST /agent-api/v1/tool-invocations`"
COMPLETE = WIRE + "2.9 `POST /agent-api/v1/runs/:run_id/complete`"
SHARED = WIRE + "1. Conventions shared by every surface"
ADMIN_API = "hub: openapi/admin-api.json"
EVERY_API = "hub: openapi/*.json"
ARTIFACTS = "BUSINESS_SIDE.md § H.1 Agent artifacts"
# Codes only the bailing-admin commands answer with (on standard error, exit status 1).
CLI = "hub: docs/operations.md § Command errors"


@dataclass(frozen=True)
class ErrorCode:
    status: int  # HTTP; codes raised only under the commands keep one for a future API
    message: str  # the default message, when the raise gives none
    documented: str  # where the code is specified


CODES: dict[str, ErrorCode] = {
    # 400 Bad Request
    "TASK_INVALID_INPUT": ErrorCode(400, "The task input is not valid.", TASKS),
    "artifact_content_mismatch": ErrorCode(
        400, "The body does not match the declared type, length or SHA-256.", ARTIFACTS),
    "artifact_invalid_request": ErrorCode(400, "The X-Bailing-Artifact metadata is not valid.", ARTIFACTS),
    "invalid_client": ErrorCode(400, "The client is unknown, disabled or has no authorization page.",
                                AGENT_AUTH),
    "invalid_grant": ErrorCode(
        400, "The code or refresh token is invalid, expired, replayed or mismatched.", AGENT_AUTH),
    "invalid_request": ErrorCode(400, "The request is not valid.", SHARED),
    "invalid_route": ErrorCode(400, "The route key is not a valid route.", ROUTE_GATE),
    "unsupported_grant_type": ErrorCode(400, "grant_type must be authorization_code or refresh_token.",
                                        AGENT_AUTH),
    # 401 Unauthorized
    "unauthorized": ErrorCode(401, "A valid bearer token is required.", SHARED),
    # 403 Forbidden
    "agent_client_disabled": ErrorCode(403, "The Agent Client Runtime is not enabled on this route.",
                                       ROUTE_GATE),
    "agent_direct_disabled": ErrorCode(403, "Business tools are not enabled on this route.", ROUTE_GATE),
    "artifact_run_mismatch": ErrorCode(
        403, "The run is not a run of this session, client, workspace and conversation.", ARTIFACTS),
    "artifact_run_turn_mismatch": ErrorCode(403, "The run belongs to another turn.", ARTIFACTS),
    "artifact_upload_disabled": ErrorCode(403, "Artifact uploads are not enabled on this route.", ARTIFACTS),
    "audience_not_allowed": ErrorCode(403, "This route's audience does not include this session.",
                                      ROUTE_GATE),
    "conversation_audit_authorization_invalid": ErrorCode(
        403, "A member's authorization or route is no longer valid.", AUDIT),
    "forbidden": ErrorCode(403, "The token's role lacks the permission this needs.",
                           WIRE + "4.1 Conversation audits; " + ADMIN_API),
    "route_not_allowed": ErrorCode(403, "This session is not allowed to use this route.", ROUTE_GATE),
    "wrong_password": ErrorCode(403, "The current password is not right.", CLI),
    # 404 Not Found
    "TASK_NOT_FOUND": ErrorCode(404, "No such task.", TASKS),
    "admin_not_found": ErrorCode(404, "No admin by that name.", CLI),
    "approval_not_found": ErrorCode(404, "No such approval.", ADMIN_API),
    "artifact_not_found": ErrorCode(404, "No such artifact in this workspace.", ARTIFACTS),
    "client_not_found": ErrorCode(404, "No such client app.", CLI),
    "conversation_audit_not_found": ErrorCode(404, "No such conversation audit.", AUDIT),
    "evidence_not_found": ErrorCode(404, "No such leaf, tree size, signed head or verifier pass in the evidence log.",
                                    ADMIN_API),
    "invocation_not_found": ErrorCode(404, "No such invocation for this session.",
                                      WIRE + "2.12 `POST /agent-api/v1/tool-invocations/:invocation_id/resume`"),
    "job_not_found": ErrorCode(404, "No such tool job.", ADMIN_API),
    "knowledge_not_found": ErrorCode(404, "No such knowledge chunk in this workspace.",
                                     "hub: openapi/agent-api-v1.json, docs/knowledge-api.md"),
    "legal_hold_not_found": ErrorCode(404, "No such legal hold.", ADMIN_API),
    "knowledge_unavailable": ErrorCode(404, "This workspace has no knowledge enabled.",
                                       "hub: openapi/agent-api-v1.json, docs/knowledge-api.md"),
    "not_found": ErrorCode(404, "Not found.", SHARED),
    "retention_policy_not_found": ErrorCode(404, "No such retention policy.", ADMIN_API),
    "route_unavailable": ErrorCode(404, "The route is unavailable.", ROUTE_GATE),
    "run_not_found": ErrorCode(
        404, "No such run.",
        WIRE + "2.5 `POST /agent-api/v1/workspaces/:route/capabilities/search`; " + ADMIN_API),
    "session_not_found": ErrorCode(404, "No such agent session.", CLI),
    "token_not_found": ErrorCode(404, "That admin holds no token with this id.", CLI),
    "tool_not_found": ErrorCode(404, "No such tool in this workspace.", INVOKE),
    # 405 Method Not Allowed
    "method_not_allowed": ErrorCode(405, "Method not allowed.", SHARED),
    # 409 Conflict
    "evidence_inconsistent": ErrorCode(409, "The evidence log no longer extends its latest signed head; no head "
                                       "is signed until it is repaired.", ADMIN_API),
    "TASK_REQUIRED": ErrorCode(409, "This session is enrolled in a task: act through a bound run.", TASKS),
    "TASK_SCOPE_BLOCKED": ErrorCode(409, "A member of the task failed verification; the task is blocked.",
                                    TASKS),
    "TASK_MEMBER_MISMATCH": ErrorCode(409, "This session, workspace and conversation are not a member of "
                                           "that task.", TASKS),
    "TASK_BINDING_CONFLICT": ErrorCode(409, "The binding does not match the task or the run's own task.",
                                       TASKS),
    "TASK_PAUSED": ErrorCode(409, "The task is paused.", TASKS),
    "TASK_CANCELLED": ErrorCode(409, "The task is cancelled.", TASKS),
    "TASK_EXPIRED": ErrorCode(409, "The task's deadline has passed.", TASKS),
    "TASK_WRITE_BUDGET_EXHAUSTED": ErrorCode(409, "The task's write budget is spent.", TASKS),
    "TASK_CONCURRENCY_EXHAUSTED": ErrorCode(409, "The task already has as many calls in flight as it "
                                                 "allows.", TASKS),
    "TASK_TOOL_NOT_ALLOWED": ErrorCode(409, "The task does not allow this tool for this member.", TASKS),
    "TASK_REVISION_CONFLICT": ErrorCode(409, "The task changed since that revision; read it again.", TASKS),
    "TASK_RECORD_INVALID": ErrorCode(409, "The stored task record fails its integrity checks.", TASKS),
    "TASK_RUN_INACTIVE": ErrorCode(409, "The run is no longer active for new work.", TASKS),
    "TASK_DISPATCH_UNCERTAIN": ErrorCode(409, "Whether the original call was attempted cannot be "
                                              "established: inspect it, do not retry or replace it.", TASKS),
    "TASK_CONFLICT": ErrorCode(409, "This request_id was already used for a different task.", TASKS),
    "TASK_CONTROL_CONFLICT": ErrorCode(409, "The control conflicts with the task's state or an earlier "
                                            "request with this request_id.", TASKS),
    "admin_disabled": ErrorCode(409, "That admin is disabled.", CLI),
    "admin_exists": ErrorCode(409, "An admin by that name already exists.",
                              "hub: docs/operations.md (init refusals)"),
    "agent_run_conflict": ErrorCode(409, "This run is not a turn of this session in this route.", INVOKE),
    "approval_expired": ErrorCode(409, "This approval expired; it can no longer be decided.", ADMIN_API),
    "approval_not_pending": ErrorCode(409, "This approval is no longer pending.", ADMIN_API),
    "artifact_conflict": ErrorCode(
        409, "This upload_id was used with another workspace or other metadata.", ARTIFACTS),
    "artifact_storage_changed": ErrorCode(
        409, "The route's bucket changed since this upload was accepted; use a new upload_id.", ARTIFACTS),
    "approval_snapshot_changed": ErrorCode(
        409, "The snapshot hash differs from the one you reviewed; review it again.", ADMIN_API),
    "assistant_message_conflict": ErrorCode(
        409, "assistant_message_id is already bound to another run of this conversation.", COMPLETE),
    "capability_changed": ErrorCode(409, "The capability revision is stale; rediscover tools.", INVOKE),
    "conversation_audit_conflict": ErrorCode(409, "The request conflicts with the archive as recorded.",
                                             AUDIT),
    "conversation_audit_not_ready": ErrorCode(409, "Some members have not confirmed yet.", AUDIT),
    "invalid_state": ErrorCode(409, "This authorization was already decided.", AGENT_AUTH),
    "invocation_conflict": ErrorCode(409, "This invocation_id was used for a different call.", INVOKE),
    "legal_hold_applies": ErrorCode(409, "A legal hold covers what this would erase; nothing was erased.",
                                    ADMIN_API),
    "legal_hold_released": ErrorCode(409, "This legal hold is released already.", ADMIN_API),
    "own_account": ErrorCode(409, "You cannot do this to your own account.", CLI),
    "session_inactive": ErrorCode(409, "The session is revoked or expired.",
                                  "BUSINESS_SIDE.md § H.2 Subject display"),
    "retention_run_busy": ErrorCode(409, "A retention purge is running already; try again when it ends.",
                                    ADMIN_API),
    "run_completion_conflict": ErrorCode(409, "This run was already completed differently.", COMPLETE),
    "turn_conflict": ErrorCode(409, "This turn was already prepared with a different request.",
                               WIRE + "2.4 `POST /agent-api/v1/workspaces/:route/turns`"),
    # 410 Gone
    "expired": ErrorCode(410, "This authorization request has expired.", AGENT_AUTH),
    # 413 Content Too Large
    "arguments_too_large": ErrorCode(413, "The request is too large.", INVOKE),
    "artifact_too_large": ErrorCode(413, "The image is larger than allowed.", ARTIFACTS),
    "conversation_audit_limit": ErrorCode(413, "A conversation audit limit was exceeded.", AUDIT),
    "page_context_too_large": ErrorCode(413, "page_context is too large.",
                                        WIRE + "2.4 `POST /agent-api/v1/workspaces/:route/turns`"),
    "request_too_large": ErrorCode(413, "The request body is too large.", EVERY_API),
    # 415 Unsupported Media Type
    "artifact_type_not_allowed": ErrorCode(
        415, "The bytes are not an image of an allowed type.", ARTIFACTS),
    "unsupported_media_type": ErrorCode(415, "Unsupported media type.", EVERY_API),
    # 429 Too Many Requests
    "rate_limited": ErrorCode(429, "Too many authorization requests; try again in a minute.", AGENT_AUTH),
    # 500 Internal Server Error
    "agent_tool_internal_error": ErrorCode(500, "Internal error.", INVOKE),
    "conversation_audit_internal_error": ErrorCode(500, "Internal server error.", AUDIT),
    # Another HTTP error Werkzeug raises; the answer carries Werkzeug's status, not this one.
    "http_error": ErrorCode(500, "Internal server error.", EVERY_API + " (the Error schema)"),
    "internal_error": ErrorCode(500, "Internal server error.", EVERY_API + " (the Error schema)"),
    # 501 Not Implemented
    "TASK_UNSUPPORTED": ErrorCode(501, "This hub does not support task control here.", TASKS),
    "artifact_unsupported": ErrorCode(501, "Artifact uploads are not installed on this hub.", ARTIFACTS),
    # 503 Service Unavailable
    "TASK_UNAVAILABLE": ErrorCode(503, "Task control is unavailable; retry with the original request.",
                                  TASKS),
    "artifact_storage_unavailable": ErrorCode(
        503, "The artifact storage is unavailable; nothing was stored.", ARTIFACTS),
    "artifact_upload_pending": ErrorCode(
        503, "The upload was accepted but not stored; retry with the same upload_id.", ARTIFACTS),
    "agent_auth_lifecycle_unavailable": ErrorCode(
        503, "Agent sessions cannot be listed right now.", AGENT_AUTH),
    "agent_authorize_url_invalid": ErrorCode(
        503, "The client's authorization page is not a valid HTTPS or loopback URL.", AGENT_AUTH),
    "conversation_audit_cross_binding_unavailable": ErrorCode(
        503, "Cross-system member bindings are not available on this hub.", AUDIT),
    "conversation_audit_unavailable": ErrorCode(503, "Conversation audit is not available on this hub.",
                                                AUDIT),
    "subject_display_unavailable": ErrorCode(
        503, "The subject display cannot be stored right now; nothing was changed.", AGENT_AUTH),
    "invocation_storage_unavailable": ErrorCode(
        503, "The invocation state could not be read or saved before the call was sent; nothing was sent.",
        INVOKE),
    # Answered with `"status": "paused"` beside the envelope, as Core answers it.
    "hub_paused": ErrorCode(503, "The hub is paused by its operators; nothing was done. Try again later.",
                            SHARED + "; BUSINESS_SIDE.md § E.2 Surfaces that refuse while paused"),
}


@dataclass(frozen=True)
class CommandCode:
    message: str  # the default message, when the refusal gives none
    documented: str


# Refusals of the bailing-admin commands that no HTTP API shares (those use CODES above).
COMMAND_CODES: dict[str, CommandCode] = {
    "agent_login_failed": CommandCode("The agent could not sign in.", CLI),
    "database_unavailable": CommandCode("Cannot reach the database.",
                                        "hub: docs/operations.md (init refusals)"),
    "demo_failed": CommandCode("The demo could not start.", CLI),
    "feature_installed": CommandCode("The feature is installed: a hub does not go without a feature it has.",
                                     CLI),
    "migration_error": CommandCode("The migrations are inconsistent.",
                                   "hub: docs/operations.md (init refusals)"),
    "port_in_use": CommandCode("The port is in use.", "hub: README.md (the demo)"),
    "provider_not_found": CommandCode("No tool provider by that name.", CLI),
    "provider_not_pulled": CommandCode("The provider's spec is given inline (openapi), not pulled from a spec_url.",
                                       CLI),
    "spec_pull_failed": CommandCode("The spec could not be pulled; the stored spec is kept.", CLI),
    "route_not_found": CommandCode("No route by that name.", CLI),
    "schema_missing": CommandCode("The schema is not there yet: run `bailing-admin db upgrade`.", CLI),
    "start_failed": CommandCode("The embedded server did not start.", CLI),
    "stop_failed": CommandCode("The embedded server did not stop.", CLI),
}


def message_of(code: str) -> str:
    """The default message of an API or command code; an unknown code is a KeyError."""
    entry = CODES.get(code) or COMMAND_CODES[code]
    return entry.message
