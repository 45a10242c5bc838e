"""The configuration-change log against its leaves in the tamper-evident log: each leaf of kind
`config_change` names its row (`bz_config_audit:<id>`), and the row must still hash to it. A row
changed in place, or a leaf whose row is gone, is named (the oldest first).

A row deleted by this log's own retention purge is gone lawfully; its leaf cannot tell, so a
missing row is reported with whether a purge has run (its entry says how many rows it cut)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..evidence import merkle
from .changes import leaf_data
from .log import LEAF_KIND, PRUNED, installed

_LEAVES = text("SELECT l.idx, l.ref, l.leaf_hash, a.* FROM bz_evidence_leaves l "
               "LEFT JOIN bz_config_audit a ON a.id = CAST(substr(l.ref, length('bz_config_audit:') + 1) AS bigint) "
               "WHERE l.kind = :kind ORDER BY l.idx")


def first_mismatch(db: Session) -> dict[str, Any] | None:
    """None when every config-change leaf matches its row; else the first that does not:
    {leaf, ref, problem}."""
    if not installed(db) or not db.scalar(text("SELECT to_regclass('bz_evidence_leaves') IS NOT NULL")):
        return None
    purged = bool(db.scalar(text("SELECT EXISTS (SELECT 1 FROM bz_config_audit WHERE event = :e)"), {"e": PRUNED}))
    for row in db.execute(_LEAVES, {"kind": LEAF_KIND}).mappings():
        if row["id"] is None:
            why = " (a retention purge has run: it may have removed it)" if purged else ""
            return {"leaf": row["idx"], "ref": row["ref"], "problem": f"the row is gone{why}"}
        if merkle.leaf_hash(leaf_data(dict(row))) != bytes(row["leaf_hash"]):
            return {"leaf": row["idx"], "ref": row["ref"], "problem": "the row no longer matches its leaf"}
    return None


def evidence_of(db: Session, refs: list[str]) -> dict[str, bytes | str]:
    """bz_config_audit:<id> -> the leaf data of that row as it stands (absent when gone)."""
    ids = [int(ref.rsplit(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT * FROM bz_config_audit WHERE id = ANY(:ids)"), {"ids": ids}).mappings()
    return {f"bz_config_audit:{row['id']}": leaf_data(dict(row)) for row in rows}
