"""Subject display (BUSINESS_SIDE.md §H.2): the name a business backend gives the person an agent
acts for, which the agent may show. Pure rules, no database: what a valid value is, the trimmed
form that is stored, and how a stored value is answered.

A value is null or exactly `{"name": <string>}`. The string as sent holds no C0 or C1 control
character (U+0000-U+001F, U+007F-U+009F), no U+2028/U+2029 and no lone surrogate (pairs, such as
emoji, are fine); trimmed as JavaScript trims, it is non-empty and at most 120 UTF-16 code units.
The official SDK applies the same rules to what it reads, so a name the hub stores is one the
SDK reports as `provided`.
"""
from __future__ import annotations

import re
from typing import Any

from .. import limits
from ..validation import JS_BLANK, Checker, join, utf16_len

PROVIDED, MISSING = "provided", "missing"
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def name_problem(name: Any) -> str | None:
    """Why `name` is not a valid display name, or None."""
    if not isinstance(name, str):
        return "must be a string"
    if _FORBIDDEN.search(name):
        return "must not contain control characters, U+2028, U+2029 or lone surrogates"
    trimmed = name.strip(JS_BLANK)
    if not trimmed:
        return "must not be blank"
    if utf16_len(trimmed) > limits.SUBJECT_DISPLAY_NAME_MAX:
        return f"must be at most {limits.SUBJECT_DISPLAY_NAME_MAX} UTF-16 code units once trimmed"
    return None


def check(checker: Checker, value: Any, path: str) -> None:
    """Problems of a subject display as a request carries it (null allowed)."""
    if value is None:
        return
    if checker.obj(value, path, required=("name",)) is None or "name" not in value:
        return
    problem = name_problem(value["name"])
    if problem is not None:
        checker.add(join(path, "name"), problem)


def stored(value: dict[str, Any] | None) -> dict[str, str] | None:
    """The form kept in the database: the name trimmed. `value` has passed `check`."""
    return None if value is None else {"name": value["name"].strip(JS_BLANK)}


def view(value: Any) -> dict[str, Any]:
    """`subject_display` and `subject_display_status` as every answer carries them: a stored
    value that is not (or no longer) valid is answered as missing, never passed on."""
    if isinstance(value, dict) and set(value) == {"name"} and name_problem(value["name"]) is None \
            and value["name"] == value["name"].strip(JS_BLANK):
        return {"subject_display": {"name": value["name"]}, "subject_display_status": PROVIDED}
    return {"subject_display": None, "subject_display_status": MISSING}
