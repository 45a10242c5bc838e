"""Refusals on Core's surfaces (CLIENT_API_AND_EXECUTOR.md §1): Core's envelope `{"error": "<text>"}`
(plus `reason`, `decision`, `max_bytes` where Core adds them, or the pause's `{"status":
"paused"}`), not the hub's `{error, message}`. Raised like any ApiError, rendered by the same
handler, so a service can refuse from anywhere below a blueprint."""
from __future__ import annotations

from typing import Any

from ..errors import ApiError

UNAUTHORIZED = "unauthorized"
NOT_FOUND = "not found"


class CoreError(ApiError):
    """An answer of `status` with exactly `body`. `commit`: the request's transaction commits
    anyway (a refusal that comes after the rate limit was charged keeps the charge, as Core's)."""

    def __init__(self, status: int, body: dict[str, Any], *, commit: bool = False) -> None:
        Exception.__init__(self, str(body.get("error", body)))
        self.status = status
        self.code = "core_error"
        self.message = str(body.get("error", ""))
        self.extra = {}
        self.headers = {}
        self.commit_anyway = commit
        self._body = body

    def body(self) -> dict[str, Any]:
        return self._body


def refuse(status: int, error: str, *, commit: bool = False, **extra: Any) -> CoreError:
    return CoreError(status, {"error": error, **extra}, commit=commit)


def unauthorized() -> CoreError:
    """401 without WWW-Authenticate, as Core answers a missing, unknown or disabled token."""
    return refuse(401, UNAUTHORIZED)


def not_found() -> CoreError:
    return refuse(404, NOT_FOUND)


def executor_token_refused() -> CoreError:
    return refuse(403, "Executor tokens are accepted only on /executor/* (claim, heartbeat, result).")


def paused() -> CoreError:
    return CoreError(503, {"status": "paused"})
