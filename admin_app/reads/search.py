"""The console's search across archives (runs:read): archives by ID prefix, conversation, member
label, principal, tenant, app, route, state and last turn, sorted and keyset-paged; the messages
whose content holds a term; totals counted up to a cap.

Every condition is an index read (sql/065): UUID prefixes are ranges on the primary keys,
substrings use trigram indexes, so a search costs what its matches cost and never scans all
events. Filters arrive already checked by the console (values of the right shape)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.archives import HEADER_COLUMNS
from .ids import id_range

FILTERS = ("q", "principal", "tenant", "state", "app", "route", "status", "date", "from", "to")
# Sortable columns of the list; every sort pages on (column, id).
SORTS = {"updated": "a.updated_at", "created": "a.created_at", "events": "a.last_sequence"}
# Trigram indexes need three characters; a shorter term would read every message.
CONTENT_MIN_CHARS = 3
# Totals are exact up to these caps, then shown as "more than".
ARCHIVE_COUNT_CAP = 1_000
MESSAGE_COUNT_CAP = 1_000
# A hit shows this much of its message around the first match.
SNIPPET_BEFORE, SNIPPET_CHARS = 60, 220

SearchCursor = tuple[Any, uuid.UUID]        # (sort column value, archive id)
HitCursor = tuple[uuid.UUID, int]           # (archive id, sequence)


@dataclass(frozen=True)
class Total:
    count: int
    capped: bool  # True: there are more than `count`


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _in_range(column: str, name: str, bounds: tuple[uuid.UUID, uuid.UUID | None],
              params: dict[str, Any]) -> str:
    params[name + "_low"], high = bounds
    if high is None:
        return f"{column} >= :{name}_low"
    params[name + "_high"] = high
    return f"{column} >= :{name}_low AND {column} < :{name}_high"


def _archive_conditions(filters: dict[str, str], params: dict[str, Any], *, with_q: bool) -> list[str]:
    """SQL conditions on archive `a` for the filters; `q` as an identity only `with_q`."""
    where = ["TRUE"]
    for key, column in (("state", "a.state"), ("app", "a.client_app_id"), ("route", "a.route_key")):
        if filters.get(key):
            where.append(f"{column} = :{key}")
            params[key] = filters[key]
    if filters.get("status") == "none":
        where.append("a.last_turn_status IS NULL")
    elif filters.get("status"):
        where.append("a.last_turn_status = :status")
        params["status"] = filters["status"]
    # A member's principal is frozen when it confirms, so only confirmed members have one. The
    # index (field, archive_id) answers this alone, in archive order (sql/070).
    for key, field in (("principal", "id"), ("tenant", "tenant")):
        if filters.get(key):
            where.append(f"""a.id IN (SELECT archive_id FROM bz_agent_conversation_members
                                       WHERE principal ->> '{field}' = :{key})""")  # noqa: S608 - constant identifiers, bound values
            params[key] = filters[key]
    column = "a.created_at" if filters.get("date") == "created" else "a.updated_at"
    if filters.get("from"):
        where.append(f"{column} >= CAST(:from_date AS date)")
        params["from_date"] = filters["from"]
    if filters.get("to"):
        where.append(f"{column} < CAST(:to_date AS date) + 1")
        params["to_date"] = filters["to"]
    if with_q and filters.get("q"):
        where.append(_identity(filters["q"], params))
    return where


def _identity(q: str, params: dict[str, Any]) -> str:
    """Archives whose id, client archive id or a member's session id starts with `q`, or whose
    client conversation id or a member's label contains it. One index read per branch."""
    params["q_like"] = _like(q)
    branches = ["SELECT id FROM bz_agent_conversation_archives WHERE client_conversation_id ILIKE :q_like ESCAPE '\\'",
                "SELECT archive_id FROM bz_agent_conversation_members WHERE label ILIKE :q_like ESCAPE '\\'"]
    bounds = id_range(q)
    if bounds is not None:
        for table, key, column in (("archives", "id", "id"), ("archives", "id", "client_archive_id"),
                                   ("members", "archive_id", "session_id")):
            where = _in_range(column, "q", bounds, params)
            branches.append(f"SELECT {key} FROM bz_agent_conversation_{table} WHERE {where}")  # noqa: S608 - constant identifiers, bound values
    return "a.id IN (" + " UNION ALL ".join(branches) + ")"


def search_archives(db: Session, filters: dict[str, str], cursor: SearchCursor | None, limit: int, *,
                    sort: str = "updated", descending: bool = True) -> tuple[list[Row[Any]], SearchCursor | None]:
    """Archives filtered and sorted by `sort` (then id, the same way); keyset paging, so the
    hundredth page costs what the first does. Returns (rows, next cursor)."""
    params: dict[str, Any] = {"limit": limit + 1}
    where = _archive_conditions(filters, params, with_q=True)
    column = SORTS[sort]
    if cursor is not None:
        where.append(f"({column}, a.id) {'<' if descending else '>'} (:cursor_value, :cursor_id)")
        params["cursor_value"], params["cursor_id"] = cursor
    order = "DESC" if descending else "ASC"
    columns = ", ".join("a." + c.strip() for c in HEADER_COLUMNS.split(","))
    rows = list(db.execute(text(f"""
        SELECT {columns}, {column} AS sort_value FROM bz_agent_conversation_archives a
        WHERE {' AND '.join(where)}
        ORDER BY {column} {order}, a.id {order} LIMIT :limit"""), params))  # noqa: S608 - constant identifiers, bound values
    next_cursor = (rows[limit - 1].sort_value, rows[limit - 1].id) if len(rows) > limit else None
    return rows[:limit], next_cursor


def count_archives(db: Session, filters: dict[str, str]) -> Total:
    params: dict[str, Any] = {"cap": ARCHIVE_COUNT_CAP + 1}
    given = {k for k, v in filters.items() if v and k in FILTERS}
    if given in ({"principal"}, {"tenant"}):
        # A principal's or tenant's archives alone: counted from the member index (sql/070),
        # without the join to the archives that other filters need.
        (key,) = given
        params[key] = filters[key]
        found = db.scalar(text(f"""SELECT count(*) FROM (SELECT DISTINCT archive_id FROM bz_agent_conversation_members
                                    WHERE principal ->> '{"id" if key == "principal" else "tenant"}' = :{key}
                                    LIMIT :cap) s"""), params)  # noqa: S608 - constant identifiers, bound values
        return _total(found or 0, ARCHIVE_COUNT_CAP)
    where = _archive_conditions(filters, params, with_q=True)
    found = db.scalar(text(f"""SELECT count(*) FROM (SELECT 1 FROM bz_agent_conversation_archives a
                                WHERE {' AND '.join(where)} LIMIT :cap) s"""), params)  # noqa: S608 - constant identifiers, bound values
    return _total(found or 0, ARCHIVE_COUNT_CAP)


def searches_content(filters: dict[str, str]) -> bool:
    return len(filters.get("q", "")) >= CONTENT_MIN_CHARS


def _message_conditions(filters: dict[str, str], params: dict[str, Any]) -> list[str]:
    # `content IS NOT NULL` lets the planner use the partial trigram index.
    params["term_like"] = _like(filters["q"])
    return ["e.content IS NOT NULL", "e.content ILIKE :term_like ESCAPE '\\'",
            *_archive_conditions(filters, params, with_q=False)]


def search_messages(db: Session, filters: dict[str, str], cursor: HitCursor | None,
                    limit: int) -> tuple[list[Row[Any]], HitCursor | None]:
    """Messages whose content contains `q`, in archives that match the other filters, by archive
    then sequence (hits of one conversation together, in transcript order). Each row carries an
    excerpt around the first match instead of the whole (up to 64,000-character) content."""
    params: dict[str, Any] = {"limit": limit + 1, "term": filters["q"], "before": SNIPPET_BEFORE,
                              "chars": SNIPPET_CHARS}
    where = _message_conditions(filters, params)
    if cursor is not None:
        where.append("(e.archive_id, e.sequence) > (:cursor_archive, :cursor_sequence)")
        params["cursor_archive"], params["cursor_sequence"] = cursor
    rows = list(db.execute(text(f"""
        SELECT archive_id, sequence, kind, created_at, client_conversation_id, length,
               substr(content, start, :chars) AS excerpt, start > 1 AS cut_before,
               start + :chars <= length AS cut_after
        FROM (SELECT e.archive_id, e.sequence, e.kind, e.created_at, e.content, a.client_conversation_id,
                     length(e.content) AS length,
                     greatest(strpos(lower(e.content), lower(:term)) - :before, 1) AS start
              FROM bz_agent_conversation_events e
              JOIN bz_agent_conversation_archives a ON a.id = e.archive_id
              WHERE {' AND '.join(where)}
              ORDER BY e.archive_id, e.sequence LIMIT :limit) hits
        ORDER BY archive_id, sequence"""), params))  # noqa: S608 - constant identifiers, bound values
    next_cursor = (rows[limit - 1].archive_id, rows[limit - 1].sequence) if len(rows) > limit else None
    return rows[:limit], next_cursor


def count_messages(db: Session, filters: dict[str, str]) -> Total:
    params: dict[str, Any] = {"cap": MESSAGE_COUNT_CAP + 1}
    where = _message_conditions(filters, params)
    found = db.scalar(text(f"""SELECT count(*) FROM (SELECT 1 FROM bz_agent_conversation_events e
                                JOIN bz_agent_conversation_archives a ON a.id = e.archive_id
                                WHERE {' AND '.join(where)} LIMIT :cap) s"""), params)  # noqa: S608 - constant identifiers, bound values
    return _total(found or 0, MESSAGE_COUNT_CAP)


def _total(found: int, cap: int) -> Total:
    return Total(cap, True) if found > cap else Total(found, False)


def hit_view(row: Any) -> dict[str, Any]:
    """A matching message: where it is, and the excerpt around its first match (plain text; the
    console escapes and marks it)."""
    role = {"user_message": "user", "assistant_message": "assistant"}.get(row.kind, row.kind)
    return {"archive_id": str(row.archive_id), "client_conversation_id": row.client_conversation_id,
            "sequence": row.sequence, "role": role, "created_at": iso(row.created_at),
            "excerpt": row.excerpt or "", "cut_before": row.cut_before, "cut_after": row.cut_after}


def filter_choices(db: Session) -> tuple[list[str], list[str]]:
    """The client app ids and the route keys the search can be filtered by, each sorted."""
    apps = list(db.scalars(text("SELECT app_id FROM bz_client_apps ORDER BY app_id")))
    routes = list(db.scalars(text("SELECT route_key FROM bz_routes ORDER BY route_key")))
    return apps, routes
