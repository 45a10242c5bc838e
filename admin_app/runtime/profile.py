"""The runtime profile a workspace shows a local agent (bailing.agent-runtime-profile.v1), and the
workspace list entry built from it (bailing.agent-workspaces.v1).

Only `target_config.system_prompt` and `agent_client.instructions` are taken from the route's
prompts; credentials, model settings, other target_config fields and provider URLs never leave.
"""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import sha256_json
from ..catalog.projection import Projection
from ..identity.models import Route
from ..validation import CONTROL_CHARS
from .models import KnowledgeDocument

PROFILE_SCHEMA = "bailing.agent-runtime-profile.v1"
WORKSPACES_SCHEMA = "bailing.agent-workspaces.v1"
# Each part of the instructions sits under its own heading line, so an agent can tell the route's
# rules from the local agent's additions.
PROMPT_HEADING = "[Route system rules]"
CLIENT_INSTRUCTIONS_HEADING = "[Local agent rules]"
# Routes have one profile: the workspace list names it for clients that show it.
PROFILE_NAME = "default"

MEMORY_DEFAULTS = {"recent_messages": 12, "recent_budget_chars": 8000, "per_message_chars": 2000,
                   "summary_enabled": False, "summary_max_chars": 1200}
KNOWLEDGE_DEFAULTS = {"enabled": False, "mode": "chunk", "top_k": 5, "max_docs": 4, "page_boost": False}
DEFAULT_MAX_TOOL_CALLS = 5


def safe_text(value, maximum: int) -> str:
    """Hub-owned text shown to agents: control characters (but tab, LF, CR) become spaces, the
    ends are trimmed, and the text is cut to `maximum` characters."""
    if not isinstance(value, str):
        return ""
    return CONTROL_CHARS.sub(" ", value).strip()[:maximum]


def workspace(route: Route) -> dict:
    return {"route": route.route_key, "name": safe_text(route.name, limits.WORKSPACE_NAME_MAX),
            "description": safe_text(route.description, limits.WORKSPACE_DESCRIPTION_MAX)}


def active_tool_limit(route: Route) -> int:
    limit = (route.agent_client or {}).get("active_tool_limit", limits.ACTIVE_TOOLS_DEFAULT)
    return max(1, min(limit, limits.ACTIVE_TOOLS_MAX))


def instructions(route: Route) -> str:
    prompt = safe_text((route.target_config or {}).get("system_prompt"), limits.SYSTEM_PROMPT_MAX)
    extra = safe_text((route.agent_client or {}).get("instructions"), limits.CLIENT_INSTRUCTIONS_MAX)
    parts = [f"{PROMPT_HEADING}\n{prompt}" if prompt else "",
             f"{CLIENT_INSTRUCTIONS_HEADING}\n{extra}" if extra else ""]
    return "\n\n".join(p for p in parts if p)


def memory_settings(route: Route) -> dict:
    return {**MEMORY_DEFAULTS, **((route.agent_client or {}).get("memory") or {})}


def knowledge_settings(db: Session, route: Route) -> dict:
    configured = {**KNOWLEDGE_DEFAULTS, **((route.agent_client or {}).get("knowledge") or {})}
    sources = db.scalar(select(func.count()).select_from(KnowledgeDocument)
                        .where(KnowledgeDocument.route_key == route.route_key)) or 0
    return {"enabled": configured["enabled"], "sources": sources, "mode": configured["mode"],
            "top_k": configured["top_k"], "max_docs": configured["max_docs"],
            "page_boost": configured["page_boost"]}


def _knowledge_view(settings: dict) -> dict:
    # A workspace without knowledge shows only that: no settings that do nothing.
    return settings if settings["enabled"] else {"enabled": False, "sources": 0}


def governance(route: Route) -> dict:
    return {
        "planner": "local_agent",
        "execution": "bailinghub_governed",
        "authorization": "server_revalidated",
        "knowledge_trust": "reference_only",
        "tool_results_trust": "untrusted_data",
        "hidden_reasoning_sync": False,
        "max_tool_calls": (route.agent_client or {}).get("max_tool_calls", DEFAULT_MAX_TOOL_CALLS),
        "permission": route.permission,
    }


def build_profile(db: Session, route: Route) -> dict:
    profile = {
        "instructions": instructions(route),
        "knowledge": _knowledge_view(knowledge_settings(db, route)),
        "memory": memory_settings(route),
        "governance": governance(route),
    }
    # The revision names exactly what bootstrap shows of the workspace and its profile.
    revision = sha256_json({"schema": PROFILE_SCHEMA, "workspace": workspace(route), "profile": profile})
    return {"revision": revision, **profile}


def capabilities_summary(route: Route, projection: Projection) -> dict:
    counts = projection.counts()
    return {"revision": projection.revision, "authorized_total": counts["authorized_total"],
            "active_limit": active_tool_limit(route), "readonly": counts["readonly"],
            "writes": counts["writes"], "approval_required": counts["approval_required"]}


def bootstrap(db: Session, route: Route, projection: Projection) -> dict:
    return {
        "schema_version": PROFILE_SCHEMA,
        "workspace": workspace(route),
        "profile": build_profile(db, route),
        "capabilities": capabilities_summary(route, projection),
    }


def workspace_entry(db: Session, route: Route, projection: Projection) -> dict:
    return {
        **workspace(route),
        "profile": PROFILE_NAME,
        "permission": route.permission,
        "profile_revision": build_profile(db, route)["revision"],
        "capability_revision": projection.revision,
        "authorized_tool_count": len(projection.tools),
        "active_tool_limit": active_tool_limit(route),
    }
