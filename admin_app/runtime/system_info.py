"""What a workspace says about the business system behind it (bailing.agent-system-info.v1).

Product positioning only: never an instruction, a grant or a tool. It reads no request body,
lists no other route and loads no tool; the description comes from the route's
`agent_client.system_info`, and its revision moves exactly when that description does.
"""
from __future__ import annotations

from ..canonical import sha256_json
from ..identity.models import AgentSession, Route
from ..identity.workspace import agent_client_enabled, agent_direct_enabled

SCHEMA = "bailing.agent-system-info.v1"


def _described(route: Route) -> dict | None:
    configured = (route.agent_client or {}).get("system_info")
    if not configured:
        return None
    return {"name": configured["name"], "summary": configured["summary"],
            "domains": list(configured.get("domains", [])),
            "boundaries": list(configured.get("boundaries", []))}


def _unavailable_reason(route: Route) -> str | None:
    if not agent_client_enabled(route):
        return "agent_client_disabled"
    if not agent_direct_enabled(route):
        return "agent_direct_disabled"
    return None


def system_info(session: AgentSession, route: Route) -> dict:
    system = _described(route)
    reason = _unavailable_reason(route)
    body = {
        "schema_version": SCHEMA,
        "binding": {"client_app_id": session.client_app_id, "session_id": str(session.id),
                    "workspace": route.route_key},
        "metadata_status": "configured" if system is not None else "missing",
        "revision": sha256_json({"schema": SCHEMA, "system": system}) if system is not None else None,
        "system": system,
        "tool_status": "not_loaded",
        "availability": "unavailable" if reason else "unknown",
    }
    if reason:
        body["unavailable_reason"] = reason
    return body
