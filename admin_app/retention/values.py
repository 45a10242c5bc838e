"""Checking what an operator gives (the admin API's bodies, the console's forms, the command's
options) the same way everywhere: strict objects, bounded text (limits.py), no control characters."""
from __future__ import annotations

import re
import uuid
from typing import Any

from .. import limits
from ..validation import CONTROL_CHARS, RESOURCE_KEY, Checker

ALL_ROUTES = "*"
ROUTE_OR_ALL = re.compile(r"^(\*|[a-z0-9][a-z0-9_-]{1,63})$")
SCOPES = ("archive", "principal", "tenant")


def reason(checker: Checker, value: Any, path: str) -> str | None:
    """1 to RETENTION_REASON_MAX characters, line breaks allowed, other control characters not."""
    text = checker.string(value, path, min_len=1, max_len=limits.RETENTION_REASON_MAX)
    if text is not None and not text.strip():
        checker.add(path, "must not be blank")
        return None
    if text is not None and CONTROL_CHARS.search(text):
        checker.add(path, "must not contain control characters")
        return None
    return text


def name(checker: Checker, value: Any, path: str) -> str | None:
    """A principal id or a tenant: one line of 1 to LEGAL_HOLD_VALUE_MAX characters."""
    text = checker.string(value, path, min_len=1, max_len=limits.LEGAL_HOLD_VALUE_MAX, single_line=True)
    if text is not None and not text.strip():
        checker.add(path, "must not be blank")
        return None
    return text


def archive_id(checker: Checker, value: Any, path: str) -> str | None:
    if not isinstance(value, str):
        checker.add(path, "must be a string")
        return None
    try:
        if len(value) == 36:
            return str(uuid.UUID(value))
    except ValueError:
        pass
    checker.add(path, "must be an archive id (a UUID)")
    return None


def app_and_route(checker: Checker, app: Any, route: Any) -> tuple[str | None, str | None]:
    found_app = checker.string(app, "client_app_id", pattern=RESOURCE_KEY)
    found_route = checker.string(route, "route_key", pattern=ROUTE_OR_ALL,
                                 pattern_text="a route key, or * for every route of the app")
    return found_app, found_route


def keep_days(checker: Checker, value: Any) -> int | None:
    """A number of days, or None (JSON null): keep for good."""
    if value is None:
        return None
    low, high = limits.RETENTION_KEEP_DAYS
    return checker.integer(value, "keep_days", minimum=low, maximum=high)
