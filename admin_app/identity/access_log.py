"""The record of sensitive reads: which admin opened which transcript, snapshot, export or trace,
when, and through which door (a console session, or a personal API token named by its id).

It lives beside the admins and their tokens, which it names. A read is recorded in the
transaction of the read itself, so an answered read is a recorded one and a refused read (whose
transaction rolls back) leaves nothing; each row is a leaf of the evidence log too. The log is read
by reads.access_log."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..evidence import leaves
from ..evidence import log as evidence_log
from . import tokens

ACTIONS = frozenset({"transcript_view", "transcript_export", "snapshot_view", "snapshot_download",
                     "run_trace_view", "job_trace_view", "access_log_export", "message_search"})

# The first and last sequence a read showed (a page of a transcript, the span of a search's hits,
# an export's whole range), or None for a whole record and for a transcript read that showed none.
Sequences = tuple[int, int] | None


def _insert(db: Session, admin_id: int, username: str, action: str, target: str, channel: str,
            token_hash: str | None, sequences: Sequences) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown access-log action {action!r}")
    first, last = sequences if sequences is not None else (None, None)
    if sequences is not None and not (isinstance(first, int) and isinstance(last, int) and first <= last):
        raise ValueError(f"access-log sequences must be (first, last) with first <= last, not {sequences!r}")
    row = db.execute(text("INSERT INTO bz_access_log (admin_id, username, action, target, channel, admin_token_id, "
                          "                           first_sequence, last_sequence) "
                          "VALUES (:admin, :user, :action, :target, :channel, "
                          "        (SELECT id FROM bz_admin_tokens WHERE token_hash = :token), :first, :last) "
                          "RETURNING *"),
                     {"admin": admin_id, "user": username, "action": action, "target": target,
                      "channel": channel, "token": token_hash, "first": first, "last": last}).mappings().one()
    # Its leaf in the evidence log, sent with the read's COMMIT (an export streams long after).
    ref = leaves.access_ref(row["id"], row["target"])
    evidence_log.append_at_commit(db, [(leaves.ACCESS, ref, leaves.access_data(row))])


def evidence_of(db: Session, refs: list[str]) -> dict[str, bytes]:
    """The leaf data of the rows `refs` name (access:<id>), as they stand; a gone row is absent."""
    ids = [int(ref.rsplit(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT * FROM bz_access_log WHERE id = ANY(:ids)"),
                      {"ids": ids}).mappings()
    return {leaves.access_ref(row["id"], row["target"]): leaves.access_data(row) for row in rows}


def rows_of(db: Session, refs: list[str]) -> dict[str, dict[str, Any]]:
    """The rows `refs` name, as they stand (for an export to carry beside their leaves); a gone
    row is absent."""
    ids = [int(ref.rsplit(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT * FROM bz_access_log WHERE id = ANY(:ids) ORDER BY id"), {"ids": ids}).mappings()
    return {leaves.access_ref(row["id"], row["target"]): dict(row) for row in rows}


def record_console_read(db: Session, admin_id: int, username: str, action: str, target: str,
                        sequences: Sequences = None) -> None:
    _insert(db, admin_id, username, action, target, "console", None, sequences)


def record_api_read(db: Session, admin_id: int, username: str, bearer: str, action: str, target: str,
                    sequences: Sequences = None) -> None:
    """`bearer` is the admin token the request was authenticated with (in this transaction)."""
    _insert(db, admin_id, username, action, target, "api", tokens.hash_token(bearer), sequences)

