"""What each kind of leaf covers, read back as the rows stand now: one loader per kind, owned by
the package that owns the rows. A loader takes refs and answers {ref: leaf data, or what makes the
row unverifiable, or leaves.LAWFULLY_REMOVED for a row its own retention removed (not a
mismatch)}; a ref it does not answer names a row that is gone."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from ..config_audit import evidence_rows as config_rows
from ..config_audit.changes import REMOVAL_KIND as CONFIG_REMOVAL
from ..config_audit.log import LEAF_KIND as CONFIG_CHANGE
from ..conversation_audit import evidence_rows as conversation_rows
from ..evidence import leaves, merkle
from ..identity import access_log, admins
from ..invocations import approvals

Loader = Callable[[Session, list[str]], Mapping[str, bytes | str]]

LOADERS: dict[str, Loader] = {
    leaves.EVENT: conversation_rows.events_of,
    leaves.REDACTION: conversation_rows.redactions_of,
    leaves.ACCESS: access_log.evidence_of,
    leaves.ADMIN_EVENT: admins.event_evidence_of,
    leaves.DECISION: approvals.decision_evidence_of,
    CONFIG_CHANGE: config_rows.evidence_of,
    CONFIG_REMOVAL: config_rows.removals_of,
}


MALFORMED = "the leaf's ref is malformed"


def _load(db: Session, loader: Loader, refs: list[str]) -> Mapping[str, bytes | str]:
    """The loader's answer; when a ref it cannot read (one changed in the log's table) makes it
    fail, each ref on its own, in a savepoint, the unreadable ones answered as malformed."""
    try:
        with db.begin_nested():
            return loader(db, refs)
    except (ValueError, IndexError, DataError):
        answers: dict[str, bytes | str] = {}
        for ref in refs:
            try:
                with db.begin_nested():
                    answers.update(loader(db, [ref]))
            except (ValueError, IndexError, DataError):
                answers[ref] = MALFORMED
        return answers


def mismatches(db: Session, rows: list[tuple[int, str, str, bytes]]) -> list[tuple[int, str, str]]:
    """Of leaves (idx, kind, ref, leaf_hash), those whose row no longer hashes to them, in index
    order: (idx, ref, what is wrong). A kind nobody covers (a test's own) is not checked."""
    by_kind: dict[str, list[str]] = {}
    for _, kind, ref, _ in rows:
        if kind in LOADERS:
            by_kind.setdefault(kind, []).append(ref)
    current: dict[str, bytes | str] = {}
    for kind, refs in by_kind.items():
        current.update(_load(db, LOADERS[kind], refs))
    bad = []
    for idx, kind, ref, leaf_hash in rows:
        if kind not in LOADERS:
            continue
        found = current.get(ref)
        if found == leaves.LAWFULLY_REMOVED:
            continue
        if found is None:
            bad.append((idx, ref, "the row is gone"))
        elif isinstance(found, str):
            bad.append((idx, ref, found))
        elif merkle.leaf_hash(found) != bytes(leaf_hash):
            bad.append((idx, ref, "the row no longer matches its leaf"))
    return bad
