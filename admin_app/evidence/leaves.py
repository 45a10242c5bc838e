"""What each leaf of the evidence log commits to: one formula per kind of record, over plain
values, used alike by the producer (in the row's own transaction), by the background verifier
(over the row as it stands) and by `audit verify` (over an export, offline).

A leaf's data is the canonical JSON (sorted keys, no spaces, UTF-8) of {"kind": kind, ...fields}.
Times are UTC to the microsecond, identifiers their lower-case text. A message's text is never in
a leaf: its leaf holds SHA-256(salt || UTF-8 text) with a random 16-byte salt stored beside the
text, so the text and the salt can later be removed (retention, erasure) while the leaf, and
every proof through it, still verifies; without the salt the commitment says nothing of the text,
however short. Everything else of an event (its place, ids, kind, status, run) is in the leaf as
it is, so a change to any of it, a reordering or a deletion is seen."""
from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..canonical import canonical_json

EVENT, REDACTION = "conversation_event", "redaction"
ACCESS, ADMIN_EVENT, DECISION = "access_read", "admin_event", "approval_decision"
SALT_BYTES = 16
# What a loader of rows (integrity.covered) answers for a row removed lawfully (a retention purge
# that recorded, under a leaf of its own, what it removed): not a mismatch.
LAWFULLY_REMOVED = "removed lawfully"


def data(kind: str, fields: Mapping[Any, Any]) -> bytes:
    return canonical_json({"kind": kind, **fields}).encode("utf-8")


def moment(value: datetime | str | None) -> str | None:
    """A time as a leaf writes it (a string is taken as already written so)."""
    if value is None or isinstance(value, str):
        return value
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _text(value: Any) -> str | None:
    """An identifier as text (a UUID lower-case, a number in decimal), None as None."""
    if value is None:
        return None
    return str(value) if isinstance(value, uuid.UUID | str) else str(int(value))


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def commitment(salt: bytes, content: str) -> bytes:
    """What a message's leaf holds of its text."""
    return hashlib.sha256(bytes(salt) + content.encode("utf-8")).digest()


# ----------------------------------------------------------------------------- conversation events

def event_ref(archive_id: Any, sequence: int) -> str:
    return f"event:{archive_id}:{int(sequence)}"


def event_prefix(archive_id: Any) -> str:
    """The refs of one archive's events start so (the leaves' ref index reads them by prefix)."""
    return f"event:{archive_id}:"


def event_data(archive_id: Any, event: Mapping[Any, Any], content_commitment: bytes | None) -> bytes:
    """`event` as stored: sequence, event_id, client_turn_id, kind, status, run_id,
    member_session_id, thread_id (absent is null); the commitment to its text, if it has one."""
    return data(EVENT, {
        "archive_id": _text(archive_id), "sequence": int(event["sequence"]),
        "event_id": event["event_id"], "client_turn_id": event["client_turn_id"], "event": event["kind"],
        "status": event.get("status"), "run_id": _text(event.get("run_id")),
        "member_session_id": _text(event.get("member_session_id")), "thread_id": _text(event.get("thread_id")),
        "content_sha256": None if content_commitment is None else content_commitment.hex(),
    })


def redaction_ref(archive_id: Any, sequence: int) -> str:
    return f"redaction:{archive_id}:{int(sequence)}"


def redaction_prefix(archive_id: Any) -> str:
    return f"redaction:{archive_id}:"


def redaction_data(row: Mapping[Any, Any]) -> bytes:
    """A message's text removed: which, the commitment its event's leaf holds, when, under what and
    by whom (a bz_evidence_redactions row)."""
    return data(REDACTION, {
        "archive_id": _text(row["archive_id"]), "sequence": int(row["sequence"]),
        "commitment": bytes(row["commitment"]).hex(), "redacted_at": moment(row["redacted_at"]),
        "basis": row["basis"], "basis_ref": row["basis_ref"], "actor": row["actor"],
    })


# ----------------------------------------------------------------------------- reads, admin events, decisions

def access_ref(row_id: int, target: str) -> str:
    """access:<target>:<id> for a read of one record named by its UUID (a transcript, a run, an
    approval), so the reads of one transcript are found by prefix even when their rows are gone;
    access:<id> for the others (a search, an export of the log itself)."""
    try:
        named = str(uuid.UUID(target)) == target
    except ValueError:
        named = False
    return f"access:{target}:{int(row_id)}" if named else f"access:{int(row_id)}"


def access_prefix(target: Any) -> str:
    return f"access:{target}:"


def access_data(row: Mapping[Any, Any]) -> bytes:
    """One bz_access_log row: who read what, when, through which door, which part."""
    return data(ACCESS, {
        "id": int(row["id"]), "admin_id": _text(row["admin_id"]), "username": row["username"],
        "action": row["action"], "target": row["target"], "at": moment(row["at"]),
        "channel": row.get("channel"), "admin_token_id": _text(row.get("admin_token_id")),
        "first_sequence": row.get("first_sequence"), "last_sequence": row.get("last_sequence"),
    })


def admin_event_ref(row_id: int) -> str:
    return f"admin_event:{int(row_id)}"


def admin_event_data(row: Mapping[Any, Any]) -> bytes:
    """One bz_admin_events row (an admin account's change, a pause, a resume)."""
    return data(ADMIN_EVENT, {
        "id": int(row["id"]), "actor_admin_id": _text(row.get("actor_admin_id")), "actor": row["actor"],
        "action": row["action"], "target_admin_id": _text(row.get("target_admin_id")), "target": row["target"],
        "detail": row.get("detail") or {}, "at": moment(row["at"]),
    })


def decision_ref(approval_id: Any) -> str:
    return f"approval:{approval_id}"


def decision_data(row: Mapping[Any, Any]) -> bytes:
    """An approval's decision as stored: which approval of which snapshot, the decision, who, when,
    why, through which door and credential."""
    return data(DECISION, {
        "approval_id": _text(row["id"]), "number": int(row["number"]), "args_hash": row["args_hash"],
        "status": row["status"], "decided_by": row.get("decided_by"), "decided_at": moment(row.get("decided_at")),
        "decision_reason": row.get("decision_reason"), "decided_via": row.get("decided_via"),
        "decision_id": row.get("decision_id"), "decided_credential": row.get("decided_credential"),
    })
