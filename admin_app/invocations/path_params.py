"""Path parameters that would change which resource a call reaches. A value is put into its path
segment percent-encoded, yet a business system or a proxy in front of it may decode it (once or
more) and resolve `.` and `..` as it would any URL; such values are refused before dispatch."""
from __future__ import annotations

from typing import Any
from urllib.parse import unquote

DOT_SEGMENTS = frozenset({".", ".."})


def _decoded(value: str) -> str:
    """Percent-decoding repeated until nothing changes (each round only shortens the text)."""
    while True:
        decoded = unquote(value, errors="surrogateescape")
        if decoded == value:
            return value
        value = decoded


def _holds_dot_segment(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False  # only strings can spell a dot segment; the schema checks the rest
    text = _decoded(str(value))
    return any(part in DOT_SEGMENTS for part in text.replace("\\", "/").split("/"))


def dot_segment_rejection(locations: dict[str, str], arguments: dict) -> str | None:
    """Why the call is refused (the parameter's name, never its value), or None."""
    for name, value in arguments.items():
        if locations.get(name) == "path" and _holds_dot_segment(value):
            return f"invalid_arguments: {name}: dot_segment"[:500]
    return None
