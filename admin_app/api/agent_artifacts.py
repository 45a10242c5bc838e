"""/agent-api/v1/workspaces/<route>/artifacts/<upload_id> (BUSINESS_SIDE.md H.1): upload an
image (POST, the raw bytes as the body) and read its receipt (GET).

An upload_id that is not 64 lowercase hex digits names no endpoint (the router's 404 `not_found`);
any method but GET and POST on a well-formed one is 405. The POST checks what needs no database
first (pause, the metadata header, the declared type and length, the body read within its bound),
so a slow upload holds no database connection; only then does it open the request's transaction.
Any unexpected failure answers 503 artifact_storage_unavailable, as Core does.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps

from flask import Blueprint, current_app, g, jsonify, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BaseConverter

from .. import surfaces
from ..errors import ApiError, unauthorized
from ..identity.sessions import authenticate_access
from ..identity.tokens import bearer_from_header
from ..runtime import artifacts, pause
from ..validation import RESOURCE_KEY
from .auth import agent_session_required, database
from .body import read_raw

log = logging.getLogger(__name__)

bp = Blueprint("agent_artifacts", __name__, url_prefix=surfaces.AGENT_API.prefix)


class UploadIdConverter(BaseConverter):
    regex = r"[0-9a-f]{64}"


@bp.record_once
def _converter(state) -> None:
    # Recorded before the routes below, so registered before they are added: they name it.
    state.app.url_map.converters["upload_id"] = UploadIdConverter

PATH = "/workspaces/<route_key>/artifacts/<upload_id:upload_id>"


def _storage_errors(view: Callable) -> Callable:
    """Any failure that is not an answer of its own is 503 artifact_storage_unavailable."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        try:
            return view(*args, **kwargs)
        except (ApiError, HTTPException):
            raise
        except Exception:  # logged here, answered as Core answers it
            log.exception("artifact request failed on %s %s", request.method, request.path)
            raise ApiError("artifact_storage_unavailable") from None

    return wrapper


def _path_route(route_key: str) -> None:
    # As the other workspace endpoints: a segment that cannot be a route key names no endpoint.
    if RESOURCE_KEY.fullmatch(route_key) is None:
        raise ApiError("not_found", "No such endpoint.")


def _too_large(max_bytes: int, observed: int) -> ApiError:
    return ApiError("artifact_too_large", f"The body is longer than the declared {max_bytes} bytes.",
                    max_bytes=max_bytes, observed_bytes=observed)


@bp.post(PATH)
@_storage_errors
def upload(route_key: str, upload_id: str):
    bearer = bearer_from_header(request.headers.get("Authorization"))
    with database().session() as db:
        if authenticate_access(db, bearer) is None:
            raise unauthorized()
        _path_route(route_key)
        # First of the upload's own checks (BUSINESS_SIDE.md E.2, H.1); the GET is not paused.
        pause.refuse_when_paused(db)
    meta = artifacts.parse_header(request.headers.get(artifacts.HEADER))
    artifacts.check_declared(meta, request.headers.get("Content-Type"), request.content_length)
    data = read_raw(artifacts.read_bound(meta), _too_large)
    public_url = current_app.extensions["bailing"].settings.public_url
    with database().session() as db:
        session = authenticate_access(db, bearer)
        if session is None:  # revoked while the body was read
            raise unauthorized()
        return jsonify(artifacts.upload(db, session, route_key, upload_id, meta, data, public_url))


@bp.get(PATH)
@_storage_errors
@agent_session_required
def receipt(route_key: str, upload_id: str):
    _path_route(route_key)
    return jsonify(artifacts.receipt(g.db, g.agent_session, route_key, upload_id))
