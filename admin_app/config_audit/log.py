"""bz_config_audit: recording a change in the caller's transaction (so a rolled-back change
records nothing), the newest-first page, and the retention purge."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, text
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now

CHANGE, PRUNED = "config_change", "audit_retention_pruned"
# How the purge's own entry reads in the list, beside the changes.
RETENTION_BY, PRUNE_METHOD, PRUNE_PATH = "retention", "PRUNE", "config-audit"
PATH_MAX = 2048
BY_MAX = 128


def installed(db: Session) -> bool:
    """Whether migration 080 is applied: until it is, changes go unrecorded rather than fail."""
    return bool(db.scalar(text("SELECT to_regclass('bz_config_audit') IS NOT NULL")))


def record_change(db: Session, by: str, method: str, path: str) -> None:
    if not installed(db):
        return
    db.execute(text("INSERT INTO bz_config_audit (event, actor, method, path) VALUES (:e, :by, :m, :p)"),
               {"e": CHANGE, "by": (by or "?")[:BY_MAX], "m": method[:16], "p": path[:PATH_MAX]})


def page(db: Session, limit: int, offset: int) -> list[dict[str, Any]]:
    if not installed(db):
        return []
    rows = db.execute(text("SELECT ts, actor, method, path, detail FROM bz_config_audit "
                           "ORDER BY ts DESC, id DESC LIMIT :limit OFFSET :offset"),
                      {"limit": limit, "offset": offset}).all()
    items = []
    for ts, by, method, path, detail in rows:
        item: dict[str, Any] = {"ts": iso(ts), "by": by or "?", "method": method or "?", "path": path}
        if detail is not None:  # the purge's entry says what it cut
            item["detail"] = detail
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
    result = db.execute(text("DELETE FROM bz_config_audit WHERE ts < :cutoff"), {"cutoff": cutoff})
    assert isinstance(result, CursorResult)  # a DELETE's result, which counts its rows
    deleted = result.rowcount
    report = {"retention_days": days, "cutoff": iso(cutoff), "deleted": deleted}
    if deleted:
        db.execute(text("INSERT INTO bz_config_audit (event, actor, method, path, detail) "
                        "VALUES (:e, :by, :m, :p, CAST(:detail AS jsonb))"),
                   {"e": PRUNED, "by": RETENTION_BY, "m": PRUNE_METHOD, "p": PRUNE_PATH,
                    "detail": json.dumps(report)})
    return report
