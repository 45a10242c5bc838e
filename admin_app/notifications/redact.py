"""A webhook URL's path and query are its secret (chat services put the key there), so a channel's
URL is shown, logged and recorded as its origin only: `https://hooks.example.com[:port]`."""
from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

HIDDEN_PART = "…"
# Any URL in a text: its scheme and host are kept, what follows them is not. And a path as HTTP
# libraries quote one in their errors ("Max retries exceeded with url: /path?query").
_URL = re.compile(r"\b([a-z][a-z0-9+.-]*://[^/?#\s'\"<>]+)[/?#][^\s'\"<>]*", re.IGNORECASE)
_QUOTED_PATH = re.compile(r"\b(url: )/[^\s'\"<>]*", re.IGNORECASE)
# Pieces shorter than this ("api", "v1") are words of any message, not secrets.
_PIECE_MIN = 6


def origin(url: str) -> str:
    """`scheme://host[:port]` of `url`; "(invalid URL)" when it has none."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    if not parts.scheme or not parts.hostname:
        return "(invalid URL)"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def scrub(text: str, url: str | None) -> str:
    """`text` (an error a library or a receiver wrote) without the path or query of `url`, nor
    of any other URL in it: whole, or in the pieces a library quotes (`url: /path?query`)."""
    if url:
        where = origin(url)
        text = text.replace(url, f"{where}/{HIDDEN_PART}")
        pieces = sorted(_pieces(url), key=len, reverse=True)
        parts = text.split(where)  # the origin is shown whole, even where a piece is part of it
        for piece in pieces:
            parts = [part.replace(piece, HIDDEN_PART) for part in parts]
        text = where.join(parts)
    text = _QUOTED_PATH.sub(lambda found: found.group(1) + HIDDEN_PART, text)
    return _URL.sub(lambda found: f"{found.group(1)}/{HIDDEN_PART}", text)


def _pieces(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return {url}
    secret = parts.path + ("?" + parts.query if parts.query else "")
    words = {secret, parts.path, parts.query,
             *re.split(r"[/?&=;,]", secret)}
    # As written, and as a library may quote or unquote it.
    forms = {form for word in words for form in (word, quote(word, safe="/?&=;,"), unquote(word))}
    return {form for form in forms if len(form) >= _PIECE_MIN}
