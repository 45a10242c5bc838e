"""Bounding the text an agent sees about a tool, exactly as the Runtime spec states it.

Discovery descriptions are capped at 500 Unicode code points. Usage guidance is capped at both
32,768 code points and 65,536 UTF-8 bytes, whichever is reached first, never splitting a
character. Sizes are measured after control-character cleanup.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from .. import limits



# C0 controls but tab and newline, DEL, C1 controls, and lone surrogates (which cannot be encoded).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def clean(text: str) -> str:
    """Drop control characters (keeping tab and newline; CRLF and CR become newlines)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


@dataclass(frozen=True)
class Bounded:
    text: str
    truncated: bool
    source_chars: int
    source_bytes: int


def bound(text: str, max_chars: int, max_bytes: int | None = None) -> Bounded:
    """The longest prefix within both limits; a character that would straddle the byte limit is
    left out whole."""
    encoded_len = len(text.encode("utf-8"))
    kept = text[:max_chars]
    if max_bytes is not None and len(kept.encode("utf-8")) > max_bytes:
        kept = kept.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")
    return Bounded(kept, len(kept) < len(text), len(text), encoded_len)


def bound_description(text: str) -> Bounded:
    return bound(clean(text), limits.TOOL_DESCRIPTION_MAX)


def bound_guidance(text: str) -> Bounded:
    return bound(clean(text), limits.TOOL_GUIDANCE_MAX, limits.TOOL_GUIDANCE_MAX_BYTES)
