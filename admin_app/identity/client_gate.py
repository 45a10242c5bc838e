"""The client gate (BUSINESS_SIDE.md §D.1): at most a client app's `rate_limit_per_min` admissions
in any 60 seconds, in one bucket `client:<app_id>` shared by every session and user of the client,
every worker and host (the tool gates' table, sql/074; the column, sql/079). 0 = off.

Charged by each tool call that moves (a new call, or the resume that takes it past the tool
gates), before its tool and provider gates, and by each knowledge search. Admitted, the charge
commits with the caller's transaction (or rolls back with it); refused, nothing is charged.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import ClientApp
from .rate_limit import Bucket, admit_all

PER_MINUTE_MAX = 1_000_000
PER_MINUTE_DEFAULT = 0  # off: a client that names no limit is not limited (docs/compatibility.md)
WINDOW_SEC = 60
# What a first refused call is told, as Core: the window, not the exact wait (§D.1).
RETRY_AFTER_MS = WINDOW_SEC * 1000
LEVEL = "client"
SCOPE = "client_shared"
SOURCE = "client_total"


@dataclass(frozen=True)
class Refusal:
    count: int  # the client's limit
    wait_ms: int  # until the oldest admission that keeps the bucket full leaves it (>= 1)

    def record(self, first: bool) -> dict[str, object]:
        """What an invocation keeps of the refusal (bz_tool_invocations.rate_limit): the gate, and
        on a first call only, the `retry_after_ms` the agent was told."""
        kept: dict[str, object] = {"level": LEVEL, "count": self.count, "window_sec": WINDOW_SEC,
                                   "scope": SCOPE, "source": SOURCE}
        if first:
            kept["retry_after_ms"] = RETRY_AFTER_MS
        return kept


def check(db: Session, app_id: str) -> Refusal | None:
    """One admission for `app_id` in `db`'s transaction; None when admitted (or the client has
    no limit), else the refusal (nothing charged)."""
    per_minute = db.scalar(select(ClientApp.rate_limit_per_min).where(ClientApp.app_id == app_id))
    if not per_minute:
        return None
    bucket = Bucket(f"client:{app_id}", int(per_minute), WINDOW_SEC)
    refused = admit_all(db, [bucket])
    if refused is None:
        return None
    return Refusal(bucket.limit, max(1, refused[1]))
