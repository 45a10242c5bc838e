"""The runtime profile a workspace shows a local agent (bailing.agent-runtime-profile.v1).

Only `target_config.system_prompt` and `agent_client.instructions` are taken from the route's
prompts; credentials, model settings, other target_config fields and provider URLs never leave.
"""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..canonical import sha256_json
from ..catalog.projection import Projection
from ..identity.models import Route
from .models import KnowledgeDocument

ACTIVE_TOOL_LIMIT = 8

MEMORY_DEFAULTS = {"recent_messages": 12, "recent_budget_chars": 8000, "per_message_chars": 2000,
                   "summary_enabled": False, "summary_max_chars": 1200}
KNOWLEDGE_DEFAULTS = {"enabled": False, "mode": "chunk", "top_k": 5, "max_docs": 4, "page_boost": False}
DEFAULT_MAX_TOOL_CALLS = 5


def instructions(route: Route) -> str:
    parts = []
    prompt = (route.target_config or {}).get("system_prompt")
    if isinstance(prompt, str) and prompt.strip():
        parts.append(prompt.strip())
    extra = (route.agent_client or {}).get("instructions")
    if isinstance(extra, str) and extra.strip():
        parts.append(extra.strip())
    return "\n\n".join(parts)


def memory_settings(route: Route) -> dict:
    return {**MEMORY_DEFAULTS, **((route.agent_client or {}).get("memory") or {})}


def knowledge_settings(db: Session, route: Route) -> dict:
    configured = {**KNOWLEDGE_DEFAULTS, **((route.agent_client or {}).get("knowledge") or {})}
    sources = db.scalar(select(func.count()).select_from(KnowledgeDocument)
                        .where(KnowledgeDocument.route_key == route.route_key)) or 0
    return {"enabled": configured["enabled"], "sources": sources, "mode": configured["mode"],
            "top_k": configured["top_k"], "max_docs": configured["max_docs"],
            "page_boost": configured["page_boost"]}


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
        "memory": memory_settings(route),
        "knowledge": knowledge_settings(db, route),
        "governance": governance(route),
    }
    # The revision names exactly what the profile shows, so it moves when and only when that does.
    return {"revision": sha256_json(profile), **profile}


def capabilities_summary(projection: Projection) -> dict:
    return {"revision": projection.revision, **_with_active_limit(projection.counts())}


def _with_active_limit(counts: dict) -> dict:
    return {"authorized_total": counts["authorized_total"], "active_limit": ACTIVE_TOOL_LIMIT,
            "readonly": counts["readonly"], "writes": counts["writes"],
            "approval_required": counts["approval_required"]}


def bootstrap(db: Session, route: Route, projection: Projection) -> dict:
    return {
        "schema_version": "bailing.agent-runtime-profile.v1",
        "workspace": {"route": route.route_key, "name": route.name, "description": route.description},
        "profile": build_profile(db, route),
        "capabilities": capabilities_summary(projection),
    }
