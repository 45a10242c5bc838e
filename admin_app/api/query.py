"""Strict query strings: only the named parameters, each at most once."""
from __future__ import annotations

from flask import request

from ..errors import invalid_request
from ..validation import Checker


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
