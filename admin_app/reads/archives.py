"""Archive reads (runs:read) for the admin API and the console: the archive list, one archive's
header and members, and its events page by page (the console's search is in reads/search.py).
Event pages are keyset reads on the primary key (archive_id, sequence), so a page at the end of a
20,000-event archive costs what the first does."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso
from ..conversation_audit.archives import HEADER_COLUMNS, header_view, not_found
from ..conversation_audit.availability import Availability

LIST_SCHEMA = "bailing.agent-conversation-audit-list.v1"
DETAIL_SCHEMA = "bailing.agent-conversation-audit-detail.v1"
# Paging parameters are clamped into these ranges, never refused for being outside them.
LIST_LIMIT = limits.AUDIT_LIST_LIMIT
EVENTS_LIMIT = limits.AUDIT_EVENTS_LIMIT


def list_archives(db: Session, limit: int, offset: int) -> dict[str, Any]:
    rows = list(db.execute(text(f"""
        SELECT {HEADER_COLUMNS} FROM bz_agent_conversation_archives
        ORDER BY updated_at DESC, id LIMIT :limit OFFSET :offset"""),  # noqa: S608 - constant identifiers, bound values
        {"limit": limit + 1, "offset": offset}))
    has_more = len(rows) > limit
    return {"schema": LIST_SCHEMA, "items": [header_view(r) for r in rows[:limit]],
            "has_more": has_more, "next_offset": offset + limit if has_more else None}


def archive_header(db: Session, archive_id: uuid.UUID) -> Row[Any] | None:
    """The archive's header row (HEADER_COLUMNS), or None when there is no such archive."""
    return db.execute(text(f"SELECT {HEADER_COLUMNS} FROM bz_agent_conversation_archives WHERE id = :id"),  # noqa: S608 - constant identifiers, bound values
                      {"id": archive_id}).first()


def member_view(row: Any, available: Availability) -> dict[str, Any]:
    # An unlabelled member is shown by its session id.
    view = {"session_id": str(row.session_id), "display_label": row.label or str(row.session_id),
            "confirmed": row.confirmed_at is not None}
    if row.confirmed_at is not None:
        view["principal"] = row.principal
        view["on_behalf_of"] = row.on_behalf_of
    # Binding fields only where recorded: NULL in a legacy v1 row proves nothing, so it is omitted.
    if available.cross_binding:
        for key in ("client_app_id", "client_name", "route_key"):
            if getattr(row, key) is not None:
                view[key] = getattr(row, key)
    return view


def member_views(db: Session, archive_id: uuid.UUID, available: Availability, *,
                 confirmed_at: bool = False) -> list[dict[str, Any]]:
    """The archive's members in the order they were listed. With `confirmed_at`, each also says
    when it confirmed, as the console and its export show it (the admin API's detail has no such
    field)."""
    # The binding columns exist only once 058 is applied.
    bindings = ", client_app_id, client_name, route_key" if available.cross_binding else ""
    rows = db.execute(text(f"""
        SELECT session_id, label, confirmed_at, principal, on_behalf_of{bindings}
        FROM bz_agent_conversation_members WHERE archive_id = :id ORDER BY position"""),  # noqa: S608 - constant identifiers, bound values
        {"id": archive_id})
    views = []
    for row in rows:
        view = member_view(row, available)
        if confirmed_at:
            view["confirmed_at"] = iso(row.confirmed_at)
        views.append(view)
    return views


# Events with, for a message whose text was removed (retention, erasure), its redaction's record.
_EVENTS = """
        SELECT e.sequence, e.event_id, e.client_turn_id, e.kind, e.content, e.status, e.run_id,
               e.member_session_id, e.thread_id, e.created_at,
               r.redacted_at, r.basis, r.basis_ref, r.actor
        FROM bz_agent_conversation_events e
        LEFT JOIN bz_evidence_redactions r ON r.archive_id = e.archive_id AND r.sequence = e.sequence"""


def event_view(row: Any) -> dict[str, Any]:
    view = {"event_id": row.event_id, "sequence": row.sequence, "client_turn_id": row.client_turn_id,
            "kind": row.kind}
    if row.kind in ("user_message", "assistant_message"):
        view["content"] = row.content
        if getattr(row, "redacted_at", None) is not None:
            # null content: removed, when, under what (retention run and policy, or erasure
            # request) and by whom.
            view["redaction"] = {"redacted_at": iso(row.redacted_at), "basis": row.basis,
                                 "basis_ref": row.basis_ref, "actor": row.actor}
    elif row.kind == "turn_end":
        view["status"] = row.status
    elif row.kind == "run_link":
        view.update(run_id=str(row.run_id), member_session_id=str(row.member_session_id),
                    thread_id=row.thread_id)
    view["created_at"] = iso(row.created_at)
    return view


def event_page(db: Session, archive_id: uuid.UUID, after_sequence: int, limit: int,
               upto: int) -> tuple[list[Row[Any]], bool]:
    """Events after `after_sequence` and none beyond `upto`, the `last_sequence` of the header the
    caller read: each statement sees its own snapshot, and a batch committed after the header was
    read must not show beyond it. (Events are append-only and a batch commits with its header
    update, so everything up to a read header is there.)"""
    rows = list(db.execute(text(_EVENTS + """
        WHERE e.archive_id = :id AND e.sequence > :after AND e.sequence <= :upto
        ORDER BY e.sequence LIMIT :limit"""),
        {"id": archive_id, "after": after_sequence, "limit": limit + 1, "upto": upto}))
    return rows[:limit], len(rows) > limit


def events_before(db: Session, archive_id: uuid.UUID, before_sequence: int, limit: int,
                  upto: int) -> tuple[list[Row[Any]], bool]:
    """The `limit` events just before `before_sequence` (none beyond `upto`), in ascending order,
    and whether earlier ones remain: the same keyset read as event_page, walked backwards."""
    rows = list(db.execute(text(_EVENTS + """
        WHERE e.archive_id = :id AND e.sequence < :before AND e.sequence <= :upto
        ORDER BY e.sequence DESC LIMIT :limit"""),
        {"id": archive_id, "before": before_sequence, "limit": limit + 1, "upto": upto}))
    return rows[:limit][::-1], len(rows) > limit


def event_window(db: Session, archive_id: uuid.UUID, at: int, before: int, after: int,
                 upto: int) -> tuple[list[Row[Any]], bool, bool]:
    """Up to `before` events before `at`, then `at` and up to `after - 1` events after it:
    (rows, earlier ones remain, later ones remain). Two keyset reads, so a window at the end of a
    long archive costs what one at its start does."""
    earlier, more_before = events_before(db, archive_id, at, before, upto)
    later, more_after = event_page(db, archive_id, at - 1, after, upto)
    return earlier + later, more_before, more_after


# A search inside one archive. Its events are read in sequence order and filtered as they come:
# the subquery's OFFSET 0 stops the planner from answering the filter with the trigram index,
# which covers every archive, so it would cost what the word costs in all of them (a million rows
# for a common word at ten million events), where this costs at most the archive's own events.
IN_ARCHIVE_COUNT = """
    SELECT count(*) FROM (
        SELECT 1 FROM (SELECT content FROM bz_agent_conversation_events
                       WHERE archive_id = :id AND sequence <= :upto OFFSET 0) e
        WHERE content ILIKE :q ESCAPE '\\' LIMIT :cap) hits"""
IN_ARCHIVE_PAGE = """
    SELECT sequence, kind, content FROM (
        SELECT sequence, kind, content FROM bz_agent_conversation_events
        WHERE archive_id = :id AND sequence > :after AND sequence <= :upto ORDER BY sequence OFFSET 0) e
    WHERE content ILIKE :q ESCAPE '\\' ORDER BY sequence LIMIT :limit"""


def search_in_archive(db: Session, archive_id: uuid.UUID, query: str, after_sequence: int, limit: int,
                      upto: int, count_cap: int) -> tuple[list[Row[Any]], bool, int]:
    """Messages of one archive whose content contains `query` (case-insensitive), after
    `after_sequence`: (rows, more remain, how many match in all, counted up to `count_cap + 1`
    so that a word in every message costs no more than a rare one)."""
    pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    params = {"id": archive_id, "upto": upto, "q": pattern, "after": after_sequence, "limit": limit + 1,
              "cap": count_cap + 1}
    total = db.execute(text(IN_ARCHIVE_COUNT), params).scalar_one()
    rows = list(db.execute(text(IN_ARCHIVE_PAGE), params))
    return rows[:limit], len(rows) > limit, total


def archive_detail(db: Session, archive_id: uuid.UUID, after_sequence: int, limit: int,
                   available: Availability) -> dict[str, Any]:
    """The admin API's detail: header, members and one page of events; 404 for no such archive."""
    header = archive_header(db, archive_id)
    if header is None:
        raise not_found()
    members = member_views(db, archive_id, available)
    page, has_more = event_page(db, archive_id, after_sequence, limit, header.last_sequence)
    return {
        "schema": DETAIL_SCHEMA,
        "conversation": header_view(header),
        "members": members,
        "events": [event_view(e) for e in page],
        "has_more": has_more,
        # Always a number: where the next page starts, even past the end.
        "next_after_sequence": page[-1].sequence if page else after_sequence,
    }


def run_audit_link(db: Session, run_id: uuid.UUID, available: Availability) -> dict[str, Any]:
    """`conversation_audit_id` and `client_turn_id` of a run once an archive links it."""
    if not available.archives:
        return {}
    row = db.execute(text("""
        SELECT archive_id, client_turn_id FROM bz_agent_conversation_events WHERE run_id = :run"""),
        {"run": run_id}).first()
    if row is None:
        return {}
    return {"conversation_audit_id": str(row.archive_id), "client_turn_id": row.client_turn_id}
