"""The route gate: which routes a session may use, and why not.

Checks run in a fixed order and the first failure answers, with a code the official client
recognises:

    1. the route key is malformed or `auto`                    400 invalid_route
    2. not in the client's or the session's allowed_routes     403 route_not_allowed
    3. the route is missing or disabled                        404 route_unavailable
    4. (tool surface) no enabled `tools.agent_direct`          403 agent_direct_disabled
    5. the route's audience rejects the session's principal    403 audience_not_allowed
    6. (runtime surface) no enabled `agent_client`             403 agent_client_disabled

A route that is not allowed is refused before its existence is looked at, so a session learns
nothing about routes outside its lists. The `system` surface (system-info) needs neither
`agent_client` nor `agent_direct`. The runtime surface does not need `agent_direct`: a
knowledge-only workspace bootstraps and prepares turns with an empty business tool catalog.
"""
from __future__ import annotations

from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import ApiError
from ..validation import RESERVED_ROUTES, RESOURCE_KEY
from .models import AgentSession, ClientApp, Route

Surface = Literal["runtime", "tools", "system"]


def _matches(allowed: list, value) -> bool:
    if not allowed:
        return True
    if value is None:
        return False
    values = value if isinstance(value, list) else [value]
    return any(v in allowed or "*" in allowed for v in values)


def audience_allows(policy: dict, principal: dict | None) -> bool:
    """Each non-empty list must match the principal ('*' matches any present value); without a
    principal only an `anonymous` route admits the session; a disabled gate admits everyone."""
    return audience_refusal(policy, principal) is None


def audience_refusal(policy: dict, principal: dict | None) -> str | None:
    """Why the audience gate refuses `principal`, in Core's words (the Client API's `reason`,
    checked in Core's order), or None when it admits it."""
    if not policy.get("enabled", False):
        return None
    if principal is None:
        return None if policy.get("anonymous", False) else "route_requires_principal"
    for key, value, reason in (("tenants", principal.get("tenant"), "tenant_not_allowed"),
                               ("roles", principal.get("roles") or None, "role_not_allowed"),
                               ("ids", principal.get("id"), "principal_not_allowed"),
                               ("audiences", principal.get("audience"), "audience_not_allowed")):
        if not _matches(policy.get(key, []), value):
            return reason
    return None


def agent_client_enabled(route: Route) -> bool:
    return bool((route.agent_client or {}).get("enabled", False))


def agent_direct_enabled(route: Route) -> bool:
    return bool(((route.tools or {}).get("agent_direct") or {}).get("enabled", False))


def surface_enabled(route: Route, surface: Surface) -> bool:
    if surface == "runtime":
        return agent_client_enabled(route)
    if surface == "tools":
        return agent_direct_enabled(route)
    return True


def well_formed(route_key) -> bool:
    return isinstance(route_key, str) and RESOURCE_KEY.fullmatch(route_key) is not None \
        and route_key not in RESERVED_ROUTES


def _listed(allowed: list[str] | None, route_key: str) -> bool:
    allowed = allowed or []
    return route_key in allowed or "*" in allowed


def _client(db: Session, session: AgentSession) -> ClientApp | None:
    return db.scalar(select(ClientApp).where(ClientApp.app_id == session.client_app_id))


def refusal(route: Route | None, session: AgentSession, client: ClientApp | None, route_key,
            surface: Surface) -> ApiError | None:
    """The gate's answer for this route, or None when the session may use it."""
    if not well_formed(route_key):
        return ApiError("invalid_route")
    if client is None or not _listed(client.allowed_routes, route_key) \
            or not _listed(session.allowed_routes, route_key):
        return ApiError("route_not_allowed")
    if route is None or not route.enabled:
        return ApiError("route_unavailable")
    if surface == "tools" and not agent_direct_enabled(route):
        return ApiError("agent_direct_disabled")
    if not audience_allows(route.audience or {}, session.principal):
        return ApiError("audience_not_allowed")
    if surface == "runtime" and not agent_client_enabled(route):
        return ApiError("agent_client_disabled")
    return None


def resolve_route(db: Session, session: AgentSession, route_key: str, surface: Surface) -> Route:
    """The route when the session may use it on this surface; otherwise the gate's refusal."""
    client = _client(db, session)
    route = db.scalar(select(Route).where(Route.route_key == route_key)) if well_formed(route_key) else None
    refused = refusal(route, session, client, route_key, surface)
    if refused is not None:
        raise refused
    assert route is not None  # refusal() refuses a route that does not exist
    return route


def workspace_routes(db: Session, session: AgentSession, surface: Surface) -> list[Route]:
    """Every route that passes the whole gate for this surface, by key; the others are skipped."""
    client = _client(db, session)
    if client is None:
        return []
    query = select(Route).order_by(Route.route_key)
    for allowed in (client.allowed_routes or [], session.allowed_routes or []):
        if "*" not in allowed:
            query = query.where(Route.route_key.in_(allowed))
    routes = db.scalars(query)
    return [r for r in routes if refusal(r, session, client, r.route_key, surface) is None]
