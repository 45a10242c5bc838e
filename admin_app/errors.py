"""One JSON error envelope for every API: {"error": code, "message": text, ...extra}.

Raise ApiError anywhere below a blueprint; the handlers registered here turn it, and every
unexpected exception, into that envelope. No stack trace or exception text reaches a client.
"""
from __future__ import annotations

import logging

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from .error_codes import CODES

log = logging.getLogger(__name__)

AGENT_API_PREFIX = "/agent-api"
API_PREFIXES = (AGENT_API_PREFIX, "/agent-auth", "/admin/api")
# Areas whose spec names their own code for an internal failure.
INTERNAL_ERROR_CODES = (
    ("/agent-api/v1/conversation-audits", "conversation_audit_internal_error"),
    ("/admin/api/conversation-audits", "conversation_audit_internal_error"),
    ("/agent-api/v1/tool-invocations", "agent_tool_internal_error"),
)


class ApiError(Exception):
    """An answer in the envelope. The status comes from the code's entry in error_codes.CODES
    (an unknown code is a KeyError at the raise, caught by the tests); the message defaults to the
    registry's."""

    def __init__(self, code: str, message: str | None = None, **extra):
        entry = CODES[code]
        message = entry.message if message is None else message
        super().__init__(message)
        self.status = entry.status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}
        self.commit_anyway = False  # see Database.session

    def body(self) -> dict:
        return {"error": self.code, "message": self.message, **self.extra}


def invalid_request(err) -> ApiError:
    """A validation.Invalid (or a Checker's problems) as the 400 envelope, each problem with
    its field path."""
    problems = err.problems
    message = "; ".join(f"{p}: {m}" if p else m for p, m in problems)
    return ApiError("invalid_request", message,
                    problems=[{"path": p, "message": m} for p, m in problems])


def unauthorized() -> ApiError:
    """The single refusal for any failed bearer: unknown, expired, revoked, malformed."""
    err = ApiError("unauthorized", "A valid bearer token is required.")
    err.headers["WWW-Authenticate"] = 'Bearer realm="bailing"'
    return err


def is_api_path(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in API_PREFIXES)


def error_response(err: ApiError):
    response = jsonify(err.body())
    response.status_code = err.status
    for name, value in err.headers.items():
        response.headers[name] = value
    return response


# Plain HTTP errors on API paths keep the envelope too, with stable codes.
_HTTP_CODES = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(err: ApiError):
        return error_response(err)

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException):
        if not is_api_path(request.path):
            return err
        if err.code == 404 and request.path.startswith(AGENT_API_PREFIX + "/"):
            # As upstream Core: the bearer is checked before a path is known not to exist.
            from .api.auth import agent_bearer_is_valid

            if not agent_bearer_is_valid():
                return error_response(unauthorized())
        code = _HTTP_CODES.get(err.code or 500, "http_error")
        api_err = ApiError(code, err.name)
        api_err.status = err.code or 500  # "http_error" carries the status Werkzeug chose
        if err.code == 405 and err.valid_methods:
            api_err.headers["Allow"] = ", ".join(err.valid_methods)
        return error_response(api_err)

    @app.errorhandler(Exception)
    def _unexpected(err: Exception):
        # Flask calls error handlers inside its own `except` block, so the traceback is there to log.
        log.exception("unhandled error on %s %s", request.method, request.path)  # noqa: LOG004
        if is_api_path(request.path):
            code = next((c for prefix, c in INTERNAL_ERROR_CODES if request.path.startswith(prefix)),
                        "internal_error")
            return error_response(ApiError(code))
        return "Internal server error.", 500
