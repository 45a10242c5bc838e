"""Canonical JSON and its SHA-256: the one definition every hash in the hub is built on."""
from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """RFC 3339 in UTC with milliseconds and a Z (`2026-01-01T00:00:00.000Z`, as upstream Core
    writes them), the one way the hub writes times on the wire."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
