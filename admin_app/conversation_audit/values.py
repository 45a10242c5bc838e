"""The value rules of archive requests: identifiers, UUIDs and visible text.

They are the rules the official client SDK and BailingHub Core share, so that a value one accepts
the other accepts too: a UUID of versions 1 to 5 in either case (stored lower-cased), a client
identifier of 1 to 128 characters, text that is never blank and holds no control characters other
than tab, LF and CR, its length counted in UTF-16 code units as clients count it.
"""
from __future__ import annotations

import re
from typing import Any

from ..validation import CONTROL_CHARS, Checker, utf16_len

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.I)
CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
# What a path segment must look like to name an archive at all; anything else is no endpoint.
ARCHIVE_REF = re.compile(r"[0-9a-f-]{36}", re.I)
# The characters JavaScript's trim() removes: a text made only of them is blank.
_BLANK = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
         "\u2028\u2029\u202f\u205f\u3000\ufeff"


def uuid_value(checker: Checker, value: Any, path: str) -> str | None:
    """A UUID of versions 1-5, lower-cased; None (with a problem) otherwise."""
    if not isinstance(value, str) or not UUID.fullmatch(value):
        checker.add(path, "must be a UUID (versions 1 to 5)")
        return None
    return value.lower()


def client_id(checker: Checker, value: Any, path: str) -> str | None:
    if not isinstance(value, str) or not CLIENT_ID.fullmatch(value):
        checker.add(path, "must be 1 to 128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit")
        return None
    return value


def is_blank(value: str) -> bool:
    return not value.strip(_BLANK)


def visible_text(checker: Checker, value: Any, path: str, max_units: int) -> str | None:
    """Text kept exactly as sent: a string, not blank, at most `max_units` UTF-16 code units, no
    control characters other than tab, LF and CR."""
    if not isinstance(value, str):
        checker.add(path, "must be a string")
    elif is_blank(value):
        checker.add(path, "must not be blank")
    elif utf16_len(value) > max_units:
        checker.add(path, f"must be at most {max_units} UTF-16 code units")
    elif CONTROL_CHARS.search(value):
        checker.add(path, "must not contain control characters other than tab, LF and CR")
    else:
        return value
    return None
