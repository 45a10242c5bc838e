"""POST /approvals/<number>/decision: the business system decides an approval (BUSINESS_SIDE.md
§F.2). Outside the three API surfaces, as in Core: its answers are Core's bodies
(`{"error": "<中文>"}` on refusal), not the hub's envelope. A refusal rolls back everything the
request did."""
from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, abort, current_app, jsonify, request

from ..errors import ApiError
from ..identity.tokens import bearer_from_header
from ..invocations import decisions
from .body import read_raw

bp = Blueprint("approval_decisions", __name__)


@bp.post("/approvals/<approval_id>/decision")
def decide(approval_id: str) -> Response:
    if not (approval_id.isascii() and approval_id.isdigit()):
        abort(404)  # Core's route matches digits only
    if len(approval_id) > 18:  # beyond any approval's number
        return _json({"error": decisions.NOT_FOUND}, 404)
    try:
        raw: bytes | None = read_raw(decisions.BODY_MAX_BYTES)
    except ApiError:  # over the limit: refused in its turn, after the approval is looked up
        raw = None
    credentials = decisions.Credentials(
        bearer=bearer_from_header(request.headers.get("Authorization")) or request.args.get("token") or None,
        timestamp=request.headers.get("X-Bailing-Timestamp"), signature=request.headers.get("X-Bailing-Signature"),
        now_ms=time.time_ns() // 1_000_000)
    try:
        with current_app.extensions["bailing"].db.session() as db:
            answer, status = decisions.decide(db, int(approval_id), raw, credentials), 200
    except decisions.Refused as refused:
        answer, status = refused.body, refused.status
    return _json(answer, status)


def _json(body: dict[str, Any], status: int) -> Response:
    response = jsonify(body)
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    return response
