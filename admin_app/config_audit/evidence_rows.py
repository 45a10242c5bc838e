"""The configuration-change log against its leaves in the tamper-evident log: each leaf of kind
`config_change` names its row (`bz_config_audit:<id>`), and the row must still hash to it
(integrity.covered reads them through these loaders).

A row deleted by this log's own retention purge is gone lawfully: each purge records the id
ranges it removed (bz_config_audit_removals) under a leaf of its own (`config_removal:<purge
entry id>`). A gone row inside a range whose record still hashes to its leaf is answered as
removed lawfully; any other gone row is reported as gone."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..evidence import merkle
from ..evidence.leaves import LAWFULLY_REMOVED
from .changes import REMOVAL_KIND, leaf_data, removal_data, removal_ref

# The purges' records whose leaf they still hash to: only those say what went lawfully (a record
# added or widened behind the log's back has no such leaf).
_REMOVALS = text("SELECT r.purge_id, r.cutoff, r.ranges, l.leaf_hash FROM bz_config_audit_removals r "
                 "JOIN bz_evidence_leaves l ON l.ref = :kind || ':' || r.purge_id AND l.kind = :kind")


def _ranges(value: Any) -> list[list[int]]:
    return json.loads(value) if isinstance(value, str) else list(value)


def lawful_ranges(db: Session) -> list[tuple[int, int]]:
    """The id ranges the purges removed, from records that verify against their leaves."""
    if not db.scalar(text("SELECT to_regclass('bz_config_audit_removals') IS NOT NULL")):
        return []
    found: list[tuple[int, int]] = []
    for row in db.execute(_REMOVALS, {"kind": REMOVAL_KIND}).mappings():
        ranges = _ranges(row["ranges"])
        if merkle.leaf_hash(removal_data(row["purge_id"], row["cutoff"], ranges)) == bytes(row["leaf_hash"]):
            found.extend((int(lo), int(hi)) for lo, hi in ranges)
    return found


def evidence_of(db: Session, refs: list[str]) -> dict[str, bytes | str]:
    """bz_config_audit:<id> -> the leaf data of that row as it stands; LAWFULLY_REMOVED for a row
    a purge removed; absent when gone otherwise. The gone ones are looked up after the rows, so a
    purge committing in between is seen whole."""
    ids = [int(ref.rsplit(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT * FROM bz_config_audit WHERE id = ANY(:ids)"), {"ids": ids}).mappings()
    found: dict[str, bytes | str] = {f"bz_config_audit:{row['id']}": leaf_data(dict(row)) for row in rows}
    gone = [i for i in ids if f"bz_config_audit:{i}" not in found]
    if gone:
        ranges = lawful_ranges(db)
        for i in gone:
            if any(lo <= i <= hi for lo, hi in ranges):
                found[f"bz_config_audit:{i}"] = LAWFULLY_REMOVED
    return found


def removals_of(db: Session, refs: list[str]) -> dict[str, bytes | str]:
    """config_removal:<purge id> -> the leaf data of that purge's record as it stands."""
    ids = [int(ref.rsplit(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT purge_id, cutoff, ranges FROM bz_config_audit_removals WHERE purge_id = ANY(:ids)"),
                      {"ids": ids}).mappings()
    return {removal_ref(r["purge_id"]): removal_data(r["purge_id"], r["cutoff"], _ranges(r["ranges"])) for r in rows}
