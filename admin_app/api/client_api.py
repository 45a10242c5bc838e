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

from typing import Any

from flask import Blueprint, Response, jsonify, request

from ..identity.models import ClientApp
from ..jobs import credentials, lookup, submit
from ..jobs.answers import executor_token_refused, not_found, unauthorized
from .auth import database
from .core_surface import json_body, serve_as_core

bp = Blueprint("client_api", __name__)
serve_as_core(bp)

OTHER_METHODS = ["PUT", "PATCH", "DELETE"]


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


@bp.post("/run")
def run() -> Response:
    with database().session() as db:
        client = _client(db)
        submit.refuse_when_paused(db)
        body = json_body()
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
