"""The value rules of archive requests: UUIDs (stored lower-cased) and client identifiers, as
`validation` defines them for every surface; visible text is `validation.client_text`."""
from __future__ import annotations

import re
from typing import Any

from ..validation import CLIENT_ID, UUID_V1_5, Checker

# What a path segment must look like to name an archive at all; anything else is no endpoint.
ARCHIVE_REF = re.compile(r"[0-9a-f-]{36}", re.I)


def uuid_value(checker: Checker, value: Any, path: str) -> str | None:
    """A UUID of versions 1-5, lower-cased; None (with a problem) otherwise."""
    if not isinstance(value, str) or not UUID_V1_5.fullmatch(value):
        checker.add(path, "must be a UUID (versions 1 to 5)")
        return None
    return value.lower()


def client_id(checker: Checker, value: Any, path: str) -> str | None:
    if not isinstance(value, str) or not CLIENT_ID.fullmatch(value):
        checker.add(path, "must be 1 to 128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit")
        return None
    return value
