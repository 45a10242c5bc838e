"""An n8n-like Client API consumer: what the BailingHub n8n node (CLIENT_API_AND_EXECUTOR.md §A.9,
n8n column) sends and checks, as a process of its own.

    BAILINGHUB_CLIENT_TOKEN=<client token> python -m tests.peers.n8n_client run \\
        --base-url http://127.0.0.1:8000 --route desk --input "Look up C-100234"

Commands: `test` (n8n's credential test: GET /health with the bearer, any 2xx passes, so any token
does), `submit`, `get`, `wait`, `run` (test, submit, wait). The last stdout line is a JSON
summary; exit 0 when every step passed the node's checks, 1 when the hub's answer failed one,
2 for bad input or configuration.

The node's rules, from the contract: the base URL as Dify's, except that plain http to another
host is allowed with the explicit "allow insecure HTTP" switch (`--allow-insecure-http`); /run gets
exactly {request_id, route, input}; any non-2xx is an error (the body text is never shown); a
reply must be a JSON object of at most 1 MiB serialized, with a 8-4-4-4-12 hex `job_id` (or `id`),
a known `status`, a `request_id` of at most 128 (non-empty on submit); `route` is kept when a string
of at most 64; `report`, `result`, `usage` must be objects and `raw_result`, `error` strings when
present and not null; `created_at`/`updated_at` strings of at most 100; the wait is 1-60 s at
0.5-10 s (defaults 20 / 2) and reports `poll_count` and `elapsed_ms`; every request times out at 15 s."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from tests.peers._wire import TooLarge, emit, read_limited

TIMEOUT = 15.0
MAX_REPLY_BYTES = 1024 * 1024
TERMINAL = frozenset({"done", "error", "rejected"})
KNOWN = frozenset({"queued", "running", "dispatched"}) | TERMINAL
ROUTE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
JOB_ID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
MESSAGES = {400: "BailingHub rejected the request as invalid.",
            401: "BailingHub rejected the Client Token.",
            403: "The BailingHub client is not allowed to perform this operation.",
            404: "The BailingHub job was not found or is not owned by this client.",
            409: "BailingHub rejected the request because of an idempotency or routing conflict.",
            429: "The BailingHub client rate limit was exceeded. Retry the same request ID later."}


class HubError(Exception):
    def __init__(self, message: str, status_code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


def base_url(value: str, allow_insecure_http: bool = False) -> str:
    raw = (value or "").strip()
    if not raw:
        raise ValueError("BailingHub Base URL is required.")
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("BailingHub Base URL must be an absolute HTTP(S) URL.")
    if parts.username or parts.password:
        raise ValueError("BailingHub Base URL must not contain embedded credentials.")
    if parts.query or parts.fragment:
        raise ValueError("BailingHub Base URL must not contain a query string or fragment.")
    if parts.scheme == "http" and not allow_insecure_http and parts.hostname.lower() not in LOOPBACK:
        raise ValueError("Use HTTPS for non-loopback BailingHub connections, or explicitly allow insecure HTTP.")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def text_field(value: Any, name: str, max_length: int) -> str:
    text = str(value or "").strip()
    if not text:
        raise ValueError(f"{name} is required.")
    if len(text) > max_length:
        raise ValueError(f"{name} must not exceed {max_length} characters.")
    return text


def in_range(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number between {low} and {high}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not low <= number <= high:  # NaN fails too
        raise ValueError(f"{name} must be between {low} and {high}.")
    return number


def as_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise HubError("BailingHub returned a non-object JSON response.")
    # JSON.stringify's bytes: no spaces, non-ASCII as UTF-8
    if len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) > MAX_REPLY_BYTES:
        raise HubError("BailingHub response exceeded the 1 MiB safety limit.")
    return value


def normalize_job(value: Any, require_request_id: bool = False) -> dict[str, Any]:
    body = as_object(value)
    job_id = str(body.get("job_id") or body.get("id") or "").strip()
    request_id = str(body.get("request_id") or "").strip()
    status = str(body.get("status") or "").strip()
    if not JOB_ID.fullmatch(job_id) or status not in KNOWN:
        raise HubError("BailingHub returned an invalid job response.")
    if require_request_id and not request_id:
        raise HubError("BailingHub returned a job without request_id.")
    if len(request_id) > 128:
        raise HubError("BailingHub returned an invalid request_id.")
    job: dict[str, Any] = {"job_id": job_id, "request_id": request_id, "status": status,
                           "terminal": status in TERMINAL}
    if isinstance(body.get("route"), str) and len(body["route"]) <= 64:
        job["route"] = body["route"]
    for key in ("report", "result", "usage"):
        if body.get(key) is not None:
            if not isinstance(body[key], dict):
                raise HubError(f"BailingHub returned an invalid {key} value.")
            job[key] = body[key]
    for key in ("raw_result", "error"):
        if body.get(key) is not None:
            if not isinstance(body[key], str):
                raise HubError(f"BailingHub returned an invalid {key} value.")
            job[key] = body[key][:1000] if key == "error" else body[key]
    for key in ("created_at", "updated_at"):
        if body.get(key) is not None:
            if not isinstance(body[key], str) or len(body[key]) > 100:
                raise HubError(f"BailingHub returned an invalid {key} value.")
            job[key] = body[key]
    return job


class N8nClient:
    def __init__(self, url: str, token: str, allow_insecure_http: bool = False):
        self.url = base_url(url, allow_insecure_http)
        self.token = token
        self.http = requests.Session()
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """n8n's httpRequest helper with the credential's bearer: JSON in and out, non-2xx throws."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = self.http.request(method, self.url + path, headers=headers, timeout=TIMEOUT, stream=True,
                                         data=None if body is None else json.dumps(body).encode("utf-8"))
            raw = read_limited(response, 16 * MAX_REPLY_BYTES)  # n8n reads it all; as_object caps it
        except (requests.RequestException, TooLarge):
            raise HubError("Could not connect to BailingHub.") from None
        self.calls.append({"method": method, "path": path, "status": response.status_code})
        status = response.status_code
        if not 200 <= status < 300:
            message = MESSAGES.get(status) or ("BailingHub is temporarily unavailable." if status >= 500
                                               else f"BailingHub rejected the request (HTTP {status}).")
            raise HubError(message, status, status in (408, 425, 429) or status >= 500)
        try:
            return json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, ValueError):
            raise HubError("BailingHub returned an invalid JSON response.") from None

    def test_credentials(self) -> None:
        self.request("GET", "/health")

    def submit(self, request_id: Any, route: Any, input_text: Any) -> dict[str, Any]:
        rid = text_field(request_id, "Request ID", 128)
        key = text_field(route, "Route", 64)
        text = text_field(input_text, "Input", 100_000)
        if not ROUTE.fullmatch(key):
            raise ValueError("Route must match ^[a-z0-9][a-z0-9_-]{1,63}$.")
        return normalize_job(self.request("POST", "/run", {"request_id": rid, "route": key, "input": text}), True)

    def get(self, job_id: Any) -> dict[str, Any]:
        jid = text_field(job_id, "Job ID", 36)
        if not JOB_ID.fullmatch(jid):
            raise ValueError("Job ID must be a UUID returned by BailingHub.")
        return normalize_job(self.request("GET", f"/jobs/{quote(jid, safe='')}"))

    def wait(self, job_id: Any, max_wait: Any = 20, interval: Any = 2) -> dict[str, Any]:
        seconds = in_range(max_wait, "Max Wait Seconds", 1, 60)
        every = in_range(interval, "Poll Interval Seconds", 0.5, 10)
        started = time.monotonic()
        deadline = started + seconds
        polls = 1
        latest = self.get(job_id)
        while not latest["terminal"]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(every, remaining))
            latest = self.get(job_id)
            polls += 1
        return {**latest, "wait_timed_out": not latest["terminal"], "poll_count": polls,
                "elapsed_ms": int((time.monotonic() - started) * 1000)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.n8n_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("test", "submit", "get", "wait", "run"))
    parser.add_argument("--base-url", default=os.environ.get("BAILINGHUB_BASE_URL", ""))
    parser.add_argument("--token", default=None, help="default: BAILINGHUB_CLIENT_TOKEN")
    parser.add_argument("--allow-insecure-http", action="store_true")
    parser.add_argument("--route", default="")
    parser.add_argument("--input", default="")
    parser.add_argument("--request-id", default=None, help="default: a new n8n-<uuid>")
    parser.add_argument("--job-id", default="")
    parser.add_argument("--max-wait", default="20")
    parser.add_argument("--interval", default="2")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"peer": "n8n", "command": args.command}
    client: N8nClient | None = None
    try:
        token = args.token if args.token is not None else os.environ.get("BAILINGHUB_CLIENT_TOKEN", "")
        client = N8nClient(args.base_url, token, args.allow_insecure_http)
        if args.command in ("test", "run"):
            client.test_credentials()
            summary["credentials"] = "valid"
        job_id = args.job_id
        if args.command in ("submit", "run"):
            summary["submitted"] = client.submit(args.request_id or f"n8n-{uuid.uuid4()}", args.route, args.input)
            job_id = summary["submitted"]["job_id"]
        if args.command == "get":
            summary["job"] = client.get(job_id)
        if args.command in ("wait", "run"):
            summary["job"] = client.wait(job_id, args.max_wait, args.interval)
        summary["ok"] = True
        code = 0
    except HubError as err:
        summary.update(ok=False, error=str(err), status_code=err.status_code, retryable=err.retryable)
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
