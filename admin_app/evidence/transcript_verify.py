"""Checking a transcript export offline (`bailing-admin audit verify`): pure, with only the public
key(s), no database and no hub.

What holds when it says ok: the head's signature verifies with a given key; the stated leaf hashes
and the proof's subtrees lead to that head's root, so each stated leaf is in the signed log at its
index; and every stated leaf is recomputed from the exported fields (an event's through the
commitment its salt and text make, or its redaction's commitment, itself checked against the
redaction's own leaf; a read's from its access-log row) to the stated hash. The events run 1..N
without a gap, each the one its leaf names, and no event or read is without a leaf. The first
failure in leaf-index order is named: its index, its ref and what is wrong."""
from __future__ import annotations

import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from . import heads, leaves, merkle
from .heads import HeadError
from .merkle import ProofError

SCHEMA = "bailing.evidence.transcript.v1"
MESSAGE_KINDS = ("user_message", "assistant_message")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    verified: str | None = None
    first_bad_leaf: int | None = None
    ref: str | None = None
    problem: str | None = None

    def report(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "verified": self.verified}
        return {"ok": False, "first_bad_leaf": self.first_bad_leaf, "ref": self.ref, "problem": self.problem}


class _Bad(Exception):
    def __init__(self, problem: str, index: int | None = None, ref: str | None = None):
        super().__init__(problem)
        self.problem, self.index, self.ref = problem, index, ref


def _hash(value: object, what: object) -> bytes:
    """Standard base64 of 32 bytes (`what` names it in the problem, formatted only then)."""
    try:
        raw = binascii.a2b_base64(value, strict_mode=True) if isinstance(value, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != merkle.HASH_SIZE:
        raise _Bad(f"{what if isinstance(what, str) else f'leaf {what}' + chr(39) + 's hash'} is not a base64 "
                   "SHA-256 hash")
    return raw


def _hex(value: object, what: str, ref: str, index: int) -> bytes:
    try:
        return bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raise _Bad(f"{what} is not hex", index, ref) from None


def _list(value: object, what: str) -> list:
    if not isinstance(value, list):
        raise _Bad(f"{what} is not a list")
    return value


def verify(export: object, public_keys: list[bytes]) -> Verdict:
    """Check one export (the parsed JSON of GET /console/conversations/<id>/export.json)."""
    try:
        return _verify(export, {heads.key_id_of(k): k for k in public_keys})
    except _Bad as bad:
        return Verdict(False, first_bad_leaf=bad.index, ref=bad.ref, problem=bad.problem)


def _verify(export: object, keys: dict[str, bytes]) -> Verdict:
    if not isinstance(export, dict) or not isinstance(export.get("evidence"), dict):
        raise _Bad("not a transcript export with evidence (no \"evidence\" object)")
    evidence = export["evidence"]
    if evidence.get("schema") != SCHEMA:
        raise _Bad(f"the evidence is not {SCHEMA}")
    archive = str(evidence.get("archive_id"))
    conversation = export.get("conversation")
    if not isinstance(conversation, dict) or conversation.get("conversation_id") != archive:
        raise _Bad("the evidence is of another archive than the conversation exported")
    try:
        size, root = heads.verify_head(evidence.get("head"), keys)
    except HeadError as err:
        raise _Bad(f"the signed head does not verify: {err}") from None

    # The stated leaves, and the root they lead to with the proof.
    stated: list[tuple[int, str, bytes]] = []
    by_index: dict[int, bytes] = {}
    previous = -1
    for item in _list(evidence.get("leaves"), "evidence.leaves"):
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or index <= previous:
            raise _Bad(f"the stated leaves are not in ascending index order (after leaf {previous})")
        ref = item.get("ref")
        if not isinstance(ref, str):
            raise _Bad("a stated leaf has no ref", index)
        leaf = _hash(item.get("leaf_hash"), index)
        stated.append((index, ref, leaf))
        by_index[index] = leaf
        previous = index
    nodes: dict[tuple[int, int], bytes] = {}
    for item in _list(evidence.get("proof"), "evidence.proof"):
        level, at = (item.get("level"), item.get("index")) if isinstance(item, dict) else (None, None)
        if not (isinstance(level, int) and isinstance(at, int) and 0 <= level <= 62 and at >= 0):
            raise _Bad("a proof item is not {level 0-62, index, hash}")
        nodes[(item["level"], item["index"])] = _hash(item.get("hash"), "a proof item's hash")
    try:
        if merkle.root_from_multi_proof(size, by_index, nodes) != root:
            raise _Bad(f"the stated leaves and the proof do not lead to the signed root of size {size}")
    except ProofError as err:
        raise _Bad(f"the proof does not verify: {err}") from None

    # The records the leaves commit to, found by the ref each leaf names; a record shown twice is
    # reported at its leaf, as is one no leaf names.
    index_of = {ref: index for index, ref, _ in stated}
    events: dict[str, dict] = {}
    doubled: dict[str, str] = {}
    last = 0
    for position, event in enumerate(_list(export.get("events"), "events"), start=1):
        sequence = event.get("sequence") if isinstance(event, dict) else None
        if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
            raise _Bad(f"event {position} of the export has no sequence number")
        ref = leaves.event_ref(archive, sequence)
        if ref in events:
            doubled[ref] = f"the export shows sequence {sequence} twice"
        events[ref] = event
        last = max(last, sequence)
    reads: dict[str, dict] = {}
    for read in _list(evidence.get("reads"), "evidence.reads"):
        if not isinstance(read, dict) or not isinstance(read.get("id"), int) or not isinstance(read.get("target"), str):
            raise _Bad("a read of the export is not an access-log row")
        ref = leaves.access_ref(read["id"], read["target"])
        if ref in reads:
            doubled[ref] = f"the export shows read {read['id']} twice"
        reads[ref] = read

    event_prefix, redaction_prefix = leaves.event_prefix(archive), leaves.redaction_prefix(archive)
    access_prefix = leaves.access_prefix(archive)
    counted, unmatched = 0, set(events)

    def _record_of(ref: str, index: int) -> tuple[bytes, str]:
        """The leaf data of the record `ref` names, recomputed from the export."""
        nonlocal counted, last
        if ref.startswith(event_prefix) and ref[len(event_prefix):].isdigit():
            event = events.get(ref)
            if event is None:
                raise _Bad("the event is missing", index, ref)
            unmatched.discard(ref)
            counted += 1
            last = max(last, int(ref[len(event_prefix):]))
            return _event_data(archive, event, ref, index, index_of), "event"
        if ref.startswith(redaction_prefix):
            event = events.get(event_prefix + ref[len(redaction_prefix):])
            return _redaction_data(archive, event, ref, index), "redaction"
        if ref.startswith(access_prefix):
            read = reads.pop(ref, None)
            if read is None:
                raise _Bad("the read is missing", index, ref)
            return leaves.access_data(read), "read"
        raise _Bad("the leaf is not of this transcript", index, ref)

    for index, ref, leaf in stated:
        if ref in doubled:
            raise _Bad(doubled[ref], index, ref)
        try:
            data, what = _record_of(ref, index)
        except (TypeError, ValueError, KeyError, AttributeError):
            raise _Bad("the record's fields are not as an export writes them", index, ref) from None
        if hashlib.sha256(b"\x00" + data).digest() != leaf:
            raise _Bad(f"the {what} does not match its leaf", index, ref)
    if unmatched:
        first = min(unmatched, key=lambda r: int(r.rsplit(":", 1)[1]))
        raise _Bad("the event has no leaf in the signed log", None, first)
    if reads:
        raise _Bad("the read has no leaf in the signed log", None, next(iter(reads)))
    # Every event matched a leaf and every event leaf an event: a count short of the highest
    # sequence is a sequence with neither.
    gap = None if counted == last else next(
        (n for n in range(1, last + 1) if leaves.event_ref(archive, n) not in index_of), None)
    if gap is not None:
        raise _Bad(f"sequence {gap} has neither an event nor a leaf (the events run to {last})", None,
                   leaves.event_ref(archive, gap))
    return Verdict(True, verified=f"{len(stated)} leaves of transcript {archive} ({counted} events, their "
                                  f"redactions and reads) are in the signed tree of size {size}")


def _event_data(archive: str, event: dict, ref: str, index: int, index_of: dict[str, int]) -> bytes:
    commitment = None
    given = event.get("evidence")
    evidence: dict[str, Any] = given if isinstance(given, dict) else {}
    if event.get("kind") in MESSAGE_KINDS:
        content = event.get("content")
        if content is not None:
            salt = evidence.get("salt")
            if not isinstance(salt, str):
                raise _Bad("the message's salt is missing", index, ref)
            if not isinstance(content, str):
                raise _Bad("the message's content is not text", index, ref)
            commitment = leaves.commitment(_hex(salt, "the message's salt", ref, index), content)
        elif "commitment" in evidence:
            commitment = _hex(evidence["commitment"], "the redaction's commitment", ref, index)
            if not isinstance(event.get("redaction"), dict):
                raise _Bad("the message's text is removed but its redaction is not shown", index, ref)
            if leaves.redaction_ref(archive, event["sequence"]) not in index_of:
                raise _Bad("the message's redaction has no leaf in the signed log", index, ref)
        else:
            raise _Bad("the message's text is gone without a redaction", index, ref)
    # The exported event read as the leaf formula reads a row (a field it omits, such as a
    # message's status, is null there too; one it must have and lacks is caught by the caller).
    return leaves.event_data(archive, event, commitment)


def _redaction_data(archive: str, event: dict | None, ref: str, index: int) -> bytes:
    if event is None:
        raise _Bad("the event of this redaction is missing", index, ref)
    redaction, evidence = event.get("redaction"), event.get("evidence")
    if not isinstance(redaction, dict) or not isinstance(evidence, dict) or "commitment" not in evidence:
        raise _Bad("the redaction is not shown on its event", index, ref)
    return leaves.redaction_data({"archive_id": archive, "sequence": event.get("sequence"),
                                  "commitment": _hex(evidence["commitment"], "the redaction's commitment", ref, index),
                                  **{k: redaction.get(k) for k in ("redacted_at", "basis", "basis_ref", "actor")}})
