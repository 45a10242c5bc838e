"""The one way the console's triage lists (runs, jobs) filter, look up and page: filtered by
status, client app, route and creation time; looked up by a prefix of any ID a row is known by,
each ID a branch that is an index range read stopping after one page, the page being the newest of
their union with each row saying what matched; keyset paged on (created_at, id)."""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, false, func, literal, select, tuple_, union_all
from sqlalchemy.orm import Session

from ..invocations.models import Invocation
from .ids import id_range

# Where the next page starts: the last row shown, as (created_at, id).
Key = tuple[datetime, uuid.UUID]


@dataclass(frozen=True)
class Filters:
    q: str = ""
    status: str = ""
    app: str = ""
    route: str = ""
    created_from: datetime | None = None
    created_to: datetime | None = None  # exclusive
    exact: tuple[tuple[str, str], ...] = ()  # (a key of the list's exact lookups, value)


@dataclass(frozen=True)
class Listing:
    """What one list pages over: `entity` has id, status, client_app_id, route_key, created_at;
    `exact` maps an exact lookup's name to its column (those in `uuid_keys` compare as UUIDs);
    `calls` is the condition joining the entity's tool calls (bz_tool_invocations)."""

    entity: Any
    exact: dict[str, Any]
    uuid_keys: frozenset[str]
    calls: Any
    matches: Sequence[str]


def like_prefix(value: str) -> str:
    """A LIKE pattern matching values that start with `value` (its wildcards taken literally)."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def parse_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def starts_with(column: Any, q: str) -> Any:
    """A UUID column's values whose text starts with `q`: a range of its btree (reads/ids.py);
    no UUID's text starts with what is no hex prefix."""
    bounds = id_range(q)
    if bounds is None:
        return false()
    low, high = bounds
    return column >= low if high is None else and_(column >= low, column < high)


def narrowed(listing: Listing, query: Select[Any], f: Filters, after: Key | None) -> Select[Any]:
    entity = listing.entity
    for key, value in f.exact:
        if key in listing.uuid_keys:  # a value that is not a UUID matches nothing
            ident = parse_uuid(value)
            query = query.where(listing.exact[key] == ident if ident is not None else false())
        else:
            query = query.where(listing.exact[key] == value)
    if f.status:
        query = query.where(entity.status == f.status)
    if f.app:
        query = query.where(entity.client_app_id == f.app)
    if f.route:
        query = query.where(entity.route_key == f.route)
    if f.created_from is not None:
        query = query.where(entity.created_at >= f.created_from)
    if f.created_to is not None:
        query = query.where(entity.created_at < f.created_to)
    if after is not None:
        query = query.where(tuple_(entity.created_at, entity.id) < after)
    return query


def recent(db: Session, listing: Listing, columns: Sequence[Any], branches: list[tuple[str, Any, bool]],
           f: Filters, after: Key | None, limit: int) -> tuple[list[dict[str, Any]], Key | None]:
    """Rows matching the filters (and the lookup's `branches` when `f.q` is set: what matched, its
    condition, whether through a tool call), newest first, after `after`; and the key to continue
    from, if more remain."""
    entity = listing.entity
    order = (entity.created_at.desc(), entity.id.desc())
    if not f.q:  # no lookup: the filters alone
        query = narrowed(listing, select(*columns), f, after).order_by(*order).limit(limit + 1)
        rows = [dict(r._mapping, matched=[]) for r in db.execute(query)]
    else:
        parts = []
        for what, condition, through_call in branches:
            part = select(entity.id.label("id"), entity.created_at.label("created_at"), literal(what).label("what"))
            if through_call:
                part = part.join(Invocation, listing.calls).distinct()
            parts.append(narrowed(listing, part.where(condition), f, after).order_by(*order).limit(limit + 1))
        hits = union_all(*(p.subquery().select() for p in parts)).subquery("hits")
        query = (select(*columns, func.array_agg(hits.c.what.distinct()).label("matched"))
                 .join(hits, hits.c.id == entity.id).group_by(entity.id).order_by(*order).limit(limit + 1))
        rows = [dict(r._mapping) for r in db.execute(query)]
        for row in rows:
            row["matched"] = [m for m in listing.matches if m in row["matched"]]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], (last["created_at"], last["id"])
