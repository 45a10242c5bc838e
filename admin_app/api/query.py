"""Strict query strings: only the named parameters, each at most once."""
from __future__ import annotations

from flask import request

from ..errors import invalid_request
from ..validation import SAFE_INTEGER_MAX, Checker


def query_params(required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict[str, str]:
    checker = Checker()
    allowed = set(required) | set(optional)
    for key in request.args:
        if key not in allowed:
            checker.add(key, "is not a known query parameter")
        elif len(request.args.getlist(key)) > 1:
            checker.add(key, "must be given once")
    for key in required:
        if key not in request.args:
            checker.add(key, "is required")
    if checker.problems:
        raise invalid_request(checker)
    return {key: request.args[key] for key in allowed if key in request.args}


def int_param(params: dict[str, str], key: str, default: int, minimum: int, maximum: int) -> int:
    """A whole-number query parameter within bounds; anything else is a 400, never clamped."""
    raw = params.get(key)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 10 or not minimum <= int(raw) <= maximum:
        raise invalid_request(Checker.single(key, f"must be a whole number from {minimum} to {maximum}"))
    return int(raw)


def clamped_int_param(params: dict[str, str], key: str, default: int, minimum: int, maximum: int) -> int:
    """A paging number as Core reads it: plain digits of a safe integer, else a 400; a value
    outside [minimum, maximum] is then brought into it, not refused."""
    raw = params.get(key)
    if raw is None:
        return default
    # Sixteen significant digits hold every safe integer; more are refused before converting.
    if not (raw.isascii() and raw.isdigit()) or len(raw.lstrip("0")) > 16 or int(raw) > SAFE_INTEGER_MAX:
        raise invalid_request(Checker.single(key, "must be a non-negative whole number"))
    return min(max(int(raw), minimum), maximum)
