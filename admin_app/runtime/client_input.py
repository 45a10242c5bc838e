"""The rules for text and identifiers a local agent sends to the Runtime.

They are the official client's and Core's rules, so that what one accepts the other accepts too:
identifiers of 1 to 128 characters (`A-Z a-z 0-9 _ . : -`, starting with a letter or digit)
after surrounding blanks are trimmed; run ids that are UUIDs of versions 1 to 5; client text that
is never rewritten: over its limit (UTF-16 code units, as clients count) or holding a control
character other than tab, LF and CR, it is refused.
"""
from __future__ import annotations

import uuid
from typing import Any

from ..conversation_audit.values import CLIENT_ID, UUID, is_blank
from ..validation import CONTROL_CHARS, Checker, utf16_len

# What JavaScript's trim() removes, which is what clients and Core trim identifiers by.
JS_TRIM = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
          "\u2028\u2029\u202f\u205f\u3000\ufeff"


def identifier(checker: Checker, value: Any, path: str) -> str | None:
    """The identifier with surrounding blanks trimmed, or None (with a problem)."""
    if isinstance(value, str) and CLIENT_ID.fullmatch(value.strip(JS_TRIM)):
        return value.strip(JS_TRIM)
    checker.add(path, "must be 1 to 128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit")
    return None


def text(checker: Checker, value: Any, path: str, max_units: int, *, require_content: bool) -> str | None:
    """Client text kept exactly as sent."""
    if not isinstance(value, str):
        checker.add(path, "must be a string")
    elif utf16_len(value) > max_units:
        checker.add(path, f"must be at most {max_units} characters (UTF-16 code units)")
    elif CONTROL_CHARS.search(value):
        checker.add(path, "must not contain control characters other than tab, LF and CR")
    elif require_content and is_blank(value):
        checker.add(path, "must not be blank")
    else:
        return value
    return None


def run_id(value: Any) -> uuid.UUID | None:
    """A run id (a UUID of versions 1 to 5, surrounding blanks trimmed), or None."""
    if not isinstance(value, str) or not UUID.fullmatch(value.strip(JS_TRIM)):
        return None
    return uuid.UUID(value.strip(JS_TRIM))
