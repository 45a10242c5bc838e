"""Erasure of one principal's messages across archives, refused while a legal hold applies.

Whose messages: only an archive's writer appends, so a message belongs to the member whose turn
it is. A turn with a run_link is the turn of the member(s) it links (member_session_id); a turn
without one is the writer's (the creator session). Both the user's and the assistant's messages
of such a turn are erased: the answer quotes and restates the question. In an archive with one
member, that is every message. The principal's members are those whose frozen principal id
(bz_agent_conversation_members.principal ->> 'id') is the one named.

Refused (409 legal_hold_applies, nothing written) when an active hold names the principal or
covers any archive the principal is a member of. A refusal leaves no row: the admin API's
refusals roll their transaction back (tests/test_fuzz_api.py), and the refusal is the answer.
A done request is a bz_erasure_requests row (state done, counts); its redactions name it
(basis erasure, basis_ref its id)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.availability import require_archives
from ..conversation_audit.redaction import redact
from ..errors import ApiError, invalid_request
from ..validation import Checker
from . import holds, values
from .audit import Door, record

KIND = "erasure_request"

# The principal's memberships: (archive, session) pairs.
_MEMBERS = text("""
    SELECT archive_id, session_id FROM bz_agent_conversation_members
     WHERE principal ->> 'id' = :principal ORDER BY archive_id""")
# The messages of the turns that are the principal's (see the module's note).
_MESSAGES = text("""
    WITH mine AS (
        SELECT archive_id, session_id FROM bz_agent_conversation_members WHERE principal ->> 'id' = :principal)
    SELECT e.archive_id, e.sequence
      FROM bz_agent_conversation_events e
      JOIN bz_agent_conversation_archives a ON a.id = e.archive_id
     WHERE e.archive_id IN (SELECT archive_id FROM mine)
       AND e.kind IN ('user_message', 'assistant_message') AND e.content IS NOT NULL
       AND (EXISTS (SELECT 1 FROM bz_agent_conversation_events l JOIN mine ON mine.archive_id = l.archive_id
                     WHERE l.archive_id = e.archive_id AND l.client_turn_id = e.client_turn_id
                       AND l.kind = 'run_link' AND l.member_session_id = mine.session_id)
            OR (a.creator_session_id IN (SELECT session_id FROM mine WHERE mine.archive_id = e.archive_id)
                AND NOT EXISTS (SELECT 1 FROM bz_agent_conversation_events l
                                 WHERE l.archive_id = e.archive_id AND l.client_turn_id = e.client_turn_id
                                   AND l.kind = 'run_link')))
     ORDER BY e.archive_id, e.sequence""")
_COLUMNS = "id, principal_id, reason, requested_by, requested_at, state, refused_because, redacted, archives"


def view(row: Any) -> dict[str, Any]:
    return {"id": row.id, "principal_id": row.principal_id, "reason": row.reason, "requested_by": row.requested_by,
            "requested_at": iso(row.requested_at), "state": row.state, "redacted": row.redacted,
            "archives": row.archives}


def parse(body: dict[str, Any]) -> tuple[str, str]:
    """{principal_id, reason}."""
    checker = Checker()
    checker.obj(body, "", required=("principal_id", "reason"))
    principal = values.name(checker, body["principal_id"], "principal_id") if "principal_id" in body else None
    why = values.reason(checker, body["reason"], "reason") if "reason" in body else None
    if checker.problems:
        raise invalid_request(checker)
    assert principal is not None and why is not None
    return principal, why


def request_erasure(db: Session, door: Door, principal_id: str, reason: str) -> dict[str, Any]:
    """Erase now, in the caller's transaction, or refuse with nothing written."""
    require_archives(db)
    holds.lock_shared(db)
    member_of = sorted({r.archive_id for r in db.execute(_MEMBERS, {"principal": principal_id})})
    covering = holds.covering(db, member_of)
    named = holds.on_principal(db, principal_id)
    if covering or named:
        hold_ids = sorted(set(named) | {h for ids in covering.values() for h in ids})
        raise ApiError("legal_hold_applies",
                       f"Legal hold {', '.join(f'#{h}' for h in hold_ids)} covers this principal's messages "
                       f"in {len(covering)} archive(s); nothing was erased.",
                       holds=hold_ids, archives=[str(a) for a in sorted(covering)])
    row = db.execute(text(f"INSERT INTO bz_erasure_requests (principal_id, reason, requested_by, state) "  # noqa: S608
                          f"VALUES (:p, :reason, :by, 'done') RETURNING {_COLUMNS}"),
                     {"p": principal_id, "reason": reason, "by": door.by}).one()
    messages = [(r.archive_id, r.sequence) for r in db.execute(_MESSAGES, {"principal": principal_id})]
    done = redact(db, messages, "erasure", str(row.id), door.by)
    row = db.execute(text(f"UPDATE bz_erasure_requests SET redacted = :n, archives = :a WHERE id = :id "  # noqa: S608
                          f"RETURNING {_COLUMNS}"), {"n": done.count, "a": done.archives, "id": row.id}).one()
    record(db, door, KIND, str(row.id), None, row._mapping)
    return view(row)


def list_requests(db: Session, limit: int) -> list[dict[str, Any]]:
    rows = db.execute(text(f"SELECT {_COLUMNS} FROM bz_erasure_requests "  # noqa: S608 - constant columns
                           "ORDER BY requested_at DESC, id DESC LIMIT :n"), {"n": limit})
    return [view(r) for r in rows]
