"""The evidence a transcript export carries, so that `bailing-admin audit verify` can check it
offline with only the public key (evidence/transcript_verify.py).

It states the archive's leaves as the log holds them, found by ref prefix in bz_evidence_leaves
(its events, its redactions, the reads of it), never from the event rows: an event whose row was
deleted, or a tail cut off, still has its leaf stated, with no event beside it. A signed head
covers every stated leaf (the latest one when it already does, else one signed now), and a compact
proof (the fewest complete subtrees) leads from the stated leaf hashes to its root. Each event
then carries what recomputes its leaf from the fields shown: a message's salt, or a redacted
message's commitment with its redaction's record; each read its access-log row."""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..conversation_audit.evidence_rows import MESSAGE_KINDS
from ..evidence import heads, leaves, merkle
from ..evidence import log as evidence_log
from ..evidence.heads import b64
from ..identity import access_log

SCHEMA = "bailing.evidence.transcript.v1"
CHUNK = 1000  # leaves, proof nodes or reads per streamed piece


@dataclass(frozen=True)
class Proofs:
    archive_id: uuid.UUID
    head: dict[str, Any]
    leaves: list[tuple[int, str, str, bytes]]  # (idx, kind, ref, leaf_hash), index order
    nodes: list[tuple[int, int, bytes]]        # (level, index, hash)
    reads: dict[str, dict[str, Any]]           # access ref -> the row as it stands
    by_ref: dict[str, int]
    last_sequence: int                         # the export shows events 1 .. last_sequence


def prefixes(archive_id: uuid.UUID) -> list[str]:
    return [leaves.event_prefix(archive_id), leaves.redaction_prefix(archive_id), leaves.access_prefix(archive_id)]


def build(db: Session, data_dir: Path, archive_id: uuid.UUID, header_last: Callable[[], int]) -> Proofs:
    """The evidence of one archive, in the caller's (writing) session: a head signed now unless the
    latest covers every leaf. `header_last()` reads the archive header's last_sequence, after the
    head: events are shown up to it, but not beyond the last one the head covers (a batch appended
    since has no stated leaf yet); a header lowered below its leaves leaves them without events."""
    wanted = prefixes(archive_id)
    rows = evidence_log.leaves_by_prefix(db, wanted)
    head = heads.latest_head(db)
    if head is None or (rows and rows[-1][0] >= head["tree_size"]):
        head = heads.make_head(db, data_dir)
        rows = evidence_log.leaves_by_prefix(db, wanted, below=head["tree_size"])
    keys = merkle.multi_proof_subtrees([r[0] for r in rows], head["tree_size"])
    nodes = evidence_log.stored(db, lambda subtree: [(level, i, subtree(level, i)) for level, i in keys])
    by_ref = {ref: idx for idx, _, ref, _ in rows}
    event_prefix = leaves.event_prefix(archive_id)
    covered = [int(ref[len(event_prefix):]) for _, _, ref, _ in rows if ref.startswith(event_prefix)]
    reads = access_log.rows_of(db, [ref for _, kind, ref, _ in rows if kind == leaves.ACCESS])
    shown = header_last()
    last = min(shown, max(covered)) if covered else shown
    return Proofs(archive_id, head, rows, nodes, reads, by_ref, last)


def event_evidence(proofs: Proofs, row: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An exported event's "evidence" (its leaf, and the salt or the redaction's commitment that
    recompute it), and its "redaction" when its text was removed."""
    evidence: dict[str, Any] = {"leaf_index": proofs.by_ref.get(leaves.event_ref(proofs.archive_id, row.sequence))}
    if row.kind not in MESSAGE_KINDS:
        return evidence, None
    if row.content is not None or row.commitment is None:
        evidence["salt"] = None if row.content_salt is None else bytes(row.content_salt).hex()
        return evidence, None
    evidence["commitment"] = bytes(row.commitment).hex()
    evidence["redaction_leaf_index"] = proofs.by_ref.get(leaves.redaction_ref(proofs.archive_id, row.sequence))
    return evidence, {"redacted_at": leaves.moment(row.redacted_at), "basis": row.basis, "basis_ref": row.basis_ref,
                      "actor": row.actor}


def read_view(proofs: Proofs, ref: str, row: dict[str, Any]) -> dict[str, Any]:
    """An access-log row as exported: the fields its leaf commits to, as the leaf writes them."""
    return {"leaf_index": proofs.by_ref[ref], "id": row["id"], "admin_id": row["admin_id"],
            "username": row["username"], "action": row["action"], "target": row["target"],
            "at": leaves.moment(row["at"]), "channel": row.get("channel"), "admin_token_id": row.get("admin_token_id"),
            "first_sequence": row.get("first_sequence"), "last_sequence": row.get("last_sequence")}


def _listed(items: list, render) -> Iterator[str]:
    for start in range(0, len(items), CHUNK):
        yield ("," if start else "") + ",".join(json.dumps(render(i), ensure_ascii=False)
                                                for i in items[start:start + CHUNK])


def evidence_json(proofs: Proofs) -> Iterator[str]:
    """The export's top-level "evidence" object, in pieces (a 20,000-event archive states 20,000
    leaves: never one string of them all)."""
    yield (f'{{"schema":"{SCHEMA}","archive_id":"{proofs.archive_id}","last_sequence":{proofs.last_sequence},'
           f'"head":{json.dumps(proofs.head)},"leaves":[')
    yield from _listed(proofs.leaves, lambda r: {"index": r[0], "kind": r[1], "ref": r[2], "leaf_hash": b64(r[3])})
    yield '],"proof":['
    yield from _listed(proofs.nodes, lambda n: {"level": n[0], "index": n[1], "hash": b64(n[2])})
    yield '],"reads":['
    yield from _listed(list(proofs.reads.items()), lambda item: read_view(proofs, *item))
    yield "]}"
