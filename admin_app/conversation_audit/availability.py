"""What the database offers, read from the database itself: 057 gives archives (v1), 058 adds
cross-system member bindings (v2). The runtime never assumes: a hub set up `db upgrade --without
conversation-audit` (or `--without cross-binding`) runs in the matching mode until `--with`."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..errors import ApiError

_PROBE = text("""
SELECT to_regclass('bz_agent_conversation_archives') IS NOT NULL
       AND to_regclass('bz_agent_conversation_members') IS NOT NULL
       AND to_regclass('bz_agent_conversation_events') IS NOT NULL AS archives,
       (SELECT count(*) FROM pg_attribute
         WHERE NOT attisdropped AND (
               (attrelid = to_regclass('bz_agent_conversation_archives') AND attname = 'membership_version')
            OR (attrelid = to_regclass('bz_agent_conversation_members')
                AND attname IN ('client_app_id', 'route_key', 'client_name')))) = 4 AS bindings
""")


@dataclass(frozen=True)
class Availability:
    archives: bool
    cross_binding: bool


_FULL = Availability(archives=True, cross_binding=True)


def probe(db: Session) -> Availability:
    # Once a connection has seen every migration of the audit, nothing can add to it: that answer
    # is kept for the connection's life. Anything less is asked again, so an upgrade applied while
    # the hub runs is seen at once.
    info = db.connection().info
    known: object = info.get("conversation_audit")
    if known is _FULL:
        return _FULL
    row = db.execute(_PROBE).one()
    found = Availability(archives=bool(row.archives), cross_binding=bool(row.archives and row.bindings))
    if found == _FULL:
        info["conversation_audit"] = _FULL
    return found


def require_archives(db: Session) -> Availability:
    found = probe(db)
    if not found.archives:
        raise ApiError("conversation_audit_unavailable")
    return found
