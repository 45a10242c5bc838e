"""/usage/v1: model usage and billing (BUSINESS_SIDE.md §H.4), which this hub does not offer: it runs
no models. `GET /usage/v1/capabilities` (no authentication) says so with `supported: false`, and
every other path under /usage/v1 answers 404 `{"error": "not_found"}`, never 401, so that the
official SDK reports USAGE_UNSUPPORTED rather than a credential problem."""
from __future__ import annotations

from flask import Blueprint, Response, jsonify

PREFIX = "/usage/v1"
# Every method, so that no request under the prefix meets a 405 or an automatic OPTIONS answer.
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

# The shape Core answers, with the two `supported` flags false: what the gateway would be is
# stated as Core states it, so a client that checks the shape before the flag finds it whole.
CAPABILITIES = {
    "schema": "bailing.usage.v1",
    "supported": False,
    "modes": ["credits", "periodic"],
    "streaming": True,
    "orchestration": "host",
    "business_authorization_unchanged": True,
    "model_gateway": {
        "schema": "bailing.model-gateway.v1",
        "supported": False,
        "orchestration": "host",
        "streaming": True,
        "provider_response": "bailing.provider-response.v1",
        "settlement": "asynchronous",
        "model_tools": {"schema": "bailing.model-tools.v1", "directory": True, "execution": True,
                        "tools_path": PREFIX + "/model/tools"},
        "requests_path": PREFIX + "/model/requests",
        "models_path": PREFIX + "/model/models",
        "summary_path": PREFIX + "/model/summary",
        "billing_unit": "USD",
        "turn_required": False,
    },
}

bp = Blueprint("usage", __name__, url_prefix=PREFIX)


@bp.after_request
def _json_never_cached(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    response.headers["Content-Type"] = "application/json; charset=utf-8"
    return response


@bp.get("/capabilities")
def capabilities() -> Response:
    return jsonify(CAPABILITIES)


@bp.route("", methods=METHODS, provide_automatic_options=False, strict_slashes=False)
@bp.route("/<path:_rest>", methods=METHODS, provide_automatic_options=False)
def not_found(_rest: str = "") -> tuple[Response, int]:
    return jsonify({"error": "not_found"}), 404
