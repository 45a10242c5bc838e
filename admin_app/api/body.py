"""Reading a JSON request body without trusting it.

The limit is enforced while reading: a declared Content-Length over the limit is refused before a
byte is read, and a chunked body is refused as soon as it passes the limit, so an oversized
request never sits whole in memory. The JSON itself is parsed strictly (no duplicate keys, no
NaN), and must be an object.

As upstream Core does (and the official SDK relies on it), the Content-Type header is not
checked and an empty body reads as `{}`: the SDK sends actions such as resume with no body at all.
"""
from __future__ import annotations

from collections.abc import Callable

from flask import request

from ..errors import ApiError, invalid_request
from ..validation import Checker, strict_json_loads

CHUNK = 64 * 1024

TooLarge = Callable[[int, int], ApiError]


def default_too_large(max_bytes: int, observed: int) -> ApiError:
    return ApiError("request_too_large", f"The request body exceeds {max_bytes} bytes.",
                    max_bytes=max_bytes, observed_bytes=observed)


def read_raw(max_bytes: int, too_large: TooLarge = default_too_large) -> bytes:
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise too_large(max_bytes, 0)
    stream = request.stream
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise too_large(max_bytes, total)
        parts.append(chunk)
    return b"".join(parts)


def read_json_object(max_bytes: int, too_large: TooLarge = default_too_large) -> dict:
    """The body as a JSON object (UTF-8, whatever the Content-Type says); an empty body is `{}`."""
    raw = read_raw(max_bytes, too_large)
    if not raw:
        return {}
    try:
        value = strict_json_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ApiError("invalid_request", "The body is not valid JSON.") from None
    if not isinstance(value, dict):
        raise ApiError("invalid_request", "The body must be a JSON object.")
    return value


def read_empty_object(action: str, max_bytes: int, too_large: TooLarge = default_too_large) -> None:
    """Bodies of actions that take `{}` or nothing (confirm, deny, resume, revoke): anything else
    is refused."""
    body = read_json_object(max_bytes, too_large)
    if body:
        raise invalid_request(Checker.single(next(iter(body)), f"{action} takes an empty object"))
