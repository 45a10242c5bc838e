"""Launch-time budgets (CLIENT_API_AND_EXECUTOR.md §C.6): a route's and a client app's hard limits
on the tokens and the cost their jobs reported over a rolling window. Checked only when a job is
submitted: an exhausted budget turns the new job into a `rejected` one (§A.3 step 21).

Usage is what executors reported: the sum of `usage.tokens` and `usage.cost_usd` (numbers only;
anything else counts as 0) of the jobs created in the window, by route or by client. Like Core,
a limit is reached when the sum is at or above it, and the check reads before it writes: jobs
submitted at the same moment may all pass the last unit of a budget."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..validation import Checker, join

FIELDS = ("enabled", "window", "window_hours", "hard_tokens", "hard_cost_usd", "soft_tokens", "soft_cost_usd")
WINDOWS = {"hour": 1, "day": 24, "month": 720}
WINDOW_HOURS_DEFAULT = 24
WINDOW_HOURS_MAX = 8784  # 366 days

Scope = Literal["route", "client"]


def check_policy(checker: Checker, value: Any, path: str) -> dict[str, Any] | None:
    """A budget as the configuration gives it, normalised to `{enabled, window_hours,
    hard_tokens?, hard_cost_usd?, soft_tokens?, soft_cost_usd?}`; None for `{}` (no budget) or
    when a problem was added. `soft_*` are accepted as Core accepts them, and not enforced."""
    before = len(checker.problems)
    if checker.obj(value, path, optional=FIELDS) is None:
        return None
    if "enabled" in value:
        checker.boolean(value["enabled"], join(path, "enabled"))
    if "window" in value and "window_hours" in value:
        checker.add(join(path, "window_hours"), "give either window or window_hours, not both")
    elif "window" in value and (not isinstance(value["window"], str) or value["window"] not in WINDOWS):
        checker.add(join(path, "window"), "must be 'hour', 'day' or 'month'")
    elif "window_hours" in value:
        checker.integer(value["window_hours"], join(path, "window_hours"), minimum=1, maximum=WINDOW_HOURS_MAX)
    for key in ("hard_tokens", "soft_tokens"):
        if key in value:
            checker.integer(value[key], join(path, key), minimum=1)
    for key in ("hard_cost_usd", "soft_cost_usd"):
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], int | float)
                             or not value[key] > 0):
            checker.add(join(path, key), "must be a number above 0")
    if len(checker.problems) != before or not value:
        return None
    hours = value.get("window_hours") or WINDOWS.get(value.get("window", ""), WINDOW_HOURS_DEFAULT)
    limits = {key: value[key] for key in FIELDS[3:] if key in value}
    return {"enabled": value.get("enabled", True), "window_hours": hours, **limits}


@dataclass(frozen=True)
class Exhausted:
    scope: Scope
    kind: Literal["tokens", "cost"]
    used: dict[str, float]  # {"jobs", "tokens", "cost_usd"} over the window
    policy: dict[str, Any]

    @property
    def reason(self) -> str:
        """Core's audit reason: budget_<scope>_<kind>_exceeded."""
        return f"budget_{self.scope}_{self.kind}_exceeded"


_USAGE = """
    SELECT count(*) AS jobs,
           coalesce(sum(CASE WHEN jsonb_typeof(usage -> 'tokens') = 'number'
                             THEN (usage ->> 'tokens')::numeric END), 0) AS tokens,
           coalesce(sum(CASE WHEN jsonb_typeof(usage -> 'cost_usd') = 'number'
                             THEN (usage ->> 'cost_usd')::numeric END), 0) AS cost_usd
    FROM bz_jobs WHERE {column} = :key AND created_at >= :since
"""
_BY = {"route": text(_USAGE.format(column="route_key")), "client": text(_USAGE.format(column="client_app_id"))}


def usage_since(db: Session, scope: Scope, key: str, hours: int) -> dict[str, float]:
    row = db.execute(_BY[scope], {"key": key, "since": utc_now() - timedelta(hours=hours)}).one()
    return {"jobs": int(row.jobs), "tokens": float(row.tokens), "cost_usd": float(row.cost_usd)}


def exhausted(db: Session, checks: list[tuple[Scope, str, dict[str, Any] | None]]) -> Exhausted | None:
    """The first budget of `checks` (scope, key, policy; the route's first, as Core) whose hard
    limit the window's usage has reached, or None."""
    for scope, key, policy in checks:
        if not policy or not policy.get("enabled", True):
            continue
        used = usage_since(db, scope, key, int(policy.get("window_hours", WINDOW_HOURS_DEFAULT)))
        if "hard_cost_usd" in policy and used["cost_usd"] >= policy["hard_cost_usd"]:
            return Exhausted(scope, "cost", used, policy)
        if "hard_tokens" in policy and used["tokens"] >= policy["hard_tokens"]:
            return Exhausted(scope, "tokens", used, policy)
    return None
