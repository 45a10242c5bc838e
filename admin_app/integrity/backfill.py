"""Leaves for the records stored before the evidence log covered them (a hub upgraded across
migrations 082-085): conversation events (each message first given the salt its leaf commits
through), access-log rows, admin events, decided approvals and configuration-change rows.

Each kind is walked in its key's order (events by archive and sequence) in batches; a batch's rows
that have no leaf get one, with the formula the producers use (read back through
integrity.covered's loaders, so nothing is computed twice), and the batch commits on its own: a
run stopped half-way resumes where the leaves end, and a second run appends nothing. A row whose
loader finds it unverifiable (a message's text gone without a redaction) gets no leaf: it is
counted as a problem, since a leaf now would certify a record already damaged.

Redactions are not backfilled: they only exist since 085, each with its own leaf, and a
redaction without one is the sign of a forged row that the verifier must keep reporting."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, TEXT
from sqlalchemy.orm import Session

from ..config_audit.log import LEAF_KIND as CONFIG_CHANGE
from ..conversation_audit import evidence_rows as conversation_rows
from ..evidence import leaves
from ..evidence import log as evidence_log
from .covered import LOADERS

BATCH_DEFAULT = 5000
BATCH_MAX = 50000
# pg_advisory_xact_lock key ("evib"): two backfills take turns batch by batch, so the second one
# sees the first one's leaves and never appends a row twice.
BACKFILL_LOCK = 0x65766962

# Each kind's rows in key order after a cursor: (cursor, ref) pairs, `limit` of them.
# The refs are made by the same functions the producers use.
Walk = Callable[[Session, Any, int], list[tuple[Any, str]]]


def _events(db: Session, after: Any, limit: int) -> list[tuple[Any, str]]:
    archive, sequence = after or (uuid.UUID(int=0), -1)
    rows = db.execute(text("""
        SELECT archive_id, sequence FROM bz_agent_conversation_events
         WHERE (archive_id, sequence) > (:archive, :sequence)
         ORDER BY archive_id, sequence LIMIT :limit"""),
        {"archive": archive, "sequence": sequence, "limit": limit}).all()
    return [((a, s), leaves.event_ref(a, s)) for a, s in rows]


def _access(db: Session, after: Any, limit: int) -> list[tuple[Any, str]]:
    rows = db.execute(text("SELECT id, target FROM bz_access_log WHERE id > :after ORDER BY id LIMIT :limit"),
                      {"after": after or 0, "limit": limit}).all()
    return [(i, leaves.access_ref(i, target)) for i, target in rows]


def _admin_events(db: Session, after: Any, limit: int) -> list[tuple[Any, str]]:
    rows = db.scalars(text("SELECT id FROM bz_admin_events WHERE id > :after ORDER BY id LIMIT :limit"),
                      {"after": after or 0, "limit": limit}).all()
    return [(i, leaves.admin_event_ref(i)) for i in rows]


def _decisions(db: Session, after: Any, limit: int) -> list[tuple[Any, str]]:
    # Pending approvals have no decision to cover yet: theirs is appended when it is taken.
    rows = db.execute(text("""
        SELECT id FROM bz_tool_approvals WHERE decided_at IS NOT NULL AND id > :after
         ORDER BY id LIMIT :limit"""), {"after": after or uuid.UUID(int=0), "limit": limit}).all()
    return [(i, leaves.decision_ref(i)) for (i,) in rows]


def _config_changes(db: Session, after: Any, limit: int) -> list[tuple[Any, str]]:
    rows = db.scalars(text("SELECT id FROM bz_config_audit WHERE id > :after ORDER BY id LIMIT :limit"),
                      {"after": after or 0, "limit": limit}).all()
    return [(i, f"bz_config_audit:{i}") for i in rows]


WALKS: dict[str, Walk] = {
    leaves.EVENT: _events,
    leaves.ACCESS: _access,
    leaves.ADMIN_EVENT: _admin_events,
    leaves.DECISION: _decisions,
    CONFIG_CHANGE: _config_changes,
}

_EXISTING = text("SELECT ref FROM bz_evidence_leaves WHERE ref = ANY(:refs)").bindparams(
    bindparam("refs", type_=ARRAY(TEXT)))


@dataclass
class Counts:
    rows: int = 0        # rows walked
    appended: int = 0    # leaves appended
    salted: int = 0      # messages given a salt
    problems: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "appended": self.appended, "salted": self.salted,
                "problems": len(self.problems), "first_problems": self.problems[:10]}


def batch(db: Session, kind: str, after: Any, limit: int, counts: Counts) -> Any:
    """One batch of `kind` after the cursor, in the caller's transaction: leaves for its rows that
    have none. The next cursor, or None when the kind is done."""
    db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": BACKFILL_LOCK})
    walked = WALKS[kind](db, after, limit)
    if not walked:
        return None
    counts.rows += len(walked)
    have = set(db.scalars(_EXISTING, {"refs": [ref for _, ref in walked]}))
    missing = [ref for _, ref in walked if ref not in have]
    if missing:
        if kind == leaves.EVENT:
            counts.salted += conversation_rows.give_salts(db, missing)
        found = LOADERS[kind](db, missing)
        appending = []
        for ref in missing:
            data = found.get(ref)
            if data is None:  # deleted since it was walked
                continue
            if isinstance(data, str):
                counts.problems.append({"ref": ref, "problem": data})
                continue
            appending.append((kind, ref, data))
        if appending:
            evidence_log.append_leaves(db, appending)
            counts.appended += len(appending)
    return walked[-1][0] if len(walked) == limit else None


def run(sessions: Callable[[], Any], batch_size: int = BATCH_DEFAULT,
        kinds: tuple[str, ...] = tuple(WALKS)) -> dict[str, dict[str, Any]]:
    """Backfill every kind, each batch in a transaction of its own (`sessions()` gives a context
    manager of a session that commits on exit): {kind: counts}."""
    if not 1 <= batch_size <= BATCH_MAX:
        raise ValueError(f"the batch must be 1-{BATCH_MAX} rows")
    report = {}
    for kind in kinds:
        counts = Counts()
        for _ in _batches(sessions, kind, batch_size, counts):
            pass
        report[kind] = counts.as_dict()
    return report


def _batches(sessions: Callable[[], Any], kind: str, size: int, counts: Counts) -> Iterator[Any]:
    after: Any = None
    while True:
        with sessions() as db:
            after = batch(db, kind, after, size, counts)
        if after is None:
            return
        yield after
