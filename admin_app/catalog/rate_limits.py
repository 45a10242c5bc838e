"""Tool rate-limit policies (BUSINESS_SIDE.md §D.2): the business's ACC declaration
`execution.rate_limit`, the operator's `tool_rate_limits` over it, and the limit that results.

A provider's `tool_rate_limits` is `{"default": policy, "overrides": {tool: policy}}`, a policy
exactly `{"mode": "inherit"}`, `{"mode": "disabled"}` or `{"mode": "custom", "count", "window"}`.
A tool's limit is its override, else the default (omitted: inherit); inherit is the declaration
(an invalid or absent one: no limit).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..validation import Checker, join

WINDOWS = {"1s": 1, "1m": 60, "1h": 3600, "1d": 86400}
COUNT_MAX = 1_000_000
OVERRIDES_MAX = 1000
OVERRIDE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
PER_MINUTE_DEFAULT = 120  # Core's default, for a provider that names none
PER_MINUTE_MAX = 1_000_000  # the provider gate; Core sets no maximum, a day's worth is plenty
SCOPE = "tool_provider_shared"


@dataclass(frozen=True)
class Limit:
    """One gate's limit: at most `count` admissions in any `window_sec` seconds."""
    count: int
    window_sec: int
    source: str  # declaration | tool_override | provider_default | provider_total


def declared(value: Any) -> tuple[int, int] | None:
    """An ACC `execution.rate_limit` as (count, window seconds); None when it is not a valid
    declaration (`{count: positive integer, window: 1s|1m|1h|1d}`, nothing else)."""
    if not isinstance(value, dict) or set(value) != {"count", "window"}:
        return None
    count, window = value["count"], value["window"]
    if type(count) is not int or count < 1 or not isinstance(window, str) or window not in WINDOWS:
        return None
    return count, WINDOWS[window]


def check_policy(checker: Checker, value: Any, path: str) -> None:
    """One policy, exactly one of the three shapes; every problem reported at its path."""
    mode = value.get("mode") if isinstance(value, dict) else None
    custom = mode == "custom"
    if checker.obj(value, path, required=("mode", *(("count", "window") if custom else ())),
                   optional=()) is None:
        return
    if mode not in ("inherit", "disabled", "custom"):
        checker.add(join(path, "mode"), "must be 'inherit', 'disabled' or 'custom'")
        return
    if custom:
        if "count" in value:
            checker.integer(value["count"], join(path, "count"), minimum=1, maximum=COUNT_MAX)
        if "window" in value and (not isinstance(value["window"], str) or value["window"] not in WINDOWS):
            checker.add(join(path, "window"), "must be '1s', '1m', '1h' or '1d'")


def check_tool_rate_limits(checker: Checker, value: Any, path: str) -> None:
    """A provider's `tool_rate_limits` (null: the declarations as they are)."""
    if value is None or checker.obj(value, path, optional=("default", "overrides")) is None:
        return
    if "default" in value:
        check_policy(checker, value["default"], join(path, "default"))
    if "overrides" not in value:
        return
    opath = join(path, "overrides")
    overrides = value["overrides"]
    if checker.obj(overrides, opath, open_ended=True) is None:
        return
    if len(overrides) > OVERRIDES_MAX:
        checker.add(opath, f"must have at most {OVERRIDES_MAX} entries")
        return
    for name, policy in overrides.items():
        if not OVERRIDE_KEY.fullmatch(name):
            checker.add(join(opath, name[:80]), "must be a tool name (" + OVERRIDE_KEY.pattern + ")")
            continue
        check_policy(checker, policy, join(opath, name))


def check_provider_rate_limits(checker: Checker, item: dict[str, Any], path: str) -> dict[str, Any]:
    """A provider's two rate-limit fields as stored: `rate_limit_per_min` (omitted: Core's 120)
    and `tool_rate_limits` (omitted or null: the declarations as they are)."""
    per_minute = checker.integer(item.get("rate_limit_per_min", PER_MINUTE_DEFAULT), join(path, "rate_limit_per_min"),
                                 minimum=0, maximum=PER_MINUTE_MAX)
    policies = item.get("tool_rate_limits")
    check_tool_rate_limits(checker, policies, join(path, "tool_rate_limits"))
    return {"rate_limit_per_min": per_minute, "tool_rate_limits": policies}


def tool_limit(declaration: tuple[int, int] | None, policies: dict[str, Any] | None, tool: str) -> Limit | None:
    """The tool gate's limit, or None when the tool has none. `policies` is a checked
    `tool_rate_limits` (None: the declaration)."""
    policies = policies or {}
    overrides = policies.get("overrides") or {}
    if tool in overrides:
        policy, own_source = overrides[tool], "tool_override"
    else:
        policy, own_source = policies.get("default") or {"mode": "inherit"}, "provider_default"
    mode = policy.get("mode")
    if mode == "disabled":
        return None
    if mode == "custom":
        return Limit(int(policy["count"]), WINDOWS[policy["window"]], own_source)
    if declaration is None:
        return None
    return Limit(declaration[0], declaration[1], "declaration")


def provider_limit(per_minute: int) -> Limit | None:
    """The provider gate: all the provider's tools together, per minute; 0 = off."""
    return Limit(per_minute, 60, "provider_total") if per_minute > 0 else None
