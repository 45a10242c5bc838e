"""The runs list (runs:read): the most recent runs, newest first, narrowed by exact lookups on the
run's id, its agent session, route, client conversation or client turn. Keyset paged on
(created_at, id), so the runs of a busy hub page as cheaply at the end as at the start.

Rows are summaries (the columns a list shows); a run's context and completion are read by its
trace."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row, false, select, tuple_
from sqlalchemy.orm import Session

from ..runtime.models import Run

LOOKUPS = ("run_id", "session", "route", "conversation", "turn")
# Where the next page starts: the last run shown, as (created_at, id).
RunKey = tuple[datetime, uuid.UUID]

_TEXT_LOOKUPS = {"route": Run.route_key, "conversation": Run.client_conversation_id,
                 "turn": Run.client_turn_id}
_ID_LOOKUPS = {"run_id": Run.id, "session": Run.session_id}


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def recent_runs(db: Session, lookups: Mapping[str, str], after: RunKey | None,
                limit: int) -> tuple[list[Row[Any]], RunKey | None]:
    """Runs matching every non-empty lookup, newest first, after `after`; and the key to continue
    from, if more remain. A run or session lookup that is not a UUID matches no run."""
    query = (select(Run.id, Run.route_key, Run.client_conversation_id, Run.client_turn_id, Run.status,
                    Run.created_at)
             .order_by(Run.created_at.desc(), Run.id.desc()).limit(limit + 1))
    for key, id_column in _ID_LOOKUPS.items():
        if lookups.get(key):
            ident = _uuid(lookups[key])
            query = query.where(id_column == ident if ident is not None else false())
    for key, text_column in _TEXT_LOOKUPS.items():
        if lookups.get(key):
            query = query.where(text_column == lookups[key])
    if after is not None:
        query = query.where(tuple_(Run.created_at, Run.id) < after)
    rows = list(db.execute(query).all())
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], (last.created_at, last.id)
