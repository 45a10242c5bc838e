"""Revalidating an archive's frozen members, and locking what a mutation depends on.

Every mutation of an archive locks the archive row (FOR UPDATE) and the client, route and session
rows of all its members (FOR SHARE) until commit, so a revocation or configuration change waits
for the write, or the write sees it. A member that fails any check refuses the whole group write:
no member is ever dropped or replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..db import pipelined
from ..errors import ApiError
from ..identity.sessions import identity_hash
from ..identity.workspace import audience_allows


@dataclass(frozen=True)
class Binding:
    """Who a member is and where it speaks from (v2 records it; v1 takes the header's)."""

    session_id: str
    client_app_id: str
    route_key: str
    frozen_identity: str | None = None  # the identity hash frozen at confirmation


def authorization_invalid() -> ApiError:
    return ApiError("conversation_audit_authorization_invalid")


# Share locks in a fixed order (sessions, client apps, routes; each by key), sent together.
# `{keys}` is a subquery giving the keys to lock.
_LOCKS = (
    """SELECT id, client_app_id, principal, on_behalf_of, allowed_routes, revoked_at,
              refresh_expires_at
         FROM bz_agent_sessions WHERE id IN ({keys}) ORDER BY id FOR SHARE""",
    """SELECT app_id, enabled, allowed_routes
         FROM bz_client_apps WHERE app_id IN ({keys}) ORDER BY app_id FOR SHARE""",
    """SELECT route_key, enabled, audience
         FROM bz_routes WHERE route_key IN ({keys}) ORDER BY route_key FOR SHARE""",
)


def locks_for_bindings(bindings: list[Binding]) -> list[tuple[str, dict[str, Any]]]:
    """The share-lock statements for these bindings (an archive being created)."""
    keys = ((sorted({b.session_id for b in bindings}), "uuid"),
            (sorted({b.client_app_id for b in bindings}), "text"),
            (sorted({b.route_key for b in bindings}), "text"))
    return [(sql.format(keys=f"SELECT unnest(%(keys)s::{kind}[])"), {"keys": k})
            for sql, (k, kind) in zip(_LOCKS, keys)]


def locks_for_archive(archive_id: Any, cross_binding: bool) -> list[tuple[str, dict[str, Any]]]:
    """The same statements for the members of a stored archive, whose keys come from the
    database: sent in the round trip that locks the archive row, after that lock."""
    members = "bz_agent_conversation_members m JOIN bz_agent_conversation_archives a ON a.id = m.archive_id"
    own = "m.{0}" if cross_binding else "NULL"
    keys = ("SELECT session_id FROM bz_agent_conversation_members WHERE archive_id = %(id)s",
            f"SELECT coalesce({own.format('client_app_id')}, a.client_app_id) FROM {members} WHERE a.id = %(id)s",  # noqa: S608 - constant identifiers, bound values
            f"SELECT coalesce({own.format('route_key')}, a.route_key) FROM {members} WHERE a.id = %(id)s")  # noqa: S608 - constant identifiers, bound values
    return [(sql.format(keys=k), {"id": archive_id}) for sql, k in zip(_LOCKS, keys)]


def check_locked(bindings: list[Binding], found: list[list[Any]]) -> dict[str, Any]:
    """Revalidate every binding against the rows its share locks returned (in `_LOCKS` order);
    return the live sessions (rows) by id, or raise 403. The rows were read under the locks, so a
    revocation committed just before is seen."""
    sessions = {str(r.id): r for r in found[0]}
    clients = {r.app_id: r for r in found[1]}
    routes = {r.route_key: r for r in found[2]}
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


def lock_and_check(db: Session, bindings: list[Binding]) -> dict[str, Any]:
    """Lock and revalidate every binding; return the live sessions (rows) by id, or raise 403."""
    return check_locked(bindings, pipelined(db, *locks_for_bindings(bindings)))


def live_identity(session: Any) -> str:
    """The identity hash of a session (an AgentSession or a locked row of one)."""
    return identity_hash(session.client_app_id, session.principal, session.on_behalf_of)
