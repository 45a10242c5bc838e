"""What Core's own surfaces share (CLIENT_API_AND_EXECUTOR.md §1): `/run` and `/jobs/<id>`, the
executor endpoints and a job's tool proxy answer every reply with Core's JSON headers, refuse in
Core's envelope `{"error": "<text>"}`, answer an unforeseen failure as Core's 500 with the request's
id (never the exception's text), and read a body as Core does (1 MiB, Content-Type unchecked)."""
from __future__ import annotations

import json
import logging
from typing import Any

from flask import Blueprint, Response, g, request
from werkzeug.exceptions import HTTPException

from ..errors import ApiError, error_response
from ..jobs import rules
from ..jobs.answers import CoreError, refuse
from ..validation import strict_json_loads
from .body import read_raw

log = logging.getLogger(__name__)


def serve_as_core(bp: Blueprint) -> None:
    """Install Core's headers and envelope on every answer of `bp`."""
    bp.after_request(_core_json)
    bp.register_error_handler(ApiError, _refused)
    bp.register_error_handler(HTTPException, _http)
    bp.register_error_handler(Exception, _unexpected)


def _core_json(response: Response) -> Response:
    if response.mimetype == "application/json":
        response.headers["Content-Type"] = "application/json; charset=utf-8"
    response.headers["Cache-Control"] = "no-store"
    return response


def _refused(err: ApiError) -> Response:
    if isinstance(err, CoreError):
        return error_response(err)
    return error_response(refuse(err.status, err.message))  # the hub's refusal, in Core's envelope


def _http(err: HTTPException) -> Response:
    status = err.code or 500
    return error_response(refuse(status, "not found" if status == 404 else (err.name or "error").lower()))


def _unexpected(err: Exception) -> Response:
    # Flask calls error handlers inside its own `except` block, so the traceback is there to log.
    log.exception("unhandled error on %s %s", request.method, request.path)  # noqa: LOG004
    return error_response(refuse(500, "internal_error", request_id=g.get("request_id")))


def _too_large(max_bytes: int, observed: int) -> ApiError:
    return refuse(413, "payload too large", max_bytes=max_bytes)


def json_body() -> Any:
    """The body as JSON (empty: `{}`), at most 1 MiB, else 413 as Core. Not JSON: 400 saying why
    (Core answers 500 from its catch-all; the hub tells the integrator what to fix)."""
    raw = read_raw(rules.BODY_MAX_BYTES, _too_large)
    if not raw:
        return {}
    try:
        return strict_json_loads(raw)
    except json.JSONDecodeError as err:
        raise refuse(400, f"The request body is not valid JSON ({err.msg} at line {err.lineno} "
                          f"column {err.colno}).") from None
    except (UnicodeError, ValueError, RecursionError):
        raise refuse(400, "The request body is not valid JSON (or holds duplicate keys, NaN or "
                          "Infinity, NUL characters or lone surrogates).") from None
