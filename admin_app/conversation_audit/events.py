"""Appending visible events: ordered, contiguous, atomic batches by the writer alone.

The archive row is locked for the whole batch, so concurrent writers queue and each sees the
sequence the previous one left. Every event of a batch is checked before any is stored; an
identical retry of stored events succeeds with the same acknowledgement, anything else that
disagrees with what is stored is a 409 with nothing written.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import sha256_json
from ..db import at_commit
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession
from ..observability import metrics
from ..runtime.models import Run
from ..validation import SAFE_INTEGER_MAX, Checker, client_text, join
from .archives import (conflict, group_bindings, limit_error, locked_archive_for_member,
                       not_found, parse_archive_id)
from .availability import Availability
from .members import check_locked
from .values import client_id, uuid_value

ACK = "bailing.agent-conversation-audit-ack.v1"
BATCH_MAX = limits.AUDIT_BATCH_MAX_EVENTS
TEXT_MAX_UNITS = limits.AUDIT_TEXT_MAX_UNITS
BATCH_TEXT_MAX_BYTES = limits.AUDIT_BATCH_TEXT_MAX_BYTES
ARCHIVE_MAX_EVENTS = limits.AUDIT_ARCHIVE_MAX_EVENTS
ARCHIVE_MAX_TEXT_BYTES = limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES
ENVELOPE_MAX_BYTES = limits.AUDIT_ENVELOPE_MAX_BYTES

EXTRA_FIELDS = {
    "turn_start": (),
    "user_message": ("content",),
    "assistant_message": ("content",),
    "run_link": ("run_id", "member_session_id"),
    "turn_end": ("status",),
}
BASE_FIELDS = ("event_id", "sequence", "client_turn_id", "kind")
TURN_END_STATUSES = ("completed", "failed", "cancelled")


def _validate(body: dict) -> list[dict]:
    """The batch, normalised (UUIDs lower-cased). A broken rule is a 400, a passed limit a 413;
    events are checked in order and the first that fails answers, as in Core."""
    checker = Checker()
    checker.obj(body, "", required=("events",))
    events = body.get("events")
    if not isinstance(events, list) or not 1 <= len(events) <= BATCH_MAX:
        checker.add("events", f"must be a list of 1 to {BATCH_MAX} events")
        raise invalid_request(checker)
    normalised: list[dict] = []
    batch_bytes = 0
    for i, event in enumerate(events):
        path = join("events", i)
        kind = event.get("kind") if isinstance(event, dict) else None
        if isinstance(event, dict) and not (isinstance(kind, str) and kind in EXTRA_FIELDS):
            checker.add(join(path, "kind"), "must be one of " + ", ".join(EXTRA_FIELDS))
            continue
        if checker.obj(event, path, required=BASE_FIELDS + EXTRA_FIELDS.get(kind, ())) is None:
            continue
        if "sequence" in event:
            sequence = checker.integer(event["sequence"], join(path, "sequence"), minimum=1,
                                       maximum=SAFE_INTEGER_MAX)
            if sequence is not None and sequence > ARCHIVE_MAX_EVENTS and not checker.problems:
                raise limit_error(f"An archive holds at most {ARCHIVE_MAX_EVENTS} events.",
                                  max_events=ARCHIVE_MAX_EVENTS)
        for key in ("event_id", "client_turn_id"):
            if key in event:
                client_id(checker, event[key], join(path, key))
        clean = dict(event)
        if "content" in event:
            if client_text(checker, event["content"], join(path, "content"), TEXT_MAX_UNITS) is not None:
                batch_bytes += len(event["content"].encode("utf-8"))
        if "status" in event and event["status"] not in TURN_END_STATUSES:
            checker.add(join(path, "status"), "must be completed, failed or cancelled")
        for key in ("run_id", "member_session_id"):
            if key in event:
                clean[key] = uuid_value(checker, event[key], join(path, key))
        normalised.append(clean)
    if checker.problems:
        raise invalid_request(checker)
    if batch_bytes > BATCH_TEXT_MAX_BYTES:
        raise limit_error(f"A batch holds at most {BATCH_TEXT_MAX_BYTES} bytes of text.",
                          max_batch_text_bytes=BATCH_TEXT_MAX_BYTES)
    return normalised


def _stored(db: Session, archive_id: Any, first: int, last: int) -> dict[int, tuple[str, str]]:
    rows = db.execute(text("""
        SELECT sequence, event_id, body_sha256 FROM bz_agent_conversation_events
        WHERE archive_id = :id AND sequence BETWEEN :first AND :last"""),
        {"id": archive_id, "first": first, "last": last})
    return {r.sequence: (r.event_id, r.body_sha256) for r in rows}


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

# The whole batch in one statement (the rows as one JSON array), then the header's counters.
_INSERT = """
    INSERT INTO bz_agent_conversation_events
        (archive_id, sequence, event_id, client_turn_id, kind, content, status, run_id,
         member_session_id, thread_id, body_sha256)
    SELECT %(archive)s, sequence, event_id, client_turn_id, kind, content, status, run_id,
           member_session_id, thread_id, body_sha256
      FROM json_to_recordset(%(rows)s::json) AS r(
           sequence integer, event_id text, client_turn_id text, kind text, content text,
           status text, run_id uuid, member_session_id uuid, thread_id bigint, body_sha256 text)"""
_UPDATE_HEADER = """
    UPDATE bz_agent_conversation_archives
       SET last_sequence = %(last)s, message_count = message_count + %(messages)s,
           turn_count = turn_count + %(turns)s, text_bytes = text_bytes + %(bytes)s,
           running_turn_id = %(running)s, last_turn_status = %(status)s, updated_at = now()
     WHERE id = %(id)s"""


def _lock_linked_runs(db: Session, links: list[dict]) -> None:
    """Serialise the linking of each run across archives (each batch holds only its own archive's
    lock): a second link of a run waits for the first to commit, then sees it and answers 409
    instead of failing on the unique index at commit. Sorted, so two batches linking the same
    runs cannot deadlock."""
    for run_id in sorted({e["run_id"] for e in links}):
        db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:run, 58))"), {"run": run_id})


def _verify_run_link(db: Session, header: Any, members: list, event: dict) -> int:
    """The thread of the run, after checking it against the member it names; else 409."""
    member = next((m for m in members if str(m.session_id) == event["member_session_id"]), None)
    if member is None:
        raise conflict(f"run_link {event['event_id']}: member_session_id is not a member of this archive.")
    run = db.get(Run, uuid.UUID(event["run_id"]))
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


def append(db: Session, session: AgentSession, archive_ref: str, body: dict,
           available: Availability) -> dict:
    archive_id = parse_archive_id(archive_ref)
    try:
        events = _validate(body)
        refusal = None
    except ApiError as err:  # told only to the writer, once the archive is known to be theirs
        events, refusal = [], err
    turn_ids = {e["client_turn_id"] for e in events if e["kind"] in ("turn_start", "run_link")}
    header, members, locked, earlier = locked_archive_for_member(
        db, session, archive_id, available,
        (_EARLIER_USE, {"id": archive_id, "ids": json.dumps([e["event_id"] for e in events]),
                        "turns": json.dumps(sorted(turn_ids))}))
    if str(header.creator_session_id) != str(session.id):
        raise not_found()  # only the writer appends; others learn nothing more
    if refusal is not None:
        raise refusal
    if header.state != "ready":
        raise ApiError("conversation_audit_not_ready", "Some members have not confirmed yet.")
    check_locked(group_bindings(header, members), locked)

    first_seq = events[0]["sequence"]
    for offset, event in enumerate(events):
        if event["sequence"] != first_seq + offset:
            raise conflict("Sequences in a batch must be ordered and contiguous.")
    ids = [e["event_id"] for e in events]
    if len(set(ids)) != len(ids):
        raise conflict("An event_id occurs twice in the batch.")
    hashes = [sha256_json(e) for e in events]
    last_seq = first_seq + len(events) - 1
    replayed = first_seq <= header.last_sequence
    stored = _stored(db, header.id, first_seq, min(last_seq, header.last_sequence)) if replayed else {}
    new: list[tuple[dict, str]] = []
    for event, digest in zip(events, hashes):
        if event["sequence"] <= header.last_sequence:
            if stored.get(event["sequence"]) != (event["event_id"], digest):
                raise conflict(f"Event {event['sequence']} differs from the stored event.")
        else:
            new.append((event, digest))
    if not new:
        return {"schema": ACK, "conversation_id": str(header.id), "last_sequence": last_seq}
    if new[0][0]["sequence"] != header.last_sequence + 1:
        raise conflict(f"The next sequence is {header.last_sequence + 1}.")
    if header.last_sequence + len(new) > ARCHIVE_MAX_EVENTS:
        raise limit_error(f"An archive holds at most {ARCHIVE_MAX_EVENTS} events.",
                          max_events=ARCHIVE_MAX_EVENTS)
    new_bytes = sum(len(e.get("content", "").encode("utf-8")) for e, _ in new)
    if header.text_bytes + new_bytes > ARCHIVE_MAX_TEXT_BYTES:
        raise limit_error(f"An archive holds at most {ARCHIVE_MAX_TEXT_BYTES} bytes of text.",
                          max_archive_text_bytes=ARCHIVE_MAX_TEXT_BYTES)
    stored_ids = {r.value for r in earlier if r.what == "event"}
    started_before = {r.value for r in earlier if r.what == "turn"}
    reused = next((e["event_id"] for e, _ in new if e["event_id"] in stored_ids), None)
    if reused is not None:
        raise conflict(f"event_id {reused} is already used in this archive.")

    _lock_linked_runs(db, [e for e, _ in new if e["kind"] == "run_link"])
    running = header.running_turn_id
    status = header.last_turn_status
    started_here: set[str] = set()
    messages = turns = 0
    rows = []
    for event, digest in new:
        kind, turn = event["kind"], event["client_turn_id"]
        thread_id = None
        if kind == "turn_start":
            if running is not None:
                raise conflict(f"Turn {running} is still running; end it before starting another.")
            if turn in started_here or turn in started_before:
                raise conflict(f"Turn {turn} was already started in this archive.")
            started_here.add(turn)
            running, status, turns = turn, "running", turns + 1
        elif kind in ("user_message", "assistant_message"):
            if running != turn:
                raise conflict(f"{kind} {event['event_id']} is not in the current running turn.")
            messages += 1
        elif kind == "turn_end":
            if running != turn:
                raise conflict(f"turn_end {event['event_id']} does not end the current running turn.")
            running, status = None, event["status"]
        else:  # run_link: late links attach to any started turn and change no status
            if turn not in started_here and turn not in started_before:
                raise conflict(f"run_link {event['event_id']} names a turn that was never started.")
            thread_id = _verify_run_link(db, header, members, event)
        # The validated event holds only columns of the table (absent ones are stored as NULL).
        rows.append({**event, "thread_id": thread_id, "body_sha256": digest})
    run_ids = [r["run_id"] for r in rows if "run_id" in r]
    if len(set(run_ids)) != len(run_ids):
        raise conflict("A run may be linked only once.")
    at_commit(db, (_INSERT, {"rows": json.dumps(rows, ensure_ascii=False), "archive": header.id}),
              (_UPDATE_HEADER, {"last": last_seq, "messages": messages, "turns": turns,
                                "bytes": new_bytes, "running": running, "status": status,
                                "id": header.id}))
    metrics.events_appended(db, len(new))  # counted once this batch commits
    return {"schema": ACK, "conversation_id": str(header.id), "last_sequence": last_seq}

