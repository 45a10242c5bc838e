"""The transactional outbox: one delivery row per matching enabled channel, written in the
transaction that creates the approval. A request that rolls back notifies nobody; one that
commits cannot lose its notifications to a crash, since they are rows of the same commit."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from .bell import BELL

if TYPE_CHECKING:
    from ..invocations.models import Approval

# A channel fires for an approval when (no routes or its route listed) and (no tools or its
# tool listed). The ids are made here, by the server, in one statement whatever the count.
_ENQUEUE = text("""
    INSERT INTO bz_approval_deliveries (id, approval_id, channel)
    SELECT gen_random_uuid(), :approval, c.name
    FROM bz_approval_channels AS c
    WHERE c.enabled
      AND (cardinality(c.routes) = 0 OR CAST(:route AS text) = ANY (c.routes))
      AND (cardinality(c.tools) = 0 OR CAST(:tool AS text) = ANY (c.tools))
""")


def enqueue(db: Session, approval: Approval) -> int:
    """Queue the notifications of a new approval in `db`'s transaction; how many were queued.
    Flushes first: the deliveries refer to the approval's row (and its number is then set)."""
    db.flush()
    result = db.execute(_ENQUEUE, {"approval": approval.id, "route": approval.route_key,
                                   "tool": approval.tool})
    queued: int = getattr(result, "rowcount", 0) or 0
    if queued and not event.contains(db, "after_commit", _ring):
        # Rung only when a transaction of this session commits: a rollback leaves nothing to
        # send. (A later commit of the same session rings again: a spare wake costs one query.)
        event.listen(db, "after_commit", _ring)
    return queued


def _ring(_session: Session) -> None:
    BELL.ring()
