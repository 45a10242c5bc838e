"""The conversation records as their leaves in the evidence log see them: each event (its text
through its salted commitment, or a redacted message through its redaction's commitment) and each
redaction, read as the rows stand now, for the background verifier and the export's proofs."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, INTEGER, UUID
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


def _places(refs: list[str]) -> dict[str, list]:
    archives, sequences = [], []
    for ref in refs:
        _, archive, sequence = ref.split(":")
        archives.append(uuid.UUID(archive))
        sequences.append(int(sequence))
    return {"archives": archives, "sequences": sequences}


def event_evidence(row: Mapping[str, Any]) -> bytes | str:
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
