"""/agent-api/v1/tool-invocations: governed business calls, their resume, their receipt, and
what inspection this hub offers.

These endpoints manage their own transactions (the journal must be committed before a business
request leaves), so they authenticate inside the service instead of through the decorator."""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from .. import limits
from .. import surfaces
from ..errors import ApiError
from ..identity.tokens import bearer_from_header
from ..invocations import results, service
from ..runtime.pause import refuse_when_paused
from .body import read_empty_object, read_json_object

bp = Blueprint("agent_invocations", __name__, url_prefix=surfaces.AGENT_INVOCATIONS)


def _database():
    return current_app.extensions["bailing"].db


def _bearer() -> str | None:
    return bearer_from_header(request.headers.get("Authorization"))


def _authenticated_first() -> None:
    """Refuse a stranger before reading up to 2 MiB of body; the service checks again in the
    transaction that acts."""
    service.authenticate(_database(), _bearer())


@service.guarded  # the database failing here answers as it does anywhere else in a call
def _not_paused() -> None:
    """A new call, and the resume of any call (even one whose stable result is stored), is
    refused while the hub is paused, before the body is read (BUSINESS_SIDE.md § E.2)."""
    with _database().session() as db:
        refuse_when_paused(db)


@bp.post("")
def invoke():
    _authenticated_first()
    _not_paused()
    body = read_json_object(limits.INVOCATION_ENVELOPE_MAX_BYTES, service.envelope_too_large)
    return jsonify(service.invoke(_database(), _bearer(), body))


def _no_query_string() -> None:
    if request.query_string:
        raise ApiError("invalid_request", "This endpoint takes no query string.")


@bp.post("/<invocation_id>/resume")
def resume(invocation_id: str):
    _authenticated_first()
    service.invocation_path_id(invocation_id)
    _not_paused()
    # The official client sends no body at all; `{}` is accepted too.
    read_empty_object("resume", limits.RESUME_BODY_MAX_BYTES, service.envelope_too_large)
    return jsonify(service.resume(_database(), _bearer(), invocation_id))


@bp.get("/<invocation_id>/receipt")
def receipt(invocation_id: str):
    _authenticated_first()
    _no_query_string()
    return jsonify(service.receipt(_database(), _bearer(), invocation_id))


@bp.get("/inspection-capabilities")
def inspection_capabilities():
    _authenticated_first()
    _no_query_string()
    return jsonify(results.inspection_capabilities())
