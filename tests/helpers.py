"""What many test files share: the admins' password, bearer headers, the checks of an API answer
and of a bailing-admin result, and the command-line steps that set a hub up.

Plain functions and constants, imported by name: `from tests.helpers import assert_error, bearer`.
The `cli` argument is the suite's in-process runner (the `cli` fixture): it returns
(exit code, stdout as JSON or text, stderr as JSON or text)."""
from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

Cli = Callable[..., tuple[int, Any, Any]]

PASSWORD = "correct horse battery staple"
"""The password of every admin the tests create (long enough for the hub's minimum)."""

PASSWORD_LINE = PASSWORD + "\n"
"""PASSWORD as `--password-stdin` reads it: one line."""

NEW_PASSWORD = "a brand new long password"
"""The password an admin changes theirs to."""


# ---------------------------------------------------------------- HTTP

class LoopbackServer(ThreadingHTTPServer):
    """A peer on loopback (a business system, a webhook receiver) for the hub to call.

    A client that hangs up is no error of the peer's: the hub closes a connection whose answer
    it refuses (too large, too slow). socketserver would print a traceback for it to whatever
    `sys.stderr` is at that moment, which is the in-process CLI runner's capture; so those are
    dropped here, and any other error is still printed."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def bearer(token: str) -> dict[str, str]:
    """The Authorization header that presents `token`."""
    return {"Authorization": f"Bearer {token}"}


def session_bearer(session: dict[str, Any]) -> dict[str, str]:
    """The Authorization header of an agent session (as `sessions issue` or a sign-in returned it)."""
    return bearer(session["access_token"])


def query_of(url: str) -> dict[str, str]:
    """The query parameters of `url`, the first value of each."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def assert_ok(response: requests.Response, status: int = 200) -> Any:
    """An API answer that succeeded with `status`: JSON, never cached; returns its body."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers.get("Cache-Control") == "no-store"
    assert response.headers.get("Content-Type", "").startswith("application/json"), response.headers
    return response.json()


def assert_error(response: requests.Response, status: int, code: str) -> dict[str, Any]:
    """An API refusal: `status`, never cached, the envelope's `error` is `code` and its `message`
    a non-empty string; returns the envelope."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert isinstance(body, dict), body
    assert body["error"] == code, body
    assert isinstance(body.get("message"), str) and body["message"], body
    return body


# ---------------------------------------------------------------- bailing-admin

def cli_ok(result: tuple[int, Any, Any]) -> dict[str, Any]:
    """A bailing-admin result that succeeded; returns its JSON report."""
    code, out, err = result
    assert code == 0, err
    assert isinstance(out, dict), out
    return out


def cli_refused(result: tuple[int, Any, Any], error: str) -> dict[str, Any]:
    """A bailing-admin refusal: exit 1, nothing on stdout, a JSON error `error` with a message
    on stderr; returns that error."""
    code, out, err = result
    assert code == 1, (out, err)
    assert out == ""
    assert isinstance(err, dict), err
    assert err["error"] == error, err
    assert err["message"]
    return err


def make_admin(cli: Cli, name: str, role: str) -> str:
    """An admin `name` with `role` and PASSWORD; returns the name."""
    code, _, err = cli("admins", "create", name, "--role", role, "--password-stdin", input=PASSWORD_LINE)
    assert code == 0, err
    return name


def admin_token(cli: Cli, name: str, role: str) -> str:
    """A new admin `name` with `role`, and a personal admin API token of theirs."""
    make_admin(cli, name, role)
    code, out, err = cli("admins", "token", name)
    assert code == 0, err
    return str(out["token"])


def apply_config(cli: Cli, directory: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """`config apply` of `doc` (written to a new file in `directory`), which must be accepted;
    returns the apply report."""
    path = directory / f"hub-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, err
    assert isinstance(out, dict), out
    return out


def row_count(sql: Callable[..., list[tuple[Any, ...]]], table: str) -> int:
    """How many rows `table` holds (`sql` is the fixture of that name)."""
    return int(sql(f"SELECT count(*) FROM {table}")[0][0])


def row_counts(sql: Callable[..., list[tuple[Any, ...]]], *tables: str) -> dict[str, int]:
    """How many rows each of `tables` holds, to show a refusal wrote nothing."""
    return {table: row_count(sql, table) for table in tables}
