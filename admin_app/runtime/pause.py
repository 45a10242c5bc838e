"""Hub pause (BUSINESS_SIDE.md § E): while paused, the hub takes no new work (turns, governed
calls and their resumes, artifact uploads); reads, completion, audits, approval decisions, the
admin side and /health go on.

The state is the one row of bz_hub_pause (sql/073_hub_pause.sql), read by every refusing request
in the transaction it already has: a pause committed by any process of any host is seen by the
next request of every other, with no cache to expire. A request that passed its check before the
pause committed finishes (a call already admitted is settled, as Core lets it).

Every pause and resume, repeated ones included, is recorded in bz_admin_events (`hub_paused`,
`hub_resumed`) with who asked, through which door, and the reason, in the transaction that
changes the row: a refused change records nothing."""
from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso
from ..errors import ApiError, invalid_request
from ..config_audit.log import PAUSED, RESUMED, record_object
from ..identity.admins import Actor, record_hub_change
from ..validation import Checker

log = logging.getLogger(__name__)

# Where a change came from, as the trail names it.
CHANNELS = ("console", "api", "cli")


@dataclass(frozen=True)
class PauseState:
    paused: bool
    reason: str | None = None
    actor: str | None = None  # who made the change in force
    changed_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {"paused": self.paused, "reason": self.reason, "changed_by": self.actor,
                "changed_at": iso(self.changed_at)}


NOT_PAUSED = PauseState(False)

_READ = text("SELECT paused, reason, actor, changed_at FROM bz_hub_pause WHERE id = 1")
_IS_PAUSED = text("SELECT paused FROM bz_hub_pause WHERE id = 1")
# Only a change of state is written: a repeated pause keeps who paused, when and why.
_CHANGE = text("""
    INSERT INTO bz_hub_pause AS p (id, paused, reason, actor, actor_admin_id, changed_at)
    VALUES (1, :paused, :reason, :actor, :aid, now())
    ON CONFLICT (id) DO UPDATE
    SET paused = EXCLUDED.paused, reason = EXCLUDED.reason, actor = EXCLUDED.actor,
        actor_admin_id = EXCLUDED.actor_admin_id, changed_at = EXCLUDED.changed_at
    WHERE p.paused IS DISTINCT FROM EXCLUDED.paused
    RETURNING paused
""")


class _Table:
    """Whether bz_hub_pause exists, asked of the catalog for each engine until it does (then
    never again: a table is not dropped under a running hub). Until `db upgrade` has run, nothing
    can have paused the hub, and refusing requests keep working instead of failing on the
    missing table."""

    _seen: ClassVar[weakref.WeakSet[Engine]] = weakref.WeakSet()
    _warned: ClassVar[bool] = False

    @classmethod
    def there(cls, db: Session) -> bool:
        engine = db.get_bind().engine
        if engine in cls._seen:
            return True
        if db.scalar(text("SELECT to_regclass('bz_hub_pause') IS NOT NULL")):
            cls._seen.add(engine)
            return True
        if not cls._warned:
            cls._warned = True
            log.warning("bz_hub_pause is missing (run bailing-admin db upgrade): the hub cannot "
                        "be paused until then")
        return False


def current(db: Session) -> PauseState:
    """The pause in force, as this transaction sees it."""
    if not _Table.there(db):
        return NOT_PAUSED
    row = db.execute(_READ).first()
    if row is None:
        return NOT_PAUSED
    return PauseState(row.paused, row.reason, row.actor, row.changed_at)


def is_paused(db: Session) -> bool:
    """What a refusing request asks: one indexed read of one row (the row in force is also the
    only one), in the request's own transaction."""
    return _Table.there(db) and bool(db.scalar(_IS_PAUSED))


def paused_error() -> ApiError:
    """Core's `{"error": "hub_paused", "status": "paused"}`, in the hub's envelope (with `message`)."""
    return ApiError("hub_paused", status="paused")


def refuse_when_paused(db: Session) -> None:
    """The one check every refusing surface makes, before it reads a body or writes anything:
    503 `hub_paused` while the hub is paused. `db` is the request's session (any will do)."""
    if is_paused(db):
        raise paused_error()


def check_reason(value: Any, path: str = "reason") -> str | None:
    """An optional reason: one line, not blank, at most PAUSE_REASON_MAX characters."""
    if value is None:
        return None
    checker = Checker()
    reason = checker.string(value, path, min_len=1, max_len=limits.PAUSE_REASON_MAX, single_line=True)
    if reason is not None and not reason.strip():
        checker.add(path, "must not be blank")
    elif reason is not None and not _storable(reason):
        checker.add(path, "must be valid Unicode text")
    if checker.problems:
        raise invalid_request(checker)
    return reason


def _storable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from a command line's undecodable bytes)
        return False
    return True


def body_reason(body: dict[str, Any]) -> str | None:
    """The reason of an optional JSON body (`{}` or `{"reason": "..."}`), strictly checked."""
    checker = Checker()
    checker.obj(body, "", optional=("reason",))
    if checker.problems:
        raise invalid_request(checker)
    return check_reason(body.get("reason"))


def set_paused(db: Session, actor: Actor, paused: bool, reason: str | None, channel: str) -> dict[str, Any]:
    """Pause or resume, idempotently; recorded either way. Returns the state in force and
    whether this call changed it."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}")
    was = current(db)
    # Without the table (no `db upgrade` yet) the statement fails: the command says schema_missing.
    changed = db.execute(_CHANGE, {"paused": paused, "reason": reason, "actor": actor.name[:128],
                                   "aid": actor.admin_id}).first() is not None
    record_hub_change(db, actor, "hub_paused" if paused else "hub_resumed",
                      reason=reason, channel=channel, changed=changed)
    if changed:  # beyond Core (§G.1): a change of state is a configuration change here too
        record_object(db, actor.name, "POST", "pause" if paused else "resume", "hub_pause", "hub",
                      {"paused": was.paused, "reason": was.reason}, {"paused": paused, "reason": reason},
                      PAUSED if paused else RESUMED)
    return {**current(db).as_json(), "changed": changed}
