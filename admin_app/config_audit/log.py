"""bz_config_audit: recording a change in the caller's transaction (so a rolled-back change
records nothing), the newest-first page, and the retention purge."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..evidence.log import append_leaf
from .changes import REMOVAL_KIND, diff, leaf_data, removal_data, removal_ref, settings_hash

CHANGE, PRUNED = "config_change", "audit_retention_pruned"
# Beyond Core (§G.1 leaves them out): the hub's pause and resume, migration 083.
PAUSED, RESUMED = "hub_paused", "hub_resumed"
# Session.info keys: changes staged for the caller to record, and "recorded already".
STAGED, WRITTEN = "bailing.config_audit.staged", "bailing.config_audit.written"
# How the purge's own entry reads in the list, beside the changes.
RETENTION_BY, PRUNE_METHOD, PRUNE_PATH = "retention", "PRUNE", "config-audit"
PATH_MAX = 2048
BY_MAX = 128
LEAF_KIND = "config_change"  # its leaves in the tamper-evident log (every event of this table)


def installed(db: Session) -> bool:
    """Whether migration 080 is applied: until it is, changes go unrecorded rather than fail."""
    return bool(db.scalar(text("SELECT to_regclass('bz_config_audit') IS NOT NULL")))


def _with_changes(db: Session) -> bool:
    """Whether migration 083's columns (hashes, diff, object) are there to write."""
    return bool(db.scalar(text("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                               "to_regclass('bz_config_audit') AND attname = 'diff' AND NOT attisdropped)")))


def _insert(db: Session, values: dict[str, Any]) -> dict[str, Any] | None:
    """One row, returned as stored, and its leaf in the tamper-evident log (evidence.log) in the
    same transaction."""
    row = _insert_row(db, values)
    if row is not None:
        _append_leaf(db, row)
    return row


def _append_leaf(db: Session, row: dict[str, Any]) -> None:
    """The row's leaf (changes.leaf_data): last in the transaction's work on this log, since the
    log's append lock is held until commit."""
    append_leaf(db, LEAF_KIND, f"bz_config_audit:{row['id']}", leaf_data(row))


def _insert_row(db: Session, values: dict[str, Any]) -> dict[str, Any] | None:
    """One row, returned as stored (its `ts` included, for changes.leaf_data)."""
    if not installed(db):
        return None
    values = {"e": CHANGE, "detail": None, "kind": None, "key": None, "bh": None, "ah": None, "diff": None,
              **values}
    values["by"], values["m"], values["p"] = (values["by"] or "?")[:BY_MAX], values["m"][:16], values["p"][:PATH_MAX]
    plain = values["kind"] is None and values["e"] in (CHANGE, PRUNED)  # what 080 can hold
    if not plain and not _with_changes(db):  # before migration 083: a plain change, or nothing
        if values["e"] != CHANGE:
            return None
        values.update(kind=None, bh=None, ah=None, diff=None)
        plain = True
    if plain:
        row = db.execute(text("INSERT INTO bz_config_audit (event, actor, method, path, detail) "
                              "VALUES (:e, :by, :m, :p, CAST(:detail AS jsonb)) RETURNING *"), values).one()
        return dict(row._mapping)
    row = db.execute(text(
        "INSERT INTO bz_config_audit (event, actor, method, path, detail, object_kind, object_key, "
        "before_hash, after_hash, diff) VALUES (:e, :by, :m, :p, CAST(:detail AS jsonb), :kind, :key, "
        ":bh, :ah, CAST(:diff AS jsonb)) RETURNING *"), values).one()
    db.info[WRITTEN] = True
    return dict(row._mapping)


def record_object(db: Session, by: str, method: str, path: str, kind: str, key: str,
                  before: dict[str, Any] | None, after: dict[str, Any] | None,
                  event: str = CHANGE) -> dict[str, Any] | None:
    """A change of one object, with the hashes of its settings (changes.snapshot) before and after
    (None: created, resp. removed) and their diff; nothing when the settings are the same."""
    if before is not None and after is not None and before == after:
        return None
    return _insert(db, {"e": event, "by": by, "m": method, "p": path, "kind": kind, "key": str(key)[:256],
                        "bh": settings_hash(before), "ah": settings_hash(after),
                        "diff": json.dumps(diff(before, after))})


def stage(db: Session, kind: str, key: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    """A change made by a service that does not know who asked nor through which door: the
    caller's record_change (the admin API's hook, a console view, a command) records it with
    its actor, method and path, in the same transaction."""
    db.info.setdefault(STAGED, []).append((kind, key, before, after))


def record_change(db: Session, by: str, method: str, path: str) -> None:
    """A change as Core records it ({by, method, path}); the objects staged in this transaction,
    if any, each as a row of its own with what changed. When the service recorded the change
    itself already (record_object), nothing more."""
    staged = db.info.pop(STAGED, None)
    if staged:
        for kind, key, before, after in staged:
            record_object(db, by, method, path, kind, key, before, after)
        return
    if db.info.pop(WRITTEN, False):
        return
    _insert(db, {"by": by, "m": method, "p": path})


EXTRA = ("object_kind", "object_key", "before_hash", "after_hash", "diff")
_080 = "id, ts, event, actor, method, path, detail"
_083 = _080 + ", object_kind, object_key, before_hash, after_hash, diff"
_NEWEST = " FROM bz_config_audit ORDER BY ts DESC, id DESC LIMIT :n OFFSET :offset"
_AFTER = " FROM bz_config_audit WHERE (ts, id) < (:ts, :id) ORDER BY ts DESC, id DESC LIMIT :n OFFSET :offset"
# (columns of 083?, after a key?): the statement
_READS = {(cols, keyed): text("SELECT " + (_083 if cols else _080) + (_AFTER if keyed else _NEWEST))
          for cols in (False, True) for keyed in (False, True)}


def page(db: Session, limit: int, offset: int) -> list[dict[str, Any]]:
    """Core's items {ts, by, method, path} (and the purge's detail); beyond Core, as extra keys
    where a row has them: the event when it is a pause or resume, and what changed (EXTRA)."""
    if not installed(db):
        return []
    rows = db.execute(_READS[_with_changes(db), False], {"n": limit, "offset": offset}).all()
    items = []
    for row in rows:
        values = row._mapping
        item: dict[str, Any] = {"ts": iso(row.ts), "by": row.actor or "?", "method": row.method or "?",
                                "path": row.path}
        if row.detail is not None:  # the purge's entry says what it cut
            item["detail"] = row.detail
        if row.event in (PAUSED, RESUMED):
            item["event"] = row.event
        item.update({k: values[k] for k in EXTRA if k in values and values[k] is not None})
        items.append(item)
    return items


def cutoff_for(days: float, now: datetime | None = None) -> datetime | None:
    """The moment before which rows go; None when `days` keeps everything (0, or beyond any date)."""
    if not (days > 0 and math.isfinite(days)):
        return None
    try:
        return (now or utc_now()) - timedelta(days=days)
    except OverflowError:  # further back than any timestamp: nothing is old enough
        return None


def prune(db: Session, days: float, now: datetime | None = None) -> dict[str, Any]:
    """Delete this log's rows older than `days` (idempotent: several processes may run it) and,
    when any went, record the purge itself. 0 keeps everything and touches nothing."""
    cutoff = cutoff_for(days, now)
    if cutoff is None or not installed(db):
        return {"retention_days": days, "cutoff": None, "deleted": 0}
    ranges = [[lo, hi] for lo, hi, _ in db.execute(_PURGE, {"cutoff": cutoff})]
    deleted = sum(hi - lo + 1 for lo, hi in ranges)  # each range is ids that all went
    report = {"retention_days": days, "cutoff": iso(cutoff), "deleted": deleted}
    if deleted:
        entry = _insert(db, {"e": PRUNED, "by": RETENTION_BY, "m": PRUNE_METHOD, "p": PRUNE_PATH,
                             "detail": json.dumps(report)})
        if entry is not None:
            _record_removal(db, entry["id"], cutoff, ranges)
    return report


# The rows older than the cutoff, deleted; answered as ranges of consecutive ids (gaps and islands).
_PURGE = text("WITH gone AS (DELETE FROM bz_config_audit WHERE ts < :cutoff RETURNING id), "
              "islands AS (SELECT id, id - row_number() OVER (ORDER BY id) AS island FROM gone) "
              "SELECT min(id), max(id), count(*) FROM islands GROUP BY island ORDER BY 1")


def _record_removal(db: Session, purge_id: int, cutoff: datetime, ranges: list[list[int]]) -> None:
    """What the purge removed, under a leaf of its own (changes.removal_data), so the verifier
    tells these rows from ones removed behind the log's back (evidence_rows.evidence_of)."""
    if not db.scalar(text("SELECT to_regclass('bz_config_audit_removals') IS NOT NULL")):
        return
    db.execute(text("INSERT INTO bz_config_audit_removals (purge_id, cutoff, ranges) "
                    "VALUES (:id, :cutoff, CAST(:ranges AS jsonb))"),
               {"id": purge_id, "cutoff": cutoff, "ranges": json.dumps(ranges)})
    append_leaf(db, REMOVAL_KIND, removal_ref(purge_id), removal_data(purge_id, cutoff, ranges))


def newest(db: Session, after: tuple[datetime, int] | None, limit: int) -> tuple[list[dict[str, Any]], tuple | None]:
    """The console's page: rows newest first after the key (ts, id) of the last one shown, and
    the key to continue from (None at the end)."""
    if not installed(db):
        return [], None
    rows = db.execute(_READS[_with_changes(db), after is not None],
                      {"ts": after[0] if after else None, "id": after[1] if after else None,
                       "n": limit + 1, "offset": 0}).all()
    items = [dict(r._mapping) for r in rows[:limit]]
    for item in items:
        item["ts"], item["key"] = iso(item["ts"]), (item["ts"], item["id"])
    return items, items[-1]["key"] if len(rows) > limit else None
