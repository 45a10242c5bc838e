"""Core's Client API v1 (CLIENT_API_AND_EXECUTOR.md §A): `POST /run` and `GET /jobs/<job_id>`, as
Dify, n8n, the MCP server and the connect SDKs call them with a Client Token (`Authorization:
Bearer` or `?token=`). `GET /health` is health.py's.

Core's conventions hold on every answer here (§1): JSON as `application/json; charset=utf-8`,
`Cache-Control: no-store`, Core's envelope `{"error": "<text>"}` (answers.py), 401 without
WWW-Authenticate, an executor token refused with 403, and any other method 404 `{"error": "not
found"}` once the caller is known. Unlike Core, a body that is not JSON is a 400, not a 500; an
unexpected failure is Core's 500 `{"error": "internal_error", "request_id"}` with `X-Request-Id`.

`/jobs/<job_id>/tools/*` (the job's tool proxy) is another blueprint's: only the single-segment
path is routed here."""
from __future__ import annotations

import json
import logging
from typing import Any

from flask import Blueprint, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from ..errors import ApiError, error_response
from ..identity.models import ClientApp
from ..jobs import credentials, lookup, rules, submit
from ..jobs.answers import CoreError, executor_token_refused, not_found, refuse, unauthorized
from ..validation import strict_json_loads
from .auth import database
from .body import read_raw

bp = Blueprint("client_api", __name__)
log = logging.getLogger(__name__)

OTHER_METHODS = ["PUT", "PATCH", "DELETE"]


@bp.after_request
def _core_json(response: Response) -> Response:
    if response.mimetype == "application/json":
        response.headers["Content-Type"] = "application/json; charset=utf-8"
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.errorhandler(ApiError)
def _refused(err: ApiError) -> Response:
    if isinstance(err, CoreError):
        return error_response(err)
    return error_response(refuse(err.status, err.message))  # not raised here; kept in Core's envelope


@bp.errorhandler(HTTPException)
def _http(err: HTTPException) -> Response:
    status = err.code or 500
    return error_response(refuse(status, "not found" if status == 404 else (err.name or "error").lower()))


@bp.errorhandler(Exception)
def _unexpected(err: Exception) -> Response:
    # Flask calls error handlers inside its own `except` block, so the traceback is there to log.
    log.exception("unhandled error on %s %s", request.method, request.path)  # noqa: LOG004
    return error_response(refuse(500, "internal_error", request_id=g.get("request_id")))


def _json(body: dict[str, Any], status: int) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response


def _client(db: Any) -> ClientApp:
    """The client app whose token the request presents: 401 for none (or an unknown or disabled
    one), 403 for an executor token."""
    caller = credentials.resolve(db, credentials.presented(request))
    if caller.executor is not None:
        raise executor_token_refused()
    if caller.client is None:
        raise unauthorized()
    return caller.client


def _too_large(max_bytes: int, observed: int) -> ApiError:
    return refuse(413, "payload too large", max_bytes=max_bytes)


def _body() -> Any:
    """The body as JSON (empty: `{}`), at most 1 MiB; the Content-Type is not checked (Core)."""
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


@bp.post("/run")
def run() -> Response:
    with database().session() as db:
        client = _client(db)
        submit.refuse_when_paused(db)
        body = _body()
        return _json(submit.submit(db, client, body), 202)


@bp.get("/jobs/<job_id>")
def job(job_id: str) -> Response:
    """Not refused while the hub is paused: a paused hub still answers what became of a job."""
    with database().session() as db:
        client = _client(db)
        record = lookup.own_job(db, client.app_id, job_id)
        if record is None:
            raise not_found()
        return _json(record, 200)


@bp.route("/run", methods=["GET", *OTHER_METHODS])
@bp.route("/jobs/<job_id>", methods=["POST", *OTHER_METHODS])
def other_method(job_id: str | None = None) -> Response:
    """Core's private surface: authentication first, then 404 for a method it does not serve."""
    with database().session() as db:
        _client(db)
    raise not_found()
