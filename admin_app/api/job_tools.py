"""Tools inside a job (CLIENT_API_AND_EXECUTOR.md §C.3, §C.4): `GET /jobs/<job_id>/tools/defs` and
`POST /jobs/<job_id>/tools/invoke`, opened by the job's `tool_token` alone (`Authorization:
Bearer` or `?token=`), never by a client or executor token.

Core's conventions (§1): JSON as `application/json; charset=utf-8`, `Cache-Control: no-store`,
Core's envelope `{"error": "<text>"}`. A job id that is not 36 characters of `[0-9a-f-]` is not
these routes: it gets what the rest of `/jobs/` answers (401 without a known token, 404 with a
client token, 403 with an executor token), as do other methods on these paths. The invoke body is
read leniently, as Core reads it: unreadable or over 1 MiB, it is `{}` (and so 400, no `tool`)."""
from __future__ import annotations

import re
import uuid
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from ..errors import ApiError
from ..jobs import credentials, rules, tool_calls
from ..jobs.answers import executor_token_refused, not_found, unauthorized
from ..validation import strict_json_loads
from .auth import database
from .body import read_raw
from .core_surface import serve_as_core

bp = Blueprint("job_tools", __name__)
serve_as_core(bp)

JOB_ID = re.compile(r"[0-9a-f-]{36}")
DEFS = "/jobs/<job_id>/tools/defs"
INVOKE = "/jobs/<job_id>/tools/invoke"
OTHER_METHODS = ["PUT", "PATCH", "DELETE"]


def _reply(reply: tool_calls.Reply) -> Response:
    response = jsonify(reply.body)
    response.status_code = reply.status
    return response


def _job_id(value: str) -> uuid.UUID | None:
    """The job the path names (None: not these routes). A well-formed id that is no canonical
    UUID names no job (Core compares the text)."""
    if not JOB_ID.fullmatch(value):
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        parsed = None
    return parsed if parsed is not None and str(parsed) == value else uuid.UUID(int=0)


def _elsewhere() -> Response:
    """What `/jobs/` answers outside these two routes: the caller first, then 404."""
    with database().session() as db:
        caller = credentials.resolve(db, credentials.presented(request))
    if caller.executor is not None:
        raise executor_token_refused()
    if caller.client is None:
        raise unauthorized()
    raise not_found()


def _secret_key() -> str | bytes:
    key = current_app.secret_key
    if key is None:
        raise RuntimeError("the hub has no secret key")
    return key


def _body() -> Any:
    """Core's lenient read: `{}` when the body is empty, unreadable or too large."""
    try:
        raw = read_raw(rules.BODY_MAX_BYTES)
    except ApiError:
        return {}
    if not raw:
        return {}
    try:
        return strict_json_loads(raw)
    except (UnicodeError, ValueError, RecursionError):
        return {}


@bp.get(DEFS)
def tool_defs(job_id: str) -> Response:
    ident = _job_id(job_id)
    if ident is None:
        return _elsewhere()
    names = [name.strip() for value in request.args.getlist("names") for name in value.split(",") if name.strip()]
    return _reply(tool_calls.defs(database(), ident, credentials.presented(request), names, _secret_key()))


@bp.post(INVOKE)
def tool_invoke(job_id: str) -> Response:
    ident = _job_id(job_id)
    if ident is None:
        return _elsewhere()
    return _reply(tool_calls.invoke(database(), ident, credentials.presented(request), _body, _secret_key()))


@bp.route(DEFS, methods=["POST", *OTHER_METHODS])
@bp.route(INVOKE, methods=["GET", *OTHER_METHODS])
def other_method(job_id: str) -> Response:
    return _elsewhere()
