"""Removing a message's text while its record stays verifiable (retention, erasure).

The event's leaf commits to SHA-256(salt || text) (evidence.leaves), so the text, its salt and its
unsalted body digest are removed and the commitment is kept in a redaction row, itself a leaf of
the log: the event's leaf still verifies from the row, and the redaction says when, under what and
by whom. Everything else of the event (its place, ids, kind, turn) stays. The events are locked
first, in key order, so two redactions of the same messages never both record one."""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT, BYTEA, INTEGER, UUID
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..evidence import leaves
from ..evidence import log as evidence_log

BASES = ("retention", "erasure")

_LOCK = text("""
    SELECT e.archive_id, e.sequence, e.content, e.content_salt
      FROM bz_agent_conversation_events e
      JOIN unnest(:archives, :sequences) AS t(archive_id, sequence)
        ON e.archive_id = t.archive_id AND e.sequence = t.sequence
     WHERE e.content IS NOT NULL AND e.kind IN ('user_message', 'assistant_message')
     ORDER BY e.archive_id, e.sequence
       FOR UPDATE OF e""").bindparams(bindparam("archives", type_=ARRAY(UUID(as_uuid=True))),
                                      bindparam("sequences", type_=ARRAY(INTEGER)))
_RECORD = text("""
    INSERT INTO bz_evidence_redactions
           (archive_id, sequence, commitment, redacted_at, basis, basis_ref, actor, leaf_idx)
    SELECT a, s, c, :at, :basis, :basis_ref, :actor, l
      FROM unnest(:archives, :sequences, :commitments, :leaf_idxs) AS t(a, s, c, l)""").bindparams(
    bindparam("archives", type_=ARRAY(UUID(as_uuid=True))), bindparam("sequences", type_=ARRAY(INTEGER)),
    bindparam("commitments", type_=ARRAY(BYTEA)), bindparam("leaf_idxs", type_=ARRAY(BIGINT)))
# The body digest (an unsalted hash of the text) goes too: it becomes the salted commitment, so a
# retry of the original batch is told it differs from what is stored, and nothing guessable stays.
_REMOVE = text("""
    UPDATE bz_agent_conversation_events e
       SET content = NULL, content_salt = NULL, body_sha256 = encode(t.c, 'hex')
      FROM unnest(:archives, :sequences, :commitments) AS t(a, s, c)
     WHERE e.archive_id = t.a AND e.sequence = t.s""").bindparams(
    bindparam("archives", type_=ARRAY(UUID(as_uuid=True))), bindparam("sequences", type_=ARRAY(INTEGER)),
    bindparam("commitments", type_=ARRAY(BYTEA)))


@dataclass(frozen=True)
class Redacted:
    count: int
    archives: int
    at: datetime


def redact(db: Session, messages: Iterable[tuple[uuid.UUID, int]], basis: str, basis_ref: str,
           actor: str) -> Redacted:
    """Remove the text of these messages (archive id, sequence) that still have it, in the
    caller's transaction; the others are left alone. The caller checks holds first."""
    if basis not in BASES:
        raise ValueError(f"unknown redaction basis {basis!r}")
    wanted = sorted(set(messages))
    at = utc_now()
    if not wanted:
        return Redacted(0, 0, at)
    rows = db.execute(_LOCK, {"archives": [a for a, _ in wanted], "sequences": [s for _, s in wanted]}).all()
    if not rows:
        return Redacted(0, 0, at)
    # A message stored before its salt existed has no leaf to keep verifying: its commitment is
    # then made with a fresh salt, so that nothing guessable of its text is kept either.
    commitments = [leaves.commitment(bytes(r.content_salt) if r.content_salt else leaves.new_salt(), r.content)
                   for r in rows]
    records = [{"archive_id": r.archive_id, "sequence": r.sequence, "commitment": c, "redacted_at": at,
                "basis": basis, "basis_ref": basis_ref, "actor": actor} for r, c in zip(rows, commitments)]
    first = evidence_log.append_leaves(db, [(leaves.REDACTION, leaves.redaction_ref(r["archive_id"], r["sequence"]),
                                             leaves.redaction_data(r)) for r in records])
    arrays = {"archives": [r.archive_id for r in rows], "sequences": [r.sequence for r in rows],
              "commitments": commitments}
    db.execute(_RECORD, {**arrays, "at": at, "basis": basis, "basis_ref": basis_ref, "actor": actor,
                         "leaf_idxs": [(first if first is not None else -1) + i for i in range(len(rows))]})
    db.execute(_REMOVE, arrays)
    return Redacted(len(rows), len({r.archive_id for r in rows}), at)
