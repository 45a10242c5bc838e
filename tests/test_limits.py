"""The OpenAPI documents are written by hand; admin_app/limits.py is the one place a limit is
set. This test ties every number the documents state to a constant there (or to a format that
is no limit: a hash length, an integer type's range), so a limit changed on one side only, or a
new number in a document that nobody tied, fails here.

The table is kept in the test, not beside the constants: it is about where the documents say
a number, which limits.py (imported by the validators, the demo and the benchmarks) need not
know, and a pointer that moves in a document is fixed in the same file that reads it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from admin_app import limits
from admin_app.config import PROJECT_ROOT
from admin_app.validation import SAFE_INTEGER_MAX

# Pure Python: no database.
pytestmark = pytest.mark.any_server

OPENAPI = PROJECT_ROOT / "admin_app" / "openapi"
KEYWORDS = ("maxItems", "minItems", "maxLength", "minLength", "maxProperties", "minProperties",
            "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf")

# Bounds that say "present", "not negative" or "empty", wherever they appear.
TRIVIAL = {("minimum", 0), ("minimum", 1), ("minLength", 1), ("minItems", 1), ("maxProperties", 0),
           ("maxItems", 0), ("default", 0)}

# Numbers that are formats, not limits of the contract.
FORMATS = {
    "SAFE_INTEGER_MAX": SAFE_INTEGER_MAX,  # what every JSON client holds exactly
    "INT32_MAX": 2**31 - 1,  # a PostgreSQL integer column (sequences, offsets)
    "BIGINT_MAX": 2**63 - 1,  # a PostgreSQL bigint id
    "SHA256_HEX_LENGTH": 64,
    "RESOURCE_KEY_LENGTH[0]": 2,  # ^[a-z0-9][a-z0-9_-]{1,63}$
    "RESOURCE_KEY_LENGTH[1]": 64,
    "UUID_VERSION_MAX": 5,  # ids are UUIDs of versions 1-5
    "HTTP_STATUS_MIN": 100,
    "HTTP_STATUS_MAX": 599,
}

A, R, U = "admin-api.json", "agent-api-v1.json", "agent-auth-v1.json"
S = "/components/schemas/"
INFO = S + "SystemInfo/properties/system/oneOf/1/properties/"

# constant (of limits, or of FORMATS) -> where the documents state it: "document#pointer", the
# pointer ending in the keyword, or in `description` for a number in prose.
TIED: dict[str, list[str]] = {
    # ------------------------------------------------------------ conversation audit
    "AUDIT_BATCH_MAX_EVENTS": [f"{R}#{S}ConversationAuditEvents/properties/events/maxItems",
                               f"{R}#{S}ConversationAuditEvents/properties/events/description"],
    "AUDIT_TEXT_MAX_UNITS": [f"{R}#{S}EventUserMessage/properties/content/maxLength",
                             f"{R}#{S}EventUserMessage/properties/content/description",
                             f"{R}#{S}EventAssistantMessage/properties/content/maxLength",
                             f"{R}#{S}EventAssistantMessage/properties/content/description"],
    "AUDIT_BATCH_TEXT_MAX_BYTES": [f"{R}#{S}EventUserMessage/properties/content/description",
                                   f"{R}#{S}EventAssistantMessage/properties/content/description"],
    "AUDIT_ARCHIVE_MAX_EVENTS": [f"{R}#{S}ConversationAuditEvents/properties/events/description"],
    "AUDIT_ENVELOPE_MAX_BYTES": [f"{R}#/paths/~1conversation-audits/post/description",
                                 f"{R}#/paths/~1conversation-audits~1{{archive_id}}~1confirm/post/description",
                                 f"{R}#/paths/~1conversation-audits~1{{archive_id}}~1events/post/description"],
    "AUDIT_MAX_MEMBERS": [f"{R}#{S}ConversationAuditCreateV1/properties/member_session_ids/maxItems",
                          f"{R}#{S}ConversationAuditCreateV1/properties/member_session_ids/description",
                          f"{R}#{S}ConversationAuditCreateV2/properties/members/maxItems",
                          f"{R}#{S}ConversationAuditCreateV2/properties/members/description",
                          f"{R}#{S}ConversationAuditHeader/properties/member_count/maximum",
                          f"{R}#{S}ConversationAudit/properties/member_count/maximum",
                          f"{A}#{S}ConversationHeader/properties/member_count/maximum",
                          f"{A}#{S}ConversationHeader/properties/confirmed_count/maximum",
                          f"{A}#{S}ConversationAuditDetail/properties/members/maxItems"],
    "AUDIT_LABEL_MAX_UNITS": [f"{R}#{S}Label/maxLength",
                              f"{A}#{S}ConversationMember/properties/display_label/maxLength"],
    "AUDIT_LIST_LIMIT[0]": [f"{A}#/paths/~1conversation-audits/get/parameters/0/schema/default"],
    "AUDIT_LIST_LIMIT[2]": [f"{A}#/paths/~1conversation-audits/get/parameters/0/description",
                            f"{A}#{S}ConversationAuditList/properties/items/maxItems"],
    "AUDIT_EVENTS_LIMIT[0]": [f"{A}#/paths/~1conversation-audits~1{{archive_id}}/get/parameters/2/schema/default"],
    "AUDIT_EVENTS_LIMIT[2]": [f"{A}#/paths/~1conversation-audits~1{{archive_id}}/get/parameters/2/description",
                              f"{A}#{S}ConversationAuditDetail/properties/events/maxItems"],
    # ------------------------------------------------------------ runtime
    "RUNTIME_BODY_MAX_BYTES": [f"{R}#/paths/~1workspaces~1{{route_key}}~1turns/post/description",
                               f"{R}#/paths/~1workspaces~1{{route_key}}~1turns/post/responses/413/description",
                               f"{R}#/paths/~1runs~1{{run_id}}~1complete/post/description"],
    "SEARCH_BODY_MAX_BYTES": [f"{R}#/paths/~1workspaces~1{{route_key}}~1capabilities~1search/post/description"],
    "SMALL_BODY_MAX_BYTES": [f"{R}#/paths/~1workspaces~1{{route_key}}~1knowledge~1search/post/description",
                             f"{R}#/paths/~1workspaces~1{{route_key}}~1knowledge~1read/post/description"],
    "USER_INPUT_MAX": [f"{R}#{S}TurnRequest/properties/user_input/maxLength",
                       f"{R}#{S}TurnRequest/properties/user_input/description"],
    "COMPLETION_CONTENT_MAX": [f"{R}#{S}CompletionRequest/properties/content/maxLength",
                               f"{R}#{S}CompletionRequest/properties/content/description"],
    "RUN_NAME_MAX": [f"{R}#{S}CompletionRequest/properties/model/maxLength",
                     f"{R}#{S}CompletionRequest/properties/model/description",
                     f"{R}#{S}CompletionRequest/properties/runtime/maxLength",
                     f"{R}#{S}CompletionRequest/properties/runtime/description"],
    "PAGE_CONTEXT_MAX_BYTES": [f"{R}#/paths/~1workspaces~1{{route_key}}~1turns/post/responses/413/description",
                               f"{R}#{S}PageContext/description"],
    "TURN_MAX_RENDERERS": [f"{R}#{S}TurnRequest/properties/renderers/maxItems"],
    "MEMORY_ID_MAX": [f"{R}#{S}ExecutionSummaryRecord/properties/invocation_id/maxLength",
                      f"{R}#{S}ExecutionSummaryRecord/properties/tool/maxLength"],
    "CAPABILITY_QUERY_MAX": [f"{R}#{S}CapabilitySearchRequest/properties/query/maxLength",
                             f"{R}#{S}CapabilitySearch/properties/query/maxLength"],
    "CAPABILITY_SEARCH_MAX_RESULTS": [f"{R}#{S}CapabilitySearchRequest/properties/limit/maximum",
                                      f"{R}#{S}CapabilitySearch/properties/tools/maxItems",
                                      f"{R}#{S}Discovery/properties/limit/maximum"],
    "ACTIVE_TOOLS_MAX": [f"{R}#{S}TurnContext/properties/active_tools/maxItems",
                         f"{R}#{S}CapabilitiesSummary/properties/active_limit/maximum",
                         f"{R}#{S}WorkspaceList/properties/workspaces/items/properties/active_tool_limit/maximum"],
    "WORKSPACE_NAME_MAX": [f"{R}#{S}Workspace/properties/name/maxLength",
                           f"{R}#{S}Workspace/description",
                           f"{R}#{S}WorkspaceList/properties/workspaces/items/properties/name/maxLength"],
    "WORKSPACE_DESCRIPTION_MAX": [f"{R}#{S}Workspace/properties/description/maxLength",
                                  f"{R}#{S}Workspace/description",
                                  f"{R}#{S}WorkspaceList/properties/workspaces/items/properties/description/maxLength"],
    "WORKSPACES_LIST_MAX": [f"{R}#{S}WorkspaceList/properties/workspaces/maxItems"],
    "SYSTEM_NAME_MAX": [f"{R}#{INFO}name/maxLength"],
    "SYSTEM_SUMMARY_MAX": [f"{R}#{INFO}summary/maxLength"],
    "SYSTEM_MAX_DOMAINS": [f"{R}#{INFO}domains/maxItems"],
    "SYSTEM_DOMAIN_MAX": [f"{R}#{INFO}domains/items/maxLength"],
    "SYSTEM_MAX_BOUNDARIES": [f"{R}#{INFO}boundaries/maxItems"],
    "SYSTEM_BOUNDARY_MAX": [f"{R}#{INFO}boundaries/items/maxLength"],
    # ------------------------------------------------------------ knowledge
    "KNOWLEDGE_INLINE_MAX": [f"{R}#{S}TurnKnowledgeInline/properties/content/maxLength"],
    "KNOWLEDGE_TITLE_MAX": [f"{R}#{S}TurnKnowledgeInline/properties/title/maxLength",
                            f"{R}#{S}TurnKnowledgeHint/properties/title/maxLength",
                            f"{R}#{S}KnowledgeRef/properties/title/maxLength"],
    "KNOWLEDGE_HINT_MAX": [f"{R}#{S}TurnKnowledgeHint/properties/content/maxLength"],
    "KNOWLEDGE_SEARCH_MAX_RESULTS": [f"{R}#{S}KnowledgeSearchRequest/properties/limit/maximum",
                                     f"{R}#{S}KnowledgeSearchRequest/properties/limit/description"],
    "KNOWLEDGE_QUERY_MAX": [f"{R}#{S}KnowledgeSearchRequest/properties/query/maxLength"],
    # ------------------------------------------------------------ agent artifacts
    "ARTIFACT_HEADER_MAX": [
        f"{R}#/paths/~1workspaces~1{{route_key}}~1artifacts~1{{upload_id}}/post/parameters/2/schema/maxLength"],
    "ARTIFACT_MAX_BYTES": [f"{R}#{S}Artifact{kind}/properties/bytes/maximum" for kind in ("Metadata", "Receipt")],
    "ARTIFACT_TEXT_MAX": [f"{R}#{S}Artifact{kind}/properties/{field}/maxLength" for kind in ("Metadata", "Receipt")
                          for field in ("client_conversation_id", "client_turn_id", "name")],
    "ARTIFACT_RUN_ID_LENGTH": [f"{R}#{S}Artifact{kind}/properties/run_id/{bound}" for kind in ("Metadata", "Receipt")
                               for bound in ("minLength", "maxLength")],
    "ARTIFACT_URL_MAX": [f"{R}#{S}ArtifactReceipt/properties/url/maxLength"],
    # ------------------------------------------------------------ tools and invocations
    "TOOL_DESCRIPTION_MAX": [f"{R}#{S}Tool/properties/description/maxLength",
                             f"{R}#{S}Tool/properties/description/description"],
    "TOOL_SCOPE_MAX": [f"{R}#{S}Tool/properties/scope/maxLength"],
    "TOOL_SCHEMA_MAX_BYTES": [f"{R}#{S}Tool/properties/input_schema/description"],
    "INVOCATION_ARGUMENTS_MAX_BYTES": [f"{R}#/paths/~1tool-invocations/post/responses/413/description",
                                       f"{R}#{S}InvocationRequest/properties/arguments/description"],
    "INVOCATION_ENVELOPE_MAX_BYTES": [f"{R}#/paths/~1tool-invocations/post/responses/413/description",
                                      f"{R}#{S}InvocationRequest/description"],
    "RESUME_BODY_MAX_BYTES": [f"{R}#/paths/~1tool-invocations~1{{invocation_id}}~1resume/post/description",
                              f"{R}#/paths/~1tool-invocations~1{{invocation_id}}~1resume/post/responses/413/description"],
    "RESULT_TEXT_MAX": [f"{R}#{S}Invocation/properties/text/maxLength"],
    # ------------------------------------------------------------ agent auth
    "AUTH_BODY_MAX_BYTES": [f"{U}#/paths/~1authorizations/post/description",
                            f"{U}#/paths/~1authorizations/post/responses/413/description",
                            f"{U}#/paths/~1authorizations~1{{authorization_id}}~1approve/post/description",
                            f"{U}#/paths/~1authorizations~1{{authorization_id}}~1approve/post/responses/413/description",
                            f"{U}#/paths/~1authorizations~1{{authorization_id}}~1deny/post/responses/413/description",
                            f"{U}#/paths/~1token/post/description",
                            f"{U}#/paths/~1token/post/responses/413/description"],
    "WITHDRAW_BODY_MAX_BYTES": [f"{U}#/paths/~1authorizations~1{{authorization_id}}~1revoke/post/description",
                                f"{U}#/paths/~1authorizations~1{{authorization_id}}~1revoke/post/responses/413/description"],
    "AUTHORIZATIONS_PER_WINDOW": [f"{U}#/paths/~1authorizations/post/description",
                                  f"{U}#/paths/~1authorizations/post/responses/429/description"],
    "AUTH_MAX_ROUTES": [f"{U}#{S}CreateAuthorizationRequest/properties/requested_routes/maxItems",
                        f"{U}#{S}ApproveRequest/properties/allowed_routes/maxItems"],
    "CALLBACK_MAX": [f"{U}#{S}CreateAuthorizationRequest/properties/redirect_uri/maxLength"],
    "STATE_LENGTH[0]": [f"{U}#{S}CreateAuthorizationRequest/properties/state/minLength"],
    "STATE_LENGTH[1]": [f"{U}#{S}CreateAuthorizationRequest/properties/state/maxLength"],
    "DEVICE_LABEL_MAX": [f"{U}#{S}CreateAuthorizationRequest/properties/device_label/maxLength"],
    "ON_BEHALF_OF_MAX": [f"{U}#{S}ApproveRequest/properties/on_behalf_of/maxLength",
                         f"{U}#/paths/~1sessions/get/parameters/1/schema/maxLength",
                         f"{U}#/paths/~1sessions/get/parameters/1/description"],
    "SUBJECT_DISPLAY_NAME_MAX": [f"{U}#{S}ApproveRequest/properties/subject_display/properties/name/maxLength",
                                 f"{U}#{S}ApproveRequest/properties/subject_display/properties/name/description",
                                 f"{U}#{S}ApproveRequest/properties/subject_display/description",
                                 f"{U}#{S}SubjectDisplay/description",
                                 f"{U}#{S}SubjectDisplayUpdate/properties/subject_display/description",
                                 f"{U}#{S}SubjectDisplayUpdate/properties/subject_display/properties/name/maxLength",
                                 f"{U}#{S}SubjectDisplayUpdate/properties/subject_display/properties/name/description"],
    "SUBJECT_DISPLAY_BODY_MAX_BYTES": [f"{U}#/paths/~1sessions~1{{session_id}}~1subject-display/put/description",
                                       f"{U}#/paths/~1sessions~1{{session_id}}~1subject-display/put/responses/400/description"],
    "SESSIONS_LIMIT[0]": [f"{U}#/paths/~1sessions/get/parameters/5/schema/default"],
    "SESSIONS_LIMIT[2]": [f"{U}#/paths/~1sessions/get/parameters/5/schema/maximum",
                          f"{U}#/paths/~1sessions/get/parameters/5/description",
                          f"{U}#{S}BusinessSessionList/properties/list/maxItems"],
    "SESSIONS_CURSOR_MAX": [f"{U}#/paths/~1sessions/get/parameters/6/schema/maxLength",
                            f"{U}#/paths/~1sessions/get/parameters/6/description",
                            f"{U}#{S}BusinessSessionList/properties/next_cursor/maxLength"],
    "GRANT_FIELD_MAX": [f"{U}#{S}AuthorizationCodeGrant/properties/code/maxLength",
                        f"{U}#{S}AuthorizationCodeGrant/properties/redirect_uri/maxLength",
                        f"{U}#{S}AuthorizationCodeGrant/properties/code_verifier/maxLength",
                        f"{U}#{S}RefreshTokenGrant/properties/refresh_token/maxLength"],
    "PRINCIPAL_FIELD_MAX[id]": [f"{U}#{S}Principal/properties/id/maxLength",
                                f"{U}#/paths/~1sessions/get/parameters/2/schema/maxLength",
                                f"{U}#/paths/~1sessions/get/parameters/2/description"],
    "PRINCIPAL_FIELD_MAX[tenant]": [f"{U}#{S}Principal/properties/tenant/maxLength",
                                    f"{U}#/paths/~1sessions/get/parameters/3/schema/maxLength"],
    "PRINCIPAL_FIELD_MAX[audience]": [f"{U}#{S}Principal/properties/audience/maxLength"],
    "PRINCIPAL_FIELD_MAX[channel]": [f"{U}#{S}Principal/properties/channel/maxLength"],
    "PRINCIPAL_MAX_ROLES": [f"{U}#{S}Principal/properties/roles/maxItems"],
    "PRINCIPAL_ROLE_MAX": [f"{U}#{S}Principal/properties/roles/items/maxLength"],
    # ------------------------------------------------------------ admin API
    "ADMIN_BODY_MAX_BYTES": [f"{A}#/paths/~1tool-approvals~1{{approval_id}}~1{{decision}}/post/description",
                             f"{A}#/paths/~1tool-approvals~1{{approval_id}}~1{{decision}}/post/responses/413/description"],
    "APPROVALS_LIMIT[0]": [f"{A}#/paths/~1tool-approvals/get/parameters/1/schema/default"],
    "APPROVALS_LIMIT[2]": [f"{A}#/paths/~1tool-approvals/get/parameters/1/schema/maximum",
                           f"{A}#/paths/~1tool-approvals/get/parameters/1/description",
                           f"{A}#{S}ToolApprovalList/properties/items/maxItems"],
    "APPROVALS_OFFSET_MAX": [f"{A}#/paths/~1tool-approvals/get/parameters/2/schema/maximum"],
    "APPROVAL_REASON_MAX": [f"{A}#{S}Decision/properties/reason/maxLength"],
    "CONFIG_AUDIT_LIMIT[2]": [f"{A}#/paths/~1config-audit/get/parameters/0/description"],
    # ------------------------------------------------------------ retention, holds, erasure
    "RETENTION_KEEP_DAYS[1]": [f"{A}#{S}RetentionPolicy/properties/keep_days/maximum",
                               f"{A}#{S}RetentionPolicyWrite/properties/keep_days/maximum"],
    "RETENTION_REASON_MAX": [f"{A}#{S}LegalHoldPlace/properties/reason/maxLength",
                             f"{A}#{S}LegalHoldRelease/properties/reason/maxLength",
                             f"{A}#{S}ErasureRequestWrite/properties/reason/maxLength"],
    "LEGAL_HOLD_VALUE_MAX": [f"{A}#{S}LegalHoldPlace/properties/value/maxLength",
                             f"{A}#{S}ErasureRequestWrite/properties/principal_id/maxLength"],
    "RETENTION_LIST_LIMIT[2]": [f"{A}#/paths/~1{p}/get/parameters/0/description"
                                for p in ("retention~1runs", "legal-holds", "erasure-requests")],
    # ------------------------------------------------------------ task control
    "TASK_MAX_MEMBERS": [
        "admin-api.json#/components/schemas/AgentTask/properties/member_count/maximum",
        "admin-api.json#/components/schemas/AgentTask/properties/members/maxItems",
        "admin-api.json#/components/schemas/AgentTaskCreate/properties/members/maxItems",
        "agent-api-v1.json#/components/schemas/TaskSnapshot/properties/member_count/maximum"],
    "TASK_MAX_TOOLS": [
        "admin-api.json#/components/schemas/AgentTaskMember/properties/allowed_tools/maxItems",
        "agent-api-v1.json#/components/schemas/TaskMember/properties/allowed_tools/maxItems"],
    "TASK_MAX_WRITE_CALLS": [
        "admin-api.json#/components/schemas/AgentTaskPolicy/properties/max_write_calls/maximum",
        "agent-api-v1.json#/components/schemas/TaskPolicy/properties/max_write_calls/maximum"],
    "TASK_MAX_CONCURRENT": [
        "admin-api.json#/components/schemas/AgentTaskPolicy/properties/max_concurrent/maximum",
        "agent-api-v1.json#/components/schemas/TaskPolicy/properties/max_concurrent/maximum"],
    "TASK_TEXT_MAX[request_id]": [
        "admin-api.json#/components/schemas/AgentTaskCreate/properties/request_id/maxLength",
        "admin-api.json#/components/schemas/AgentTaskControl/properties/request_id/maxLength"],
    "TASK_TEXT_MAX[client_app_id]": [
        "admin-api.json#/components/schemas/AgentTaskMember/properties/client_app_id/maxLength"],
    "TASK_CREATE_BODY_MAX_BYTES": [
        "admin-api.json#/paths/~1agent-tasks/post/description",
        "admin-api.json#/paths/~1agent-tasks/post/responses/413/description"],
    "TASK_CONTROL_BODY_MAX_BYTES": [
        "admin-api.json#/paths/~1agent-tasks~1{task_id}~1control/post/description",
        "admin-api.json#/paths/~1agent-tasks~1{task_id}~1control/post/responses/413/description"],
    "TASK_LIST_LIMIT[0]": [
        "admin-api.json#/paths/~1agent-tasks/get/parameters/0/schema/default",
        "admin-api.json#/paths/~1agent-tasks~1{task_id}/get/parameters/1/schema/default"],
    "TASK_LIST_LIMIT[2]": [
        "admin-api.json#/paths/~1agent-tasks/get/parameters/0/schema/maximum",
        "admin-api.json#/paths/~1agent-tasks/get/parameters/0/description",
        "admin-api.json#/paths/~1agent-tasks~1{task_id}/get/parameters/1/schema/maximum",
        "admin-api.json#/paths/~1agent-tasks~1{task_id}/get/parameters/1/description",
        "admin-api.json#/components/schemas/AgentTaskList/properties/items/maxItems",
        "admin-api.json#/components/schemas/AgentTaskDetail/properties/invocations/maxItems"],
    # ------------------------------------------------------------ Client API jobs
    "JOB_PREVIEW_CHARS": [f"{A}#{S}ClientJobListRow/properties/input_preview/maxLength",
                          f"{A}#{S}ClientJobListRow/properties/summary/maxLength"],
    "JOB_LIST_LIMIT[0]": [f"{A}#/paths/~1runs/get/parameters/0/schema/default"],
    "JOB_LIST_LIMIT[2]": [f"{A}#/paths/~1runs/get/parameters/0/description"],
    "JOB_SEARCH_LIMIT[0]": [f"{A}#/paths/~1runs~1trace/get/parameters/6/schema/default"],
    "JOB_SEARCH_LIMIT[2]": [f"{A}#/paths/~1runs~1trace/get/parameters/6/description"],
    "JOB_SEARCH_VALUE_MAX": [f"{A}#/paths/~1runs~1trace/get/parameters/{i}/schema/maxLength" for i in range(6)],
    "JOB_TRACE_EVENTS_MAX": [f"{A}#{S}ClientJobTrace/properties/trace/properties/events/maxItems"],
    "JOB_AUDIT_MAX": [f"{A}#/paths/~1runs~1{{job_id}}~1audit/get/description",
                      f"{A}#/paths/~1runs~1{{job_id}}~1audit/get/responses/200/content/application~1json/schema/maxItems"],
    "DEAD_LETTER_LIMIT[2]": [f"{A}#/paths/~1delivery-dlq/get/parameters/1/description"],
    "DEAD_LETTER_PREVIEW_CHARS": [f"{A}#{S}DeadLetter/properties/content_preview/maxLength"],
    "EXECUTOR_TOKEN_DESCRIPTION_MAX": [f"{A}#{S}ExecutorTokenWrite/properties/description/maxLength"],
    "EXECUTOR_TOKEN_BODY_MAX_BYTES": [f"{A}#/paths/~1executor-tokens/post/responses/413/description"],
    "DISPATCH_LEASES_MAX": [f"{A}#/paths/~1dispatch-status/get/description",
                            f"{A}#{S}DispatchStatus/properties/leases/maxItems"],
    "DISPATCH_INFLIGHT_JOBS_MAX": [
        f"{A}#{S}DispatchStatus/properties/blocked_threads/items/properties/inflight_jobs/maxItems"],
    # ------------------------------------------------------------ formats
    "SAFE_INTEGER_MAX": [f"{A}#{S}AgentTaskControl/properties/expected_revision/maximum",
                         f"{A}#/paths/~1conversation-audits/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1conversation-audits/get/parameters/1/schema/maximum",
                         f"{A}#/paths/~1conversation-audits~1{{archive_id}}/get/parameters/1/schema/maximum",
                         f"{A}#/paths/~1conversation-audits~1{{archive_id}}/get/parameters/2/schema/maximum",
                         f"{A}#/paths/~1runs/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1runs/get/parameters/1/schema/maximum",
                         f"{A}#/paths/~1runs~1trace/get/parameters/6/schema/maximum",
                         # The evidence log's sizes and indexes (admin_app/api/evidence.py).
                         f"{A}#/paths/~1evidence~1heads~1{{tree_size}}/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1evidence~1leaves~1{{index}}/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1evidence~1proof~1inclusion/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1evidence~1proof~1inclusion/get/parameters/1/schema/maximum",
                         f"{A}#/paths/~1evidence~1proof~1consistency/get/parameters/0/schema/maximum",
                         f"{A}#/paths/~1evidence~1proof~1consistency/get/parameters/1/schema/maximum"],
    "INT32_MAX": [f"{R}#{S}Event{kind}/properties/sequence/maximum"
                  for kind in ("TurnStart", "UserMessage", "AssistantMessage", "RunLink", "TurnEnd")]
                 + [f"{R}#{S}KnowledgeReadRequest/properties/offset/maximum"],
    "BIGINT_MAX": [f"{R}#{S}KnowledgeReadRequest/properties/chunk_id/maximum"],
    "SHA256_HEX_LENGTH": [f"{A}#{S}Decision/properties/args_hash/minLength",
                          f"{A}#{S}Decision/properties/args_hash/maxLength"],
    "RESOURCE_KEY_LENGTH[0]": [f"{R}#{S}ResourceKey/minLength"],
    "RESOURCE_KEY_LENGTH[1]": [f"{R}#{S}ResourceKey/maxLength",
                               f"{R}#{S}WorkspaceList/properties/workspaces/items/properties/profile/maxLength"],
    "UUID_VERSION_MAX": [
        f"{A}#/paths/~1threads~1{{thread_id}}~1agent-runs~1{{run_id}}~1trace/get/parameters/1/description"],
    "HTTP_STATUS_MIN": [f"{R}#{S}Invocation/properties/business_status/minimum",
                        f"{R}#{S}Invocation/properties/result/properties/http_status/minimum"],
    "HTTP_STATUS_MAX": [f"{R}#{S}Invocation/properties/business_status/maximum",
                        f"{R}#{S}Invocation/properties/result/properties/http_status/maximum"],
    "RATE_LIMIT_RETRY_AFTER_MS_MAX": [f"{R}#{S}Invocation/properties/retry_after_ms/maximum",
                                      f"{A}#{S}ToolRateLimitRefusal/properties/retry_after_ms/maximum"],
}

# A limit in prose: "at most 64 KiB", "over 2 MiB", "more than 10", "clamped to 1-100".
_PROSE = re.compile(r"(?:at most|up to|more than|over|exceeds|clamped to 1-|1-)\s*(\d[\d,]*)(?:\s*(KiB|MiB)\b)?"
                    r"(?! *(?:s\b|seconds|minute|hour|day))", re.IGNORECASE)
_UNIT = {None: 1, "kib": 1024, "mib": 1024 * 1024}
# Dates in examples ("2026-01-01") are no limits.
_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def value_of(name: str) -> int:
    """A constant of limits (or FORMATS), with `[i]` for an item of a tuple or dict."""
    if name in FORMATS:
        return FORMATS[name]
    base, _, key = name.partition("[")
    value = getattr(limits, base)
    if key:
        key = key.rstrip("]")
        value = value[int(key)] if key.isdigit() else value[key]
    assert isinstance(value, int), name
    return value


def _pointer(parts: tuple[object, ...]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def stated_numbers(doc: object) -> list[tuple[str, int]]:
    """(pointer, number) for every numeric constraint, every number-valued `default` of a
    parameter schema, and every limit stated in a description."""
    found: list[tuple[str, int]] = []

    def walk(node: object, path: tuple[object, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                here = (*path, key)
                if key in KEYWORDS and isinstance(value, int) and not isinstance(value, bool):
                    found.append((_pointer(here), value))
                elif key == "default" and path[-1:] == ("schema",) and isinstance(value, int) \
                        and not isinstance(value, bool):
                    found.append((_pointer(here), value))
                elif key == "description" and isinstance(value, str):
                    text = _DATE.sub("", value)
                    for match in _PROSE.finditer(text):
                        number = int(match.group(1).replace(",", ""))
                        found.append((_pointer(here), number * _UNIT[(match.group(2) or "").lower() or None]))
                walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*path, i))

    walk(doc, ())
    return found


def problems(documents: dict[str, object], tied: dict[str, list[str]]) -> list[str]:
    out = []
    claimed: dict[str, set[int]] = {}
    for name, places in tied.items():
        for place in places:
            claimed.setdefault(place, set()).add(value_of(name))
    stated: dict[str, set[int]] = {}
    for doc_name, doc in documents.items():
        for pointer, number in stated_numbers(doc):
            place = f"{doc_name}#{pointer}"
            stated.setdefault(place, set()).add(number)
            keyword = pointer.rsplit("/", 1)[1]
            if place in claimed:
                if number not in claimed[place]:
                    out.append(f"{place}: {number}, but limits say {sorted(claimed[place])}")
            elif (keyword, number) not in TRIVIAL:
                out.append(f"{place}: {number} is tied to no constant of limits.py")
    for name, places in tied.items():
        for place in places:
            if value_of(name) not in stated.get(place, set()):
                out.append(f"{place}: {name} ({value_of(name)}) is not stated there")
    return out


def _documents() -> dict[str, object]:
    return {path.name: json.loads(path.read_text()) for path in sorted(OPENAPI.glob("*.json"))}


def test_every_number_in_the_documents_is_a_limit_of_the_code():
    assert problems(_documents(), TIED) == []


def test_the_table_names_only_constants_that_exist():
    for name in TIED:
        value_of(name)


def test_a_changed_limit_or_an_untied_number_fails():
    doc = {"components": {"schemas": {
        "Batch": {"properties": {"events": {"maxItems": limits.AUDIT_BATCH_MAX_EVENTS + 1,
                                            "description": "At most 3 KiB."}}},
        "New": {"maxLength": 77, "minLength": 1},
    }}}
    tied = {"AUDIT_BATCH_MAX_EVENTS": ["d#/components/schemas/Batch/properties/events/maxItems",
                                       "d#/components/schemas/Gone/maxItems"],
            "SEARCH_BODY_MAX_BYTES": ["d#/components/schemas/Batch/properties/events/description"]}
    n = limits.AUDIT_BATCH_MAX_EVENTS
    assert sorted(problems({"d": doc}, tied)) == sorted([
        f"d#/components/schemas/Batch/properties/events/maxItems: {n + 1}, but limits say [{n}]",
        f"d#/components/schemas/Batch/properties/events/maxItems: AUDIT_BATCH_MAX_EVENTS ({n}) is not stated there",
        f"d#/components/schemas/Gone/maxItems: AUDIT_BATCH_MAX_EVENTS ({n}) is not stated there",
        f"d#/components/schemas/Batch/properties/events/description: 3072, but limits say [{8 * 1024}]",
        "d#/components/schemas/Batch/properties/events/description: SEARCH_BODY_MAX_BYTES (8192) is not stated there",
        "d#/components/schemas/New/maxLength: 77 is tied to no constant of limits.py",
    ])


@pytest.mark.parametrize("text, numbers", [
    ("The body is at most 64 KiB.", [64 * 1024]),
    ("Over 2 MiB (`arguments_too_large`) or over 1,048,576 bytes.", [2 * 1024 * 1024, 1048576]),
    ("Page size, clamped to 1-100.", [100]),
    ("More than 10 requests in a minute.", [10]),
    ("Expires after 600 s; created 2026-01-01T00:00:00Z.", []),
])
def test_prose_limits_are_read(text, numbers):
    assert [n for _, n in stated_numbers({"description": text})] == numbers


def test_the_catalog_schema_states_the_tool_scope_limit():
    # The ACC schema, not Python, checks a tool's scope: its number is the same constant's.
    acc = json.loads(Path(PROJECT_ROOT / "admin_app" / "catalog" / "acc.schema.json").read_text())
    assert acc["properties"]["scope"]["maxLength"] == limits.TOOL_SCOPE_MAX
