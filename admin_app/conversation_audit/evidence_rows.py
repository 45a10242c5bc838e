"""The conversation records as their leaves in the evidence log see them: each event (its text
through its salted commitment, or a redacted message through its redaction's commitment) and each
redaction, read as the rows stand now, for the background verifier and the export's proofs."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, INTEGER, UUID
from sqlalchemy.orm import Session

from ..evidence import leaves

MESSAGE_KINDS = ("user_message", "assistant_message")

_EVENTS = text("""
    SELECT e.archive_id, e.sequence, e.event_id, e.client_turn_id, e.kind, e.content, e.status, e.run_id,
           e.member_session_id, e.thread_id, e.content_salt,
           r.commitment, r.redacted_at, r.basis, r.basis_ref, r.actor, r.leaf_idx,
           (SELECT l.ref FROM bz_evidence_leaves l WHERE l.idx = r.leaf_idx) AS redaction_leaf_ref
      FROM bz_agent_conversation_events e
      JOIN unnest(:archives, :sequences) AS t(archive_id, sequence)
        ON e.archive_id = t.archive_id AND e.sequence = t.sequence
      LEFT JOIN bz_evidence_redactions r ON r.archive_id = e.archive_id AND r.sequence = e.sequence""").bindparams(
    bindparam("archives", type_=ARRAY(UUID(as_uuid=True))), bindparam("sequences", type_=ARRAY(INTEGER)))
_REDACTIONS = text("""
    SELECT r.* FROM bz_evidence_redactions r
      JOIN unnest(:archives, :sequences) AS t(archive_id, sequence)
        ON r.archive_id = t.archive_id AND r.sequence = t.sequence""").bindparams(
    bindparam("archives", type_=ARRAY(UUID(as_uuid=True))), bindparam("sequences", type_=ARRAY(INTEGER)))


def _places(refs: list[str]) -> dict[str, list[Any]]:
    archives, sequences = [], []
    for ref in refs:
        _, archive, sequence = ref.split(":")
        archives.append(uuid.UUID(archive))
        sequences.append(int(sequence))
    return {"archives": archives, "sequences": sequences}


def event_evidence(row: Mapping[Any, Any]) -> bytes | str:
    """One stored event (with its redaction's columns, if any) as its leaf's data; or what makes it
    unverifiable."""
    commitment = None
    if row["kind"] in MESSAGE_KINDS:
        if row["content"] is not None:
            if row["content_salt"] is None:
                return "the message's salt is gone while its text is not"
            commitment = leaves.commitment(bytes(row["content_salt"]), row["content"])
        elif row["commitment"] is not None:
            if row["redaction_leaf_ref"] != leaves.redaction_ref(row["archive_id"], row["sequence"]):
                return "the message's redaction has no leaf of its own"
            commitment = bytes(row["commitment"])
        else:
            return "the message's text is gone without a redaction"
    return leaves.event_data(row["archive_id"], row, commitment)


def events_of(db: Session, refs: list[str]) -> dict[str, bytes | str]:
    """event:<archive>:<sequence> -> the leaf data of that event as stored (absent when gone)."""
    rows = db.execute(_EVENTS, _places(refs)).mappings()
    return {leaves.event_ref(r["archive_id"], r["sequence"]): event_evidence(r) for r in rows}


def redactions_of(db: Session, refs: list[str]) -> dict[str, bytes | str]:
    """redaction:<archive>:<sequence> -> the leaf data of that redaction as stored."""
    rows = db.execute(_REDACTIONS, _places(refs)).mappings()
    return {leaves.redaction_ref(r["archive_id"], r["sequence"]): leaves.redaction_data(r) for r in rows}


_GIVE_SALTS = text("""
    UPDATE bz_agent_conversation_events e SET content_salt = t.salt
      FROM unnest(:archives, :sequences, :salts) AS t(archive_id, sequence, salt)
     WHERE e.archive_id = t.archive_id AND e.sequence = t.sequence
       AND e.kind IN ('user_message', 'assistant_message')
       AND e.content IS NOT NULL AND e.content_salt IS NULL""").bindparams(
    bindparam("archives", type_=ARRAY(UUID(as_uuid=True))), bindparam("sequences", type_=ARRAY(INTEGER)),
    bindparam("salts", type_=ARRAY(BYTEA)))


def give_salts(db: Session, refs: list[str]) -> int:
    """A new salt for each message of `refs` (event refs) that has text and none (one stored before
    085), so that its leaf can commit to it; how many were given."""
    places = _places(refs)
    result = db.execute(_GIVE_SALTS, {**places, "salts": [leaves.new_salt() for _ in refs]})
    return int(result.rowcount)  # type: ignore[attr-defined]


_EXPORT_PAGE = text("""
    SELECT e.sequence, e.event_id, e.client_turn_id, e.kind, e.content, e.status, e.run_id, e.member_session_id,
           e.thread_id, e.created_at, e.content_salt,
           r.commitment, r.redacted_at, r.basis, r.basis_ref, r.actor
      FROM bz_agent_conversation_events e
      LEFT JOIN bz_evidence_redactions r ON r.archive_id = e.archive_id AND r.sequence = e.sequence
     WHERE e.archive_id = :id AND e.sequence > :after AND e.sequence <= :upto
     ORDER BY e.sequence LIMIT :limit""")


def export_page(db: Session, archive_id: uuid.UUID, after: int, limit: int, upto: int) -> tuple[list[Any], bool]:
    """A page of events as an export shows them (the columns of reads.archives.event_page), each
    with what recomputes its leaf: the message's salt, or its redaction's commitment and record."""
    rows = list(db.execute(_EXPORT_PAGE, {"id": archive_id, "after": after, "upto": upto, "limit": limit + 1}))
    return rows[:limit], len(rows) > limit


_UNLEAVED = text("""
    SELECT min(e.sequence) FROM bz_agent_conversation_events e
     WHERE e.archive_id = :id AND NOT EXISTS (
           SELECT 1 FROM bz_evidence_leaves l
            WHERE l.ref = 'event:' || e.archive_id::text || ':' || e.sequence::text)""")


def first_event_without_leaf(db: Session, archive_id: uuid.UUID) -> int | None:
    """The first sequence of the archive whose event has no leaf (one added behind the log's
    back, or stored before the log and not backfilled); None when every event has one."""
    found = db.scalar(_UNLEAVED, {"id": archive_id})
    return None if found is None else int(found)
