"""Completion callbacks in the admin API (CLIENT_API_AND_EXECUTOR.md §D.3, §F): Core's dead-letter
endpoints over the hub's dead callbacks, and every callback of one job for the console.

    GET  /admin/api/delivery-dlq?all=1&limit=      runs:read   {items: [...]}
    POST /admin/api/delivery-dlq/<id>/resend       runs:write  200 {ok: true} | 502 {ok: false, error}
    POST /admin/api/delivery-dlq/<id>/resolve      runs:write  {ok: true}
    GET  /admin/api/jobs/<job_id>/callbacks        runs:read   {job_id, callbacks: [...]}

Answers and refusals of these routes are Core's (`{"error": "not found"}`), beyond the bearer
check, which answers as every admin API route does. Core reads no body here; neither does the
hub."""
from __future__ import annotations

from typing import NoReturn

from flask import Blueprint, Response, current_app, g, jsonify, request

from .. import surfaces
from ..jobs import answers, dead_letters
from .auth import admin_permission_required, database

bp = Blueprint("job_callbacks", __name__, url_prefix=surfaces.ADMIN_API.prefix)

BIGINT_MAX = 2**63 - 1


def _answer(status: int, body: dict[str, object]) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response


def _not_found() -> NoReturn:
    """Raised, not returned: a refusal rolls the request's transaction back (the bearer check's
    last-used stamp included), as every refusal of the admin API does."""
    raise answers.not_found()


def _id(raw: str) -> int | None:
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) <= BIGINT_MAX else None


@bp.get("/delivery-dlq")
@admin_permission_required("runs:read")
def list_dead_letters() -> Response:
    every = request.args.get("all") in ("1", "true")
    limit = dead_letters.limit_of(request.args.get("limit"))
    return jsonify({"items": dead_letters.letters(g.db, every, limit)})


@bp.post("/delivery-dlq/<callback_id>/resend")
@admin_permission_required("runs:write")
def resend(callback_id: str) -> Response:
    number = _id(callback_id)
    if number is None:
        _not_found()
    hub = current_app.extensions["bailing"]
    done = dead_letters.replay(database(), hub.settings, current_app.secret_key, number, g.admin.username)
    return _action(done)


@bp.post("/delivery-dlq/<callback_id>/resolve")
@admin_permission_required("runs:write")
def resolve(callback_id: str) -> Response:
    number = _id(callback_id)
    if number is None:
        _not_found()
    return _action(dead_letters.resolve(g.db, number, g.admin.username))


def _action(done: dead_letters.Outcome) -> Response:
    if done.status == "not_found":
        _not_found()
    if done.status in ("delivered", "resolved"):
        return _answer(200, {"ok": True})
    if done.note is not None:
        return _answer(200, {"ok": True, "note": done.note})
    if done.status in ("busy", "not_dead"):
        raise answers.refuse(409, str(done.error), ok=False)
    # Retrying (the worker carries on with the cycle) or dead again. The attempt's own record was
    # committed by the replay; the request's transaction is not.
    raise answers.refuse(502, str(done.error), ok=False, state="pending" if done.status == "retrying" else "dead")


@bp.get("/jobs/<job_id>/callbacks")
@admin_permission_required("runs:read")
def job_callbacks(job_id: str) -> Response:
    found = dead_letters.of_job(g.db, job_id)
    if found is None:
        _not_found()
    return jsonify({"job_id": job_id, "callbacks": found})
