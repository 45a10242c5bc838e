"""Which routes a session may use: the workspace.

Workspace = client allowed_routes ∩ session allowed_routes ∩ enabled, audience-compatible routes.
The Runtime surface additionally needs `agent_client.enabled`; the business-tool surface needs
`tools.agent_direct.enabled`. Any route outside it is answered like a route that does not exist.
"""
from __future__ import annotations

from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import ApiError
from ..validation import RESOURCE_KEY
from .models import AgentSession, ClientApp, Route

Surface = Literal["runtime", "tools"]


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
    if not policy.get("enabled", False):
        return True
    if principal is None:
        return bool(policy.get("anonymous", False))
    return (_matches(policy.get("ids", []), principal.get("id"))
            and _matches(policy.get("tenants", []), principal.get("tenant"))
            and _matches(policy.get("roles", []), principal.get("roles") or None)
            and _matches(policy.get("audiences", []), principal.get("audience")))


def surface_enabled(route: Route, surface: Surface) -> bool:
    if surface == "runtime":
        return bool((route.agent_client or {}).get("enabled", False))
    return bool(((route.tools or {}).get("agent_direct") or {}).get("enabled", False))


def route_usable(route: Route, session: AgentSession, client: ClientApp) -> bool:
    return (route.enabled
            and route.route_key in client.allowed_routes
            and route.route_key in session.allowed_routes
            and audience_allows(route.audience or {}, session.principal))


def workspace_routes(db: Session, session: AgentSession, surface: Surface) -> list[Route]:
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == session.client_app_id))
    if client is None:
        return []
    keys = sorted(set(client.allowed_routes) & set(session.allowed_routes))
    routes = db.scalars(select(Route).where(Route.route_key.in_(keys)).order_by(Route.route_key))
    return [r for r in routes if route_usable(r, session, client) and surface_enabled(r, surface)]


def resolve_route(db: Session, session: AgentSession, route_key: str, surface: Surface) -> Route:
    """The route when it is in the session's workspace for this surface; otherwise the same 404
    whether the route is missing, disabled, not allowed or outside the audience."""
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == session.client_app_id))
    # A key that cannot name a route (a NUL byte would even fail the query) is simply not found.
    well_formed = isinstance(route_key, str) and RESOURCE_KEY.fullmatch(route_key) is not None
    route = db.scalar(select(Route).where(Route.route_key == route_key)) if well_formed else None
    if client is None or route is None or not route_usable(route, session, client) \
            or not surface_enabled(route, surface):
        raise ApiError(404, "workspace_not_found", "No such workspace for this session.")
    return route
