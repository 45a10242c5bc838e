"""The hub's HTTP API surfaces, named once: the URL prefix their blueprints mount on, the root
under which every answer is the JSON error envelope, and the OpenAPI document that describes them.
errors.py, openapi/__init__.py and the blueprints' `url_prefix` read them from here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Surface:
    prefix: str  # where its blueprints mount, version included
    root: str  # every path under it, known or not, answers in the JSON envelope
    document: str  # its OpenAPI document, a file of admin_app/openapi/


AGENT_API = Surface("/agent-api/v1", "/agent-api", "agent-api-v1.json")
AGENT_AUTH = Surface("/agent-auth/v1", "/agent-auth", "agent-auth-v1.json")
ADMIN_API = Surface("/admin/api", "/admin/api", "admin-api.json")
SURFACES = (AGENT_API, AGENT_AUTH, ADMIN_API)

# Areas of a surface with a blueprint or an error code of their own.
AGENT_AUDITS = AGENT_API.prefix + "/conversation-audits"
ADMIN_AUDITS = ADMIN_API.prefix + "/conversation-audits"
AGENT_INVOCATIONS = AGENT_API.prefix + "/tool-invocations"
AGENT_TASKS = (AGENT_API.prefix + "/tasks", AGENT_API.prefix + "/task-control")
ADMIN_TASKS = ADMIN_API.prefix + "/agent-tasks"

# An unexpected failure answers `internal_error`, except in the areas whose spec names their own
# code for it.
INTERNAL_ERROR_CODE = "internal_error"
AREA_INTERNAL_ERROR_CODES = (
    (AGENT_AUDITS, "conversation_audit_internal_error"),
    (ADMIN_AUDITS, "conversation_audit_internal_error"),
    (AGENT_INVOCATIONS, "agent_tool_internal_error"),
    # Task control fails closed and says so: retry with the original request (TASK_CONTROL.md §7.4).
    *((prefix, "TASK_UNAVAILABLE") for prefix in (*AGENT_TASKS, ADMIN_TASKS)),
)


def is_under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def is_api_path(path: str) -> bool:
    """Whether the path answers in the JSON envelope (and never with a console page)."""
    return any(is_under(path, surface.root) for surface in SURFACES)


def internal_error_code(path: str) -> str:
    return next((code for prefix, code in AREA_INTERNAL_ERROR_CODES if path.startswith(prefix)),
                INTERNAL_ERROR_CODE)
