"""The rules for text and identifiers a local agent sends to the Runtime.

They are the official client's and Core's rules, so that what one accepts the other accepts too:
identifiers of 1 to 128 characters (`A-Z a-z 0-9 _ . : -`, starting with a letter or digit)
after surrounding blanks are trimmed, and run ids that are UUIDs of versions 1 to 5. Client text
is `validation.client_text`.
"""
from __future__ import annotations

import uuid
from typing import Any

from ..validation import CLIENT_ID, JS_BLANK, UUID_V1_5, Checker


def identifier(checker: Checker, value: Any, path: str) -> str | None:
    """The identifier with surrounding blanks trimmed, or None (with a problem)."""
    if isinstance(value, str) and CLIENT_ID.fullmatch(value.strip(JS_BLANK)):
        return value.strip(JS_BLANK)
    checker.add(path, "must be 1 to 128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit")
    return None


def run_id(value: Any) -> uuid.UUID | None:
    """A run id (a UUID of versions 1 to 5, surrounding blanks trimmed), or None."""
    if not isinstance(value, str) or not UUID_V1_5.fullmatch(value.strip(JS_BLANK)):
        return None
    return uuid.UUID(value.strip(JS_BLANK))
