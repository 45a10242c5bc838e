"""One JSON error envelope for every API: {"error": code, "message": text, ...extra}.

Raise ApiError anywhere below a blueprint; the handlers registered here turn it, and every
unexpected exception, into that envelope. No stack trace or exception text reaches a client.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException, InternalServerError, MethodNotAllowed

from .error_codes import CODES
from .surfaces import AGENT_API, internal_error_code, is_api_path

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An answer in the envelope. The status comes from the code's entry in error_codes.CODES
    (an unknown code is a KeyError at the raise, caught by the tests); the message defaults to the
    registry's."""

    def __init__(self, code: str, message: str | None = None, **extra: Any) -> None:
        entry = CODES[code]
        message = entry.message if message is None else message
        super().__init__(message)
        self.status = entry.status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}
        self.commit_anyway = False  # see Database.session

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


class _HasProblems(Protocol):
    @property
    def problems(self) -> Sequence[tuple[str, str]]: ...


def invalid_request(err: _HasProblems) -> ApiError:
    """A validation.Invalid (or a Checker's problems) as the 400 envelope, each problem with
    its field path."""
    problems = err.problems
    message = "; ".join(f"{p}: {m}" if p else m for p, m in problems)
    return ApiError("invalid_request", message,
                    problems=[{"path": p, "message": m} for p, m in problems])


def invalid_field(path: str, problem: str) -> ApiError:
    """The 400 envelope for one bad field outside a Checker, shaped as field validation's."""
    return ApiError("invalid_request", f"{path}: {problem}",
                    problems=[{"path": path, "message": problem}])


def unauthorized() -> ApiError:
    """The single refusal for any failed bearer: unknown, expired, revoked, malformed."""
    err = ApiError("unauthorized")
    err.headers["WWW-Authenticate"] = 'Bearer realm="bailing"'
    return err


def error_response(err: ApiError) -> Response:
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


# Paths outside the APIs get an HTML page: the console puts its renderer
# (HTTPException -> Response) in app.extensions under this name; without one, Werkzeug's page.
ERROR_PAGE = "bailing_error_page"


def _page(err: HTTPException) -> HTTPException | Response:
    render = current_app.extensions.get(ERROR_PAGE)
    return render(err) if render is not None else err


def register_error_handlers(app: Flask, agent_bearer_is_valid: Callable[[], bool]) -> None:
    """`agent_bearer_is_valid` comes from the API package: as upstream Core, a path of the agent
    API that does not exist is a 404 only for a valid bearer, else a 401."""

    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> Response:
        return error_response(err)

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> HTTPException | Response:
        if not is_api_path(request.path):
            return _page(err)
        if err.code == 404 and request.path.startswith(AGENT_API.root + "/"):
            if not agent_bearer_is_valid():
                return error_response(unauthorized())
        code = _HTTP_CODES.get(err.code or 500, "http_error")
        api_err = ApiError(code, err.name)
        api_err.status = err.code or 500  # "http_error" carries the status Werkzeug chose
        if isinstance(err, MethodNotAllowed) and err.valid_methods:
            api_err.headers["Allow"] = ", ".join(err.valid_methods)
        return error_response(api_err)

    @app.errorhandler(Exception)
    def _unexpected(err: Exception) -> HTTPException | Response:
        # Flask calls error handlers inside its own `except` block, so the traceback is there to log.
        log.exception("unhandled error on %s %s", request.method, request.path)  # noqa: LOG004
        if is_api_path(request.path):
            return error_response(ApiError(internal_error_code(request.path)))
        return _page(InternalServerError())
