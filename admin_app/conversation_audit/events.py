"""Appending visible events: ordered, contiguous, atomic batches by the writer alone.

The archive row is locked for the whole batch, so concurrent writers queue and each sees the
sequence the previous one left. Every event of a batch is checked before any is stored; an
identical retry of stored events succeeds with the same acknowledgement, anything else that
disagrees with what is stored is a 409 with nothing written.

`append` runs the steps below in a fixed order: the first check that fails decides the answer
(status, code and message), so a step may move only where no earlier answer can change.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import sha256_json
from ..db import at_commit
from ..errors import ApiError, invalid_request
from ..evidence import leaves as evidence_leaves
from ..evidence import log as evidence_log
from ..identity.models import AgentSession
from ..observability import metrics
from ..runtime.links import run_for_link
from ..validation import SAFE_INTEGER_MAX, Checker, client_text, join
from .archives import (CheckedArchive, LockedArchive, conflict, limit_error, locked_archive_for_member,
                       not_found, parse_archive_id)
from .availability import Availability
from .values import client_id, uuid_value

ACK = "bailing.agent-conversation-audit-ack.v1"

EXTRA_FIELDS = {
    "turn_start": (),
    "user_message": ("content",),
    "assistant_message": ("content",),
    "run_link": ("run_id", "member_session_id"),
    "turn_end": ("status",),
}
BASE_FIELDS = ("event_id", "sequence", "client_turn_id", "kind")
TURN_END_STATUSES = ("completed", "failed", "cancelled")
MESSAGE_KINDS = ("user_message", "assistant_message")

Event = dict[str, Any]  # one validated event: its fields are columns of the events table
NewEvent = tuple[Event, str]  # an event to store and the SHA-256 of its canonical JSON


def append(db: Session, session: AgentSession, archive_ref: str, body: dict[str, Any],
           available: Availability) -> dict[str, Any]:
    """Store the batch's new events and acknowledge the batch's last sequence, or refuse it with
    nothing written."""
    archive_id = parse_archive_id(archive_ref)
    events, refusal = _validated(body)
    locked = locked_archive_for_member(db, session, archive_id, available,
                                       lookup=earlier_use_lookup(archive_id, events))
    check_writer(locked, session, refusal)
    archive = locked.check_bindings()
    header = archive.header
    check_order(events)
    hashes = [sha256_json(e) for e in events]
    new = split_replayed(events, hashes, header.last_sequence, stored_replayed(db, header, events))
    last_seq = events[-1]["sequence"]
    if new:
        new_bytes = check_limits(header.last_sequence, header.text_bytes, new)
        stored_ids, started_before = earlier_use(archive.looked_up)
        check_ids_unused(new, stored_ids)
        _lock_linked_runs(db, [e for e, _ in new if e["kind"] == "run_link"])
        turns = apply_turns(header.running_turn_id, header.last_turn_status, started_before,
                            [e for e, _ in new])
        # The events before a turn conflict are checked in full first, their run links included.
        threads = verify_run_links(db, archive, [e for e, _ in new[:turns.checked] if e["kind"] == "run_link"])
        if turns.conflict is not None:
            raise conflict(turns.conflict)
        rows = [{**e, "thread_id": threads.get(e["event_id"]), "body_sha256": digest} for e, digest in new]
        check_runs_linked_once(rows)
        write_batch(db, archive, rows, turns, new_bytes, last_seq)
    return {"schema": ACK, "conversation_id": str(header.id), "last_sequence": last_seq}


# ----------------------------------------------------------------------------- the batch

def _validated(body: dict[str, Any]) -> tuple[list[Event], ApiError | None]:
    """The validated batch, or none and its refusal: that is told only to the writer, once the
    archive is known to be theirs."""
    try:
        return validate_batch(body), None
    except ApiError as err:
        return [], err


def validate_batch(body: dict[str, Any]) -> list[Event]:
    """The batch, normalised (UUIDs lower-cased). A broken rule is a 400, a passed limit a 413;
    events are checked in order and the first that fails answers, as in Core."""
    checker = Checker()
    checker.obj(body, "", required=("events",))
    events = body.get("events")
    if not isinstance(events, list) or not 1 <= len(events) <= limits.AUDIT_BATCH_MAX_EVENTS:
        checker.add("events", f"must be a list of 1 to {limits.AUDIT_BATCH_MAX_EVENTS} events")
        raise invalid_request(checker)
    normalised = [clean for i, event in enumerate(events)
                  if (clean := _validate_event(checker, event, join("events", i))) is not None]
    if checker.problems:
        raise invalid_request(checker)
    # Only now is every content known to be text.
    if sum(len(e.get("content", "").encode("utf-8")) for e in normalised) > limits.AUDIT_BATCH_TEXT_MAX_BYTES:
        raise limit_error(f"A batch holds at most {limits.AUDIT_BATCH_TEXT_MAX_BYTES} bytes of text.",
                          max_batch_text_bytes=limits.AUDIT_BATCH_TEXT_MAX_BYTES)
    return normalised


def _validate_event(checker: Checker, event: Any, path: str) -> Event | None:
    """One event, normalised, with its problems added to `checker`; None when it is no event of
    a known kind. A sequence past the archive's limit is a 413 at once, unless a problem came first."""
    kind = event.get("kind") if isinstance(event, dict) else None
    if isinstance(event, dict) and not (isinstance(kind, str) and kind in EXTRA_FIELDS):
        checker.add(join(path, "kind"), "must be one of " + ", ".join(EXTRA_FIELDS))
        return None
    extra = EXTRA_FIELDS[kind] if isinstance(kind, str) else ()
    if checker.obj(event, path, required=BASE_FIELDS + extra) is None:
        return None
    if "sequence" in event:
        sequence = checker.integer(event["sequence"], join(path, "sequence"), minimum=1,
                                   maximum=SAFE_INTEGER_MAX)
        if sequence is not None and sequence > limits.AUDIT_ARCHIVE_MAX_EVENTS and not checker.problems:
            raise _too_many_events()
    for key in ("event_id", "client_turn_id"):
        if key in event:
            client_id(checker, event[key], join(path, key))
    clean = dict(event)
    if "content" in event:
        client_text(checker, event["content"], join(path, "content"), limits.AUDIT_TEXT_MAX_UNITS)
    if "status" in event and event["status"] not in TURN_END_STATUSES:
        checker.add(join(path, "status"), "must be completed, failed or cancelled")
    for key in ("run_id", "member_session_id"):
        if key in event:
            clean[key] = uuid_value(checker, event[key], join(path, key))
    return clean


def _too_many_events() -> ApiError:
    return limit_error(f"An archive holds at most {limits.AUDIT_ARCHIVE_MAX_EVENTS} events.",
                       max_events=limits.AUDIT_ARCHIVE_MAX_EVENTS)


# ----------------------------------------------------------------------------- the archive

def check_writer(locked: LockedArchive, session: AgentSession, refusal: ApiError | None) -> None:
    """Only the writer appends (others learn nothing more), then hears of its batch's problem,
    then of an archive still waiting for members."""
    if str(locked.header.creator_session_id) != str(session.id):
        raise not_found()
    if refusal is not None:
        raise refusal
    if locked.header.state != "ready":
        raise ApiError("conversation_audit_not_ready")


# Which of a batch's event ids the archive already holds, and which of its turns an earlier
# batch started; sent with the archive lock (archives.locked_archive_for_member). One index lookup
# per value (LATERAL), so a plan made from stale statistics cannot scan a whole archive instead.
# Lists travel as one JSON text each: far cheaper to send than arrays.
_EARLIER_USE = """
    SELECT 'event' AS what, wanted.id AS value
      FROM json_array_elements_text(%(ids)s::json) AS wanted(id),
           LATERAL (SELECT 1 FROM bz_agent_conversation_events e
                     WHERE e.archive_id = %(id)s AND e.event_id = wanted.id LIMIT 1) AS hit
    UNION ALL
    SELECT 'turn', wanted.id
      FROM json_array_elements_text(%(turns)s::json) AS wanted(id),
           LATERAL (SELECT 1 FROM bz_agent_conversation_events e
                     WHERE e.archive_id = %(id)s AND e.kind = 'turn_start'
                       AND e.client_turn_id = wanted.id LIMIT 1) AS hit"""


def earlier_use_lookup(archive_id: uuid.UUID, events: list[Event]) -> tuple[str, dict[str, Any]]:
    """The statement that finds what of `events` the archive already holds (`earlier_use`)."""
    turn_ids = {e["client_turn_id"] for e in events if e["kind"] in ("turn_start", "run_link")}
    return _EARLIER_USE, {"id": archive_id, "ids": json.dumps([e["event_id"] for e in events]),
                          "turns": json.dumps(sorted(turn_ids))}


def earlier_use(rows: list[Any]) -> tuple[set[str], set[str]]:
    """The lookup's rows as (event ids already stored, turns an earlier batch started)."""
    return ({r.value for r in rows if r.what == "event"}, {r.value for r in rows if r.what == "turn"})


# ----------------------------------------------------------------------------- order and replay

def check_order(events: list[Event]) -> None:
    """Sequences ordered and contiguous, each event_id once; else 409."""
    first = events[0]["sequence"]
    if any(event["sequence"] != first + offset for offset, event in enumerate(events)):
        raise conflict("Sequences in a batch must be ordered and contiguous.")
    ids = [e["event_id"] for e in events]
    if len(set(ids)) != len(ids):
        raise conflict("An event_id occurs twice in the batch.")


def stored_replayed(db: Session, header: Any, events: list[Event]) -> dict[int, tuple[str, str]]:
    """(event_id, digest) by sequence of the stored events this batch repeats; read only when it
    repeats any."""
    first, last = events[0]["sequence"], events[-1]["sequence"]
    if first > header.last_sequence:
        return {}
    rows = db.execute(text("""
        SELECT sequence, event_id, body_sha256 FROM bz_agent_conversation_events
        WHERE archive_id = :id AND sequence BETWEEN :first AND :last"""),
        {"id": header.id, "first": first, "last": min(last, header.last_sequence)})
    return {r.sequence: (r.event_id, r.body_sha256) for r in rows}


def split_replayed(events: list[Event], hashes: list[str], last_sequence: int,
                   stored: dict[int, tuple[str, str]]) -> list[NewEvent]:
    """The events after `last_sequence` with their digests, once every earlier one is found
    identical in `stored` (an identical retry); and they must continue the archive. Else 409."""
    new: list[NewEvent] = []
    for event, digest in zip(events, hashes):
        if event["sequence"] > last_sequence:
            new.append((event, digest))
        elif stored.get(event["sequence"]) != (event["event_id"], digest):
            raise conflict(f"Event {event['sequence']} differs from the stored event.")
    if new and new[0][0]["sequence"] != last_sequence + 1:
        raise conflict(f"The next sequence is {last_sequence + 1}.")
    return new


# ----------------------------------------------------------------------------- limits and ids

def check_limits(stored_events: int, stored_text_bytes: int, new: list[NewEvent]) -> int:
    """The bytes of text of the new events, once the archive can hold them and it; else 413."""
    if stored_events + len(new) > limits.AUDIT_ARCHIVE_MAX_EVENTS:
        raise _too_many_events()
    new_bytes = sum(len(e.get("content", "").encode("utf-8")) for e, _ in new)
    if stored_text_bytes + new_bytes > limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES:
        raise limit_error(f"An archive holds at most {limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES} bytes of text.",
                          max_archive_text_bytes=limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES)
    return new_bytes


def check_ids_unused(new: list[NewEvent], stored_ids: set[str]) -> None:
    reused = next((e["event_id"] for e, _ in new if e["event_id"] in stored_ids), None)
    if reused is not None:
        raise conflict(f"event_id {reused} is already used in this archive.")


# ----------------------------------------------------------------------------- turns

@dataclass(frozen=True)
class TurnOutcome:
    """The header's turn state and counters after a batch's new events, or why one is refused.
    `checked` events passed: all of them, or those before the one `conflict` refuses."""

    running: str | None
    status: str | None
    messages: int
    turns: int
    checked: int
    conflict: str | None = None


def apply_turns(running: str | None, status: str | None, started_before: set[str],
                events: list[Event]) -> TurnOutcome:
    """Run the new events through the turn state machine, from the header's running turn and
    last status: one turn runs at a time, each turn starts once, messages and its end belong to
    the running turn; a run_link may attach late, to any started turn, and changes nothing."""
    started = set(started_before)
    messages = turns = 0
    for index, event in enumerate(events):
        kind, turn, event_id = event["kind"], event["client_turn_id"], event["event_id"]
        problem = None
        if kind == "turn_start":
            if running is not None:
                problem = f"Turn {running} is still running; end it before starting another."
            elif turn in started:
                problem = f"Turn {turn} was already started in this archive."
            else:
                started.add(turn)
                running, status, turns = turn, "running", turns + 1
        elif kind in MESSAGE_KINDS:
            if running != turn:
                problem = f"{kind} {event_id} is not in the current running turn."
            else:
                messages += 1
        elif kind == "turn_end":
            if running != turn:
                problem = f"turn_end {event_id} does not end the current running turn."
            else:
                running, status = None, event["status"]
        elif turn not in started:  # run_link
            problem = f"run_link {event_id} names a turn that was never started."
        if problem is not None:
            return TurnOutcome(running, status, messages, turns, checked=index, conflict=problem)
    return TurnOutcome(running, status, messages, turns, checked=len(events))


# ----------------------------------------------------------------------------- run links

def _lock_linked_runs(db: Session, links: list[Event]) -> None:
    """Serialise the linking of each run across archives (each batch holds only its own archive's
    lock): a second link of a run waits for the first to commit, then sees it and answers 409
    instead of failing on the unique index at commit. Sorted, so two batches linking the same
    runs cannot deadlock."""
    for run_id in sorted({e["run_id"] for e in links}):
        db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:run, 58))"), {"run": run_id})


def verify_run_links(db: Session, archive: CheckedArchive, links: list[Event]) -> dict[str, int]:
    """The thread of each link's run by event_id, in order, each run checked against the member
    the link names and found linked nowhere yet; else 409."""
    return {event["event_id"]: _verify_run_link(db, archive, event) for event in links}


def _verify_run_link(db: Session, archive: CheckedArchive, event: Event) -> int:
    header = archive.header
    member = next((m for m in archive.members if str(m.session_id) == event["member_session_id"]), None)
    if member is None:
        raise conflict(f"run_link {event['event_id']}: member_session_id is not a member of this archive.")
    run = run_for_link(db, uuid.UUID(event["run_id"]))
    app = member.client_app_id or header.client_app_id
    route = member.route_key or header.route_key
    if (run is None or str(run.session_id) != str(member.session_id) or run.client_app_id != app
            or run.route_key != route or run.client_conversation_id != header.client_conversation_id
            or run.client_turn_id != event["client_turn_id"]):
        raise conflict(f"run_link {event['event_id']}: the run does not belong to this member's "
                       "conversation turn.")
    linked = db.execute(text("""
        SELECT archive_id FROM bz_agent_conversation_events WHERE run_id = :run"""),
        {"run": run.id}).first()
    if linked is not None:
        raise conflict(f"run_link {event['event_id']}: the run is already linked to an archive.")
    return run.thread_id


def check_runs_linked_once(rows: list[Event]) -> None:
    """Within the batch: the stored links were checked one by one, the batch's own only here."""
    run_ids = [r["run_id"] for r in rows if "run_id" in r]
    if len(set(run_ids)) != len(run_ids):
        raise conflict("A run may be linked only once.")


# ----------------------------------------------------------------------------- the write

# The whole batch in one statement (the rows as one JSON array), then the header's counters.
_INSERT = """
    INSERT INTO bz_agent_conversation_events
        (archive_id, sequence, event_id, client_turn_id, kind, content, status, run_id,
         member_session_id, thread_id, body_sha256, content_salt)
    SELECT %(archive)s, sequence, event_id, client_turn_id, kind, content, status, run_id,
           member_session_id, thread_id, body_sha256, decode(content_salt, 'hex')
      FROM json_to_recordset(%(rows)s::json) AS r(
           sequence integer, event_id text, client_turn_id text, kind text, content text,
           status text, run_id uuid, member_session_id uuid, thread_id bigint, body_sha256 text,
           content_salt text)"""
_UPDATE_HEADER = """
    UPDATE bz_agent_conversation_archives
       SET last_sequence = %(last)s, message_count = message_count + %(messages)s,
           turn_count = turn_count + %(turns)s, text_bytes = text_bytes + %(bytes)s,
           running_turn_id = %(running)s, last_turn_status = %(status)s, updated_at = now()
     WHERE id = %(id)s"""


def write_batch(db: Session, archive: CheckedArchive, rows: list[Event], turns: TurnOutcome,
                new_bytes: int, last_seq: int) -> None:
    """Store the rows (each validated event with its thread and digest; absent columns are NULL),
    the header's new counters and the events' leaves in the evidence log (each message with a new
    salt its leaf commits through), all sent with the COMMIT."""
    header_id = archive.header.id
    archive_text = str(header_id)  # once, not twice per event (the leaves' formulas take its text)
    leaves = []
    for row in rows:
        commitment = None
        if "content" in row:
            salt = evidence_leaves.new_salt()
            row["content_salt"] = salt.hex()
            commitment = evidence_leaves.commitment(salt, row["content"])
        leaves.append((evidence_leaves.EVENT, evidence_leaves.event_ref(archive_text, row["sequence"]),
                       evidence_leaves.event_data(archive_text, row, commitment)))
    at_commit(db, (_INSERT, {"rows": json.dumps(rows, ensure_ascii=False), "archive": header_id}),
              (_UPDATE_HEADER, {"last": last_seq, "messages": turns.messages, "turns": turns.turns,
                                "bytes": new_bytes, "running": turns.running, "status": turns.status,
                                "id": header_id}))
    evidence_log.append_at_commit(db, leaves)  # last: the log's lock is held from here to COMMIT
    metrics.events_appended(db, len(rows))  # counted once this batch commits
