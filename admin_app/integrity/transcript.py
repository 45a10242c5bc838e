"""One transcript against the evidence log (the console's Verify on a conversation page): each leaf
of its events and redactions (found by ref prefix, so a leaf whose row is gone is found too)
compared with its row as it stands (covered.mismatches), every event checked to have a leaf, and
whether the latest signed head covers the transcript's last leaf. Recomputing the tree's root
against that head is the background pass's job (verifier.py); its latest result is shown beside."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from ..conversation_audit import evidence_rows
from ..evidence import heads, leaves, log
from ..evidence.heads import HeadError
from . import covered, verifier

CHUNK = verifier.CHUNK


def _head(db: Session) -> dict[str, Any] | None:
    """The latest head, when its signature verifies: {tree_size, signed_at}."""
    head = heads.latest_head(db)
    if head is None:
        return None
    try:
        heads.verify_head(head, heads.stored_public_keys(db))
    except HeadError:
        return None
    return {"tree_size": head["tree_size"], "signed_at": head["signed_at"]}


def verify_archive(db: Session, archive_id: uuid.UUID) -> dict[str, Any]:
    """{ok, events (event leaves checked), leaves, first_bad_leaf, ref, problem, last_leaf,
    head: {tree_size, signed_at} | None, covered (the head covers the last leaf), pass: the
    latest background pass or None}."""
    rows = log.leaves_by_prefix(db, [leaves.event_prefix(archive_id), leaves.redaction_prefix(archive_id)])
    bad: list[tuple[int, str, str]] = []
    for start in range(0, len(rows), CHUNK):
        bad.extend(covered.mismatches(db, rows[start:start + CHUNK]))
    report: dict[str, Any] = {
        "ok": not bad, "events": sum(1 for _, kind, _, _ in rows if kind == leaves.EVENT), "leaves": len(rows),
        "first_bad_leaf": None, "ref": None, "problem": None,
        "last_leaf": rows[-1][0] if rows else None, "head": _head(db), "pass": verifier.latest(db)}
    if bad:
        index, ref, problem = min(bad)
        report.update(first_bad_leaf=index, ref=ref[:verifier.REF_MAX], problem=problem)
    else:
        missing = evidence_rows.first_event_without_leaf(db, archive_id)
        if missing is not None:
            report.update(ok=False, ref=leaves.event_ref(archive_id, missing),
                          problem=f"event {missing} has no leaf in the log")
    head = report["head"]
    report["covered"] = bool(head and (report["last_leaf"] is None or report["last_leaf"] < head["tree_size"]))
    return report
