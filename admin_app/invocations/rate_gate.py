"""The tool and provider rate-limit gates of a call (BUSINESS_SIDE.md §D.1, §D.3).

Checked in the invocation's own transaction, after the call is screened and before its approval
is requested or consumed, its task reservation or permit taken, or its journal row written: a
refused call gets only its `rejected_before_dispatch` result. Both gates are checked before
either is charged, and a charge commits with the call it admitted (or rolls back with it).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..catalog.compiler import Tool
from ..catalog.rate_limits import SCOPE, Limit, provider_limit, tool_limit
from ..identity.models import ToolProvider
from ..identity.rate_limit import Bucket, admit_all

REASON = "rate_limited"  # the invocation's reason; results.py tells the agent what it means


def gates(tool: Tool, provider: ToolProvider) -> list[tuple[str, Limit]]:
    """(level, limit) of each gate that applies to `tool`."""
    found: list[tuple[str, Limit]] = []
    limit = tool_limit(tool.rate_limit, provider.tool_rate_limits, tool.name)
    if limit is not None:
        found.append(("tool", limit))
    total = provider_limit(provider.rate_limit_per_min)
    if total is not None:
        found.append(("provider", total))
    return found


def _bucket(level: str, tool: Tool, limit: Limit) -> Bucket:
    key = f"tool:{tool.provider}:{tool.name}" if level == "tool" else f"provider:{tool.provider}"
    return Bucket(key, limit.count, limit.window_sec)


def check(db: Session, tool: Tool, provider: ToolProvider) -> dict[str, Any] | None:
    """None when every gate admits the call (each charged once); else what refused it, as the
    result shows it (`rate_limit` and `retry_after_ms`), nothing charged."""
    applicable = gates(tool, provider)
    if not applicable:
        return None
    buckets = {_bucket(level, tool, limit): (level, limit) for level, limit in applicable}
    refused = admit_all(db, list(buckets))
    if refused is None:
        return None
    bucket, wait = refused
    level, limit = buckets[bucket]
    return {"level": level, "count": limit.count, "window_sec": limit.window_sec, "scope": SCOPE,
            "source": limit.source, "retry_after_ms": max(1, wait)}
