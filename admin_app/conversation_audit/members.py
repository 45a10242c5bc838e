"""Revalidating an archive's frozen members, and locking what a mutation depends on.

Every mutation of an archive locks the archive row (FOR UPDATE) and the client, route and session
rows of all its members (FOR SHARE) until commit, so a revocation or configuration change waits
for the write, or the write sees it. A member that fails any check refuses the whole group write:
no member is ever dropped or replaced.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..errors import ApiError
from ..identity.models import AgentSession, ClientApp, Route
from ..identity.sessions import identity_hash
from ..identity.workspace import audience_allows


@dataclass(frozen=True)
class Binding:
    """Who a member is and where it speaks from (v2 records it; v1 takes the header's)."""

    session_id: str
    client_app_id: str
    route_key: str
    frozen_identity: str | None = None  # the identity hash frozen at confirmation


def authorization_invalid(message: str = "A member's authorization or route is no longer valid.") -> ApiError:
    return ApiError(403, "conversation_audit_authorization_invalid", message)


def lock_and_check(db: Session, bindings: list[Binding]) -> dict[str, AgentSession]:
    """Lock and revalidate every binding; return the live sessions by id, or raise 403."""
    session_ids = sorted({b.session_id for b in bindings})
    app_ids = sorted({b.client_app_id for b in bindings})
    route_keys = sorted({b.route_key for b in bindings})
    sessions = {str(s.id): s for s in db.scalars(
        select(AgentSession).where(AgentSession.id.in_(session_ids))
        .order_by(AgentSession.id).with_for_update(read=True))}
    clients = {c.app_id: c for c in db.scalars(
        select(ClientApp).where(ClientApp.app_id.in_(app_ids))
        .order_by(ClientApp.app_id).with_for_update(read=True))}
    routes = {r.route_key: r for r in db.scalars(
        select(Route).where(Route.route_key.in_(route_keys))
        .order_by(Route.route_key).with_for_update(read=True))}
    now = utc_now()
    for b in bindings:
        session, client, route = sessions.get(b.session_id), clients.get(b.client_app_id), routes.get(b.route_key)
        if session is None or client is None or route is None:
            raise authorization_invalid()
        if session.revoked_at is not None or session.refresh_expires_at <= now:
            raise authorization_invalid()
        if session.client_app_id != b.client_app_id or not client.enabled:
            raise authorization_invalid()
        if not (route.enabled and b.route_key in client.allowed_routes
                and b.route_key in session.allowed_routes
                and audience_allows(route.audience or {}, session.principal)):
            raise authorization_invalid()
        if b.frozen_identity is not None and b.frozen_identity != live_identity(session):
            raise authorization_invalid()
    return sessions


def live_identity(session: AgentSession) -> str:
    return identity_hash(session.client_app_id, session.principal, session.on_behalf_of)
