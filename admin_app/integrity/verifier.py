"""The verifier's pass (`bailing-admin evidence check`, the background worker): the tree against
the latest signed head (evidence.verify.check), then every leaf's row as it stands now
(covered.mismatches), a chunk of leaves at a time in index order, up to the log's size when the
pass began. Each pass is recorded in bz_evidence_checks: when, how many leaves, and the first bad
leaf (its index, its ref and what is wrong), which the console's banner and the metrics read.

A tree that does not verify ends the pass there (the log itself was changed: its rows are not
worth comparing). Otherwise every leaf is compared, the first bad one kept and the others counted.

Cost: a full pass each time, two reads of the leaf table (the tree, then the rows: each
chunk is one keyset query on the index and one query per kind of record in it), each chunk in a
transaction of its own, so no snapshot is held across the pass."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso
from ..db import Database
from ..evidence import log, verify
from . import covered

CHUNK = 2000  # leaves whose rows one query per kind reads back
PROBLEM_MAX = 2000  # bz_evidence_checks.problem
REF_MAX = 256  # bz_evidence_checks.first_bad_ref, as bz_evidence_leaves.ref


def _bounded(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]


def _tree(database: Database) -> dict[str, Any]:
    with database.session() as db:
        report = verify.check(db)
        index = report["first_bad_leaf"]
        found = log.leaf(db, index) if index is not None else None
    report["ref"] = found["ref"] if found else None
    return report


def _rows(database: Database, end: int) -> dict[str, Any]:
    """Every leaf below `end` against its row: the first mismatch, and how many."""
    first: tuple[int, str, str] | None = None
    bad = checked = 0
    while checked < end:
        with database.session() as db:
            rows = log.leaf_rows(db, checked, CHUNK, end)
            found = covered.mismatches(db, rows)
        if not rows:
            break
        if found and first is None:
            first = found[0]
        bad += len(found)
        checked = rows[-1][0] + 1
    report: dict[str, Any] = {"leaves_checked": checked, "bad_leaves": bad}
    if first is not None:
        report.update(first_bad_leaf=first[0], ref=first[1], what=first[2])
    return report


def run_pass(database: Database) -> dict[str, Any]:
    """One pass, recorded. Answers `evidence check`'s report: {ok, tree_size (the signed head's),
    leaves, leaves_checked, first_bad_leaf, ref, problem, bad_leaves, check_id, started_at,
    finished_at}."""
    with database.session() as db:
        size = log.size(db)
        check_id, started = db.execute(text(
            "INSERT INTO bz_evidence_checks (tree_size) VALUES (:size) RETURNING id, started_at"),
            {"size": size}).one()
    report = _tree(database)
    report.update(leaves_checked=report["leaves"], bad_leaves=0 if report["ok"] else 1)
    if report["ok"]:
        rows = _rows(database, size)
        report.update(leaves_checked=rows["leaves_checked"], bad_leaves=rows["bad_leaves"])
        if rows["bad_leaves"]:
            more = rows["bad_leaves"] - 1
            what = rows["what"] + (f" ({more} more leaves do not verify)" if more else "")
            # `ref: what`, the shape `evidence check` has always printed for a row.
            report.update(ok=False, first_bad_leaf=rows["first_bad_leaf"], ref=rows["ref"],
                          problem=f"{rows['ref']}: {what}")
    report["ref"] = _bounded(report.get("ref"), REF_MAX)
    report["problem"] = _bounded(report["problem"], PROBLEM_MAX)
    with database.session() as db:
        before = latest(db)
        since = None
        if not report["ok"]:
            since = before["failing_since"] if before and before["ok"] is False else iso(started)
        finished = db.scalar(text(
            "UPDATE bz_evidence_checks SET finished_at = clock_timestamp(), leaves_checked = :checked, ok = :ok, "
            "first_bad_leaf = :leaf, first_bad_ref = :ref, problem = :problem, "
            "failing_since = CAST(:since AS timestamptz) WHERE id = :id RETURNING finished_at"),
            {"checked": report["leaves_checked"], "ok": report["ok"], "leaf": report["first_bad_leaf"],
             "ref": report["ref"], "problem": report["problem"], "since": since, "id": check_id})
    report.update(check_id=check_id, started_at=iso(started), finished_at=iso(finished))
    return report


_LATEST = text("SELECT id, started_at, finished_at, tree_size, leaves_checked, ok, first_bad_leaf, first_bad_ref, "
               "problem, failing_since FROM bz_evidence_checks WHERE finished_at IS NOT NULL "
               "ORDER BY started_at DESC, id DESC LIMIT 1")


def installed(db: Session) -> bool:
    return bool(db.scalar(text("SELECT to_regclass('bz_evidence_checks') IS NOT NULL")))


def latest(db: Session) -> dict[str, Any] | None:
    """The latest finished pass (one read of the index bz_evidence_checks_recent), None before any:
    {id, started_at, finished_at, tree_size (the log's size when it began), leaves_checked, ok,
    first_bad_leaf, first_bad_ref, problem, failing_since}."""
    if not installed(db):
        return None
    row = db.execute(_LATEST).mappings().first()
    if row is None:
        return None
    found = dict(row)
    for key in ("started_at", "finished_at", "failing_since"):
        found[key] = iso(found[key]) if found[key] is not None else None
    return found
