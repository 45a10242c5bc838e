"""The retention purge: redact every message whose policy's time is up, archive by archive,
skipping the archives a legal hold covers, and record the run (bz_retention_runs).

A message expires when its event's created_at is before now - keep_days (of 24 h) of the policy
that applies to its archive (the archive header's client_app_id and route_key: the route's own
policy, else the app's `*`; a `keep` policy keeps). The archives are walked in key order, their
expired messages read on the events' primary key, at most BATCH messages to a transaction; each
transaction checks the holds of its archives under holds.HOLDS_LOCK (shared) and adds to the
run's counters, so a run that stops half way has recorded what it did. Idempotent (a redacted
message has no text left to select) and safe with several processes: a run holds RUN_LOCK for its
whole length (a second one is told, or skips), and redaction locks the events it removes."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..conversation_audit.availability import probe
from ..conversation_audit.redaction import redact
from ..db import Database
from ..errors import ApiError
from . import holds

BATCH = 1000
ARCHIVE_PAGE = 500
RUN_LOCK = 0x72657470  # "retp": a session-level advisory lock held for the whole run
SCHEDULER = "scheduler"

# The archives an expiring policy applies to, in key order: the route's own policy, or (`*`)
# the app's where the route has none.
_ARCHIVES = text("""
    SELECT a.id, p.id AS policy_id, p.keep_days
      FROM bz_agent_conversation_archives a
      JOIN bz_retention_policies p
        ON p.client_app_id = a.client_app_id AND p.keep_days IS NOT NULL
       AND (p.route_key = a.route_key
            OR (p.route_key = '*' AND NOT EXISTS (
                  SELECT 1 FROM bz_retention_policies o
                   WHERE o.client_app_id = a.client_app_id AND o.route_key = a.route_key)))
     WHERE a.id > :after
     ORDER BY a.id LIMIT :n""")
# One archive's expired messages that still have their text, after a sequence.
_EXPIRED = text("""
    SELECT sequence FROM bz_agent_conversation_events
     WHERE archive_id = :id AND sequence > :after AND created_at < :cutoff
       AND kind IN ('user_message', 'assistant_message') AND content IS NOT NULL
     ORDER BY sequence LIMIT :n""")
_POLICIES = text("SELECT id, client_app_id, route_key, keep_days FROM bz_retention_policies "
                 "WHERE keep_days IS NOT NULL ORDER BY id")
_ZERO = uuid.UUID(int=0)


@dataclass(frozen=True)
class Applies:
    archive_id: uuid.UUID
    policy_id: int
    cutoff: datetime


@dataclass
class Tally:
    redacted: int = 0
    archives: set[uuid.UUID] = field(default_factory=set)
    held: set[uuid.UUID] = field(default_factory=set)
    by_policy: dict[int, int] = field(default_factory=dict)


def basis_ref(run_id: int, policy_id: int) -> str:
    """What a redaction of the purge names: its run and the policy it applied."""
    return f"run:{run_id}/policy:{policy_id}"


def view(row: Any) -> dict[str, Any]:
    return {"id": row.id, "actor": row.actor, "started_at": iso(row.started_at), "finished_at": iso(row.finished_at),
            "redacted": row.redacted, "archives": row.archives, "held": row.held, "detail": row.detail}


def list_runs(db: Session, limit: int) -> list[dict[str, Any]]:
    rows = db.execute(text("SELECT * FROM bz_retention_runs ORDER BY started_at DESC, id DESC LIMIT :n"), {"n": limit})
    return [view(r) for r in rows]


def run(database: Database, actor: str, now: datetime | None = None, *, batch: int = BATCH,
        scheduled: bool = False) -> dict[str, Any] | None:
    """One purge now, recorded under `actor`. Another run under way: refused (409), or for the
    scheduler skipped (None); so is a scheduled run with no policy that expires anything."""
    now = now or utc_now()
    with database.engine.connect() as keeper:
        # Held by this connection, not a transaction: the run spans many.
        locked = keeper.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": RUN_LOCK}).scalar_one()
        keeper.commit()  # the lock stays; the connection does not sit in a transaction meanwhile
        if not locked:
            if scheduled:
                return None
            raise ApiError("retention_run_busy")
        try:
            return _run(database, actor, now, batch, scheduled)
        finally:
            keeper.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": RUN_LOCK})
            keeper.commit()


def _applying(database: Database, now: datetime) -> Iterator[Applies]:
    """Every archive an expiring policy applies to, with its cutoff, a page at a time."""
    after = _ZERO
    while True:
        with database.session() as db:
            page = db.execute(_ARCHIVES, {"after": after, "n": ARCHIVE_PAGE}).all()
        for row in page:
            yield Applies(row.id, row.policy_id, now - timedelta(days=row.keep_days))
        if len(page) < ARCHIVE_PAGE:
            return
        after = page[-1].id


def _run(database: Database, actor: str, now: datetime, batch: int, scheduled: bool) -> dict[str, Any] | None:
    with database.session() as db:
        if not probe(db).archives:
            if scheduled:
                return None
            raise ApiError("conversation_audit_unavailable")
        policies = db.execute(_POLICIES).all()
        if scheduled and not policies:
            return None
        run_id = db.execute(text("INSERT INTO bz_retention_runs (actor, started_at) VALUES (:actor, :now) "
                                 "RETURNING id"), {"actor": actor, "now": now}).scalar_one()
    tally = Tally()
    archives = _applying(database, now)
    current, after = next(archives, None), 0
    while current is not None:
        with database.session() as db:
            holds.lock_shared(db)  # no hold is placed while this transaction redacts
            gathered: list[tuple[Applies, int]] = []
            while current is not None and len(gathered) < batch:
                # Each archive once a transaction (one going on from the last one too).
                if holds.covering(db, [current.archive_id]):
                    if db.execute(_EXPIRED, {"id": current.archive_id, "after": 0, "cutoff": current.cutoff,
                                             "n": 1}).first() is not None:
                        tally.held.add(current.archive_id)
                    current, after = next(archives, None), 0
                    continue
                wanted = batch - len(gathered)
                found = db.scalars(_EXPIRED, {"id": current.archive_id, "after": after, "cutoff": current.cutoff,
                                              "n": wanted}).all()
                gathered += [(current, s) for s in found]
                if len(found) < wanted:
                    current, after = next(archives, None), 0
                else:  # this archive goes on in the next transaction, where its holds are read again
                    after = found[-1]
                    break
            done = 0
            for policy_id in sorted({a.policy_id for a, _ in gathered}):
                mine = [(a.archive_id, s) for a, s in gathered if a.policy_id == policy_id]
                result = redact(db, mine, "retention", basis_ref(run_id, policy_id), actor)
                tally.by_policy[policy_id] = tally.by_policy.get(policy_id, 0) + result.count
                done += result.count
            tally.redacted += done
            tally.archives |= {a.archive_id for a, _ in gathered}
            if done:
                db.execute(text("UPDATE bz_retention_runs SET redacted = redacted + :n WHERE id = :id"),
                           {"n": done, "id": run_id})
    detail = {"now": iso(now), "policies": [
        {"id": p.id, "client_app_id": p.client_app_id, "route_key": p.route_key, "keep_days": p.keep_days,
         "cutoff": iso(now - timedelta(days=p.keep_days)), "redacted": tally.by_policy.get(p.id, 0)}
        for p in policies]}
    with database.session() as db:
        row = db.execute(text("""
            UPDATE bz_retention_runs SET finished_at = now(), archives = :archives, held = :held,
                   detail = CAST(:detail AS jsonb)
             WHERE id = :id RETURNING *"""),
            {"archives": len(tally.archives), "held": len(tally.held), "detail": json.dumps(detail),
             "id": run_id}).one()
        return view(row)
