"""A Dify-like Client API consumer: what the BailingHub Dify plugin (CLIENT_API_AND_EXECUTOR.md §A.9,
Dify column) sends and checks, as a process of its own.

    BAILINGHUB_CLIENT_TOKEN=<client token> python -m tests.peers.dify_client run \\
        --base-url http://127.0.0.1:8000 --route desk --input "Look up C-100234"

Commands: `check` (the provider's credential check), `submit` (POST /run), `get` (GET /jobs/<id>),
`wait` (poll until a terminal status or the wait ends), `run` (check, submit, wait). The last line
on stdout is a JSON summary; the exit code is 0 when every step passed the plugin's checks, 1 when
the hub's answer failed one (an HTTP error or an invalid body), 2 for bad input or configuration.

The plugin's rules, from the contract: the base URL is an absolute http(s) URL without userinfo,
query or fragment, plain http only for localhost/127.0.0.1/::1; the credential check is an
unauthenticated GET /health that must be a JSON object with a string `status`, then GET
/jobs/00000000-0000-0000-0000-000000000000 with the token, which must be 404 (401: the token is
rejected); /run gets exactly {request_id, route, input} and must answer 202, /jobs 200; replies
are read up to 1 MiB; a job must have a 8-4-4-4-12 hex `job_id` (or `id`), a `status` among the
six, a `request_id` of at most 128 characters (non-empty on submit), `route`/`target` strings of
at most 300 when present, an object `result` and a string `error` when not null; the wait lasts
1-60 s polling every 0.5-10 s (defaults 20 and 2); timeouts are 5 s to connect and 30 s to read."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from tests.peers._wire import TooLarge, emit, read_limited

USER_AGENT = "bailinghub-dify-plugin/0.1.0"
CONNECT_TIMEOUT, READ_TIMEOUT = 5.0, 30.0
MAX_REPLY_BYTES = 1024 * 1024
TERMINAL = frozenset({"done", "error", "rejected"})
KNOWN = frozenset({"queued", "running", "dispatched"}) | TERMINAL
ROUTE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
JOB_ID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
SENTINEL_JOB = "00000000-0000-0000-0000-000000000000"


class HubError(Exception):
    """The hub's answer failed one of the plugin's checks (what the plugin shows the user)."""

    def __init__(self, message: str, status_code: int | None = None, retryable: bool = False,
                 body: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
        self.body = body


def base_url(value: str) -> str:
    raw = (value or "").strip()
    if not raw:
        raise ValueError("BailingHub Base URL is required.")
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("BailingHub Base URL must be an absolute HTTP(S) URL.")
    if parts.username or parts.password:
        raise ValueError("BailingHub Base URL must not contain embedded credentials.")
    if parts.query or parts.fragment:
        raise ValueError("BailingHub Base URL must not contain a query string or fragment.")
    if parts.scheme == "http" and (parts.hostname or "").lower() not in LOOPBACK:
        raise ValueError("Use HTTPS for non-loopback BailingHub connections.")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def required(value: Any, name: str, max_length: int | None = None) -> str:
    text = str(value or "").strip()
    if not text:
        raise ValueError(f"{name} is required.")
    if max_length is not None and len(text) > max_length:
        raise ValueError(f"{name} must not exceed {max_length} characters.")
    return text


def bounded(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number between {low} and {high}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number between {low} and {high}.") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be between {low} and {high}.")
    return number


def http_error(status: int, raw: bytes) -> HubError:
    messages = {401: "BailingHub rejected the Client Token.",
                403: "The BailingHub client is not allowed to perform this operation.",
                404: "The BailingHub job was not found or is not owned by this client.",
                409: "BailingHub rejected the request because of an idempotency or routing conflict.",
                429: "The BailingHub client rate limit was exceeded. Retry the same request_id later."}
    message = messages.get(status) or ("BailingHub is temporarily unavailable." if status >= 500
                                       else f"BailingHub rejected the request (HTTP {status}).")
    if status in (400, 409) and len(raw) <= 4096:  # only the short documented `error` is shown
        try:
            decoded = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            decoded = None
        detail = decoded.get("error") if isinstance(decoded, dict) else None
        if isinstance(detail, str) and 0 < len(detail) <= 300:
            message = f"{message} {detail}"
    return HubError(message, status, status in (408, 425, 429) or status >= 500,
                    raw[:2000].decode("utf-8", "replace"))


def normalize_job(body: dict[str, Any], require_request_id: bool = False) -> dict[str, Any]:
    """The plugin's reading of a job (submit or get reply): what it keeps, or HubError."""
    job_id = str(body.get("job_id") or body.get("id") or "").strip()
    status = str(body.get("status") or "").strip()
    request_id = str(body.get("request_id") or "").strip()
    if not JOB_ID.fullmatch(job_id) or status not in KNOWN:
        raise HubError("BailingHub returned an invalid job response.")
    if require_request_id and not request_id:
        raise HubError("BailingHub returned a job without request_id.")
    if len(request_id) > 128:
        raise HubError("BailingHub returned an invalid request_id.")
    job: dict[str, Any] = {"job_id": job_id, "request_id": request_id, "status": status,
                           "terminal": status in TERMINAL}
    for key in ("route", "target"):
        if body.get(key) is not None:
            if not isinstance(body[key], str) or len(body[key]) > 300:
                raise HubError(f"BailingHub returned an invalid {key} value.")
            job[key] = body[key]
    if body.get("result") is not None:
        if not isinstance(body["result"], dict):
            raise HubError("BailingHub returned an invalid result value.")
        job["result"] = body["result"]
    if body.get("error") is not None:
        if not isinstance(body["error"], str):
            raise HubError("BailingHub returned an invalid error value.")
        job["error"] = body["error"][:1000]
    return job


class DifyClient:
    def __init__(self, url: str, token: str):
        self.url = base_url(url)
        self.token = required(token, "BailingHub Client Token")
        self.http = requests.Session()
        self.calls: list[dict[str, Any]] = []  # method, path, status: what the summary shows

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, authenticated: bool = True,
                expected: frozenset[int] = frozenset({200})) -> dict[str, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if authenticated:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = self.http.request(method, self.url + path, headers=headers,
                                         data=None if body is None else json.dumps(body).encode("utf-8"),
                                         timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), stream=True)
            raw = read_limited(response, MAX_REPLY_BYTES)
        except TooLarge:
            raise HubError("BailingHub response exceeded the 1 MiB safety limit.") from None
        except requests.Timeout:
            raise HubError("BailingHub request timed out.", retryable=True) from None
        except requests.RequestException:
            raise HubError("Could not connect to BailingHub.", retryable=True) from None
        self.calls.append({"method": method, "path": path, "status": response.status_code})
        if response.status_code not in expected:
            raise http_error(response.status_code, raw)
        if response.status_code == 404:  # the credential probe's expected answer
            return {}
        try:
            decoded = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise HubError("BailingHub returned a non-JSON response.") from None
        if not isinstance(decoded, dict):
            raise HubError("BailingHub returned a non-object JSON response.")
        return decoded

    def check(self) -> None:
        """The provider's credential validation."""
        health = self.request("GET", "/health", authenticated=False)
        if not isinstance(health.get("status"), str):
            raise HubError("The configured URL did not return a BailingHub health response.")
        try:
            self.request("GET", f"/jobs/{SENTINEL_JOB}", expected=frozenset({404}))
        except HubError as err:
            if err.status_code == 401:
                raise HubError("token rejected: BailingHub rejected the Client Token.", 401) from None
            raise

    def submit(self, request_id: Any, route: Any, input_text: Any) -> dict[str, Any]:
        rid = required(request_id, "request_id", 128)
        key = required(route, "route", 64)
        text = required(input_text, "input", 100_000)
        if not ROUTE.fullmatch(key):
            raise ValueError("route must match ^[a-z0-9][a-z0-9_-]{1,63}$.")
        body = self.request("POST", "/run", {"request_id": rid, "route": key, "input": text},
                            expected=frozenset({202}))
        return normalize_job(body, require_request_id=True)

    def get(self, job_id: Any) -> dict[str, Any]:
        jid = required(job_id, "job_id", 36)
        if not JOB_ID.fullmatch(jid):
            raise ValueError("job_id must be a UUID returned by BailingHub.")
        return normalize_job(self.request("GET", f"/jobs/{jid}"))

    def wait(self, job_id: Any, max_wait: Any = 20, interval: Any = 2) -> dict[str, Any]:
        seconds = bounded(max_wait, "max_wait_seconds", 1, 60)
        every = bounded(interval, "poll_interval_seconds", 0.5, 10)
        deadline = time.monotonic() + seconds
        latest = self.get(job_id)
        polls = 1
        while latest["status"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(min(every, max(0.0, deadline - time.monotonic())))
            latest = self.get(job_id)
            polls += 1
        return {**latest, "wait_timed_out": latest["status"] not in TERMINAL, "polls": polls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.dify_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("check", "submit", "get", "wait", "run"))
    parser.add_argument("--base-url", default=os.environ.get("BAILINGHUB_BASE_URL", ""))
    parser.add_argument("--token", default=None,
                        help="the Client Token (default: BAILINGHUB_CLIENT_TOKEN, which keeps it out of ps)")
    parser.add_argument("--route", default="")
    parser.add_argument("--input", default="")
    parser.add_argument("--request-id", default=None, help="default: a new dify-<uuid>")
    parser.add_argument("--job-id", default="")
    parser.add_argument("--max-wait", default="20", help="seconds, 1-60 (the wait tool's default 20)")
    parser.add_argument("--interval", default="2", help="seconds, 0.5-10 (the wait tool's default 2)")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"peer": "dify", "command": args.command}
    client: DifyClient | None = None
    try:
        client = DifyClient(args.base_url, args.token if args.token is not None
                            else os.environ.get("BAILINGHUB_CLIENT_TOKEN", ""))
        if args.command in ("check", "run"):
            client.check()
            summary["credentials"] = "valid"
        job_id = args.job_id
        if args.command in ("submit", "run"):
            summary["submitted"] = client.submit(args.request_id or f"dify-{uuid.uuid4()}", args.route, args.input)
            job_id = summary["submitted"]["job_id"]
        if args.command == "get":
            summary["job"] = client.get(job_id)
        if args.command in ("wait", "run"):
            summary["job"] = client.wait(job_id, args.max_wait, args.interval)
        summary["ok"] = True
        code = 0
    except HubError as err:
        summary.update(ok=False, error=str(err), status_code=err.status_code, retryable=err.retryable,
                       body=err.body)
        code = 1
    except ValueError as err:
        summary.update(ok=False, error=str(err), status_code=None, retryable=False)
        code = 2
    if client is not None:
        summary["calls"] = client.calls
    emit(summary)
    return code


if __name__ == "__main__":
    sys.exit(main())
