"""An application using Core's Python connect SDK `HubClient` (CLIENT_API_AND_EXECUTOR.md §A.9,
SDK column), as a process of its own: the one connector that sends `metadata` and `callback_url`.

    BAILINGHUB_CLIENT_TOKEN=<client token> python -m tests.peers.sdk_client run --base-url URL \\
        --route desk --input "..." --metadata '{"principal": {"id": "user-42"}}' --callback-url URL

Commands: `submit` (POST /run), `get` (GET /jobs/<id>), `wait` (poll GET /jobs/<id> every
`--interval` seconds until a terminal status or `--max-wait`, as an application around the SDK
would; the SDK itself has no wait), `run` (submit, then wait).

The SDK's rules: /run gets `request_id`, `route`, `input`, `metadata` (default `{}`) and
`callback_url` when given (this peer never sends `wait_ms`, which Core refuses from a client
token); the body is compact JSON through urllib with an 8 s timeout; any 2xx is success and its
JSON is returned unchecked; an HTTP error raises with the body's `error` (or `message`, or
"HTTP <code>"). The last stdout line is a JSON summary with the HTTP status of every call; exit 0
on success, 1 when a call failed, 2 for bad arguments."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from tests.peers._wire import emit

TIMEOUT = 8.0
TERMINAL = ("done", "error", "rejected")


class SdkError(RuntimeError):
    def __init__(self, message: str, status: int | None, body: Any):
        super().__init__(message)
        self.status = status
        self.body = body


class HubClient:
    def __init__(self, base_url: str, token: str, timeout: float = TIMEOUT):
        if not base_url:
            raise ValueError("base_url is required")
        if not token:
            raise ValueError("token is required")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.calls: list[dict[str, Any]] = []

    def run(self, request_id: str, route: str, input_text: str, metadata: dict[str, Any] | None = None,
            callback_url: str | None = None) -> Any:
        payload: dict[str, Any] = {"request_id": request_id, "route": route, "input": input_text,
                                   "metadata": metadata or {}}
        if callback_url:
            payload["callback_url"] = callback_url
        return self.request("POST", "/run", payload)

    def get_job(self, job_id: str) -> Any:
        return self.request("GET", "/jobs/" + urllib.parse.quote(str(job_id), safe=""))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Authorization": "Bearer " + self.token}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers,  # noqa: S310 - http(s) only
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - see above
                raw = resp.read().decode("utf-8")
                self.calls.append({"method": method, "path": path, "status": resp.status})
                return json.loads(raw or "{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read().decode("utf-8", "replace")
            self.calls.append({"method": method, "path": path, "status": exc.code})
            try:
                payload = json.loads(raw or "{}")
            except ValueError:
                payload = {"error": raw or str(exc)}
            if not isinstance(payload, dict):
                payload = {"error": raw}
            raise SdkError(str(payload.get("error") or payload.get("message") or f"HTTP {exc.code}"),
                           exc.code, payload) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.sdk_client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("submit", "get", "wait", "run"))
    parser.add_argument("--base-url", default=os.environ.get("BAILINGHUB_BASE_URL", ""))
    parser.add_argument("--token", default=None, help="default: BAILINGHUB_CLIENT_TOKEN")
    parser.add_argument("--route", default="")
    parser.add_argument("--input", default="")
    parser.add_argument("--request-id", default=None, help="default: a new sdk-<uuid>")
    parser.add_argument("--metadata", default=None, help="a JSON object")
    parser.add_argument("--callback-url", default=None)
    parser.add_argument("--job-id", default="")
    parser.add_argument("--max-wait", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"peer": "sdk", "command": args.command}
    client: HubClient | None = None
    try:
        metadata = json.loads(args.metadata) if args.metadata else None
        client = HubClient(args.base_url, args.token if args.token is not None
                           else os.environ.get("BAILINGHUB_CLIENT_TOKEN", ""))
        job_id = args.job_id
        if args.command in ("submit", "run"):
            summary["submitted"] = client.run(args.request_id or f"sdk-{uuid.uuid4()}", args.route, args.input,
                                              metadata, args.callback_url)
            job_id = summary["submitted"].get("job_id", "") if isinstance(summary["submitted"], dict) else ""
        if args.command == "get":
            summary["job"] = client.get_job(job_id)
        if args.command in ("wait", "run"):
            deadline = time.monotonic() + args.max_wait
            statuses = []
            job = client.get_job(job_id)
            statuses.append(job.get("status"))
            while job.get("status") not in TERMINAL and time.monotonic() < deadline:
                time.sleep(args.interval)
                job = client.get_job(job_id)
                if job.get("status") != statuses[-1]:
                    statuses.append(job.get("status"))
            summary.update(job=job, statuses_seen=statuses)
        summary["ok"] = True
        code = 0
    except SdkError as err:
        summary.update(ok=False, error=str(err), status_code=err.status, body=err.body)
        code = 1
    except (urllib.error.URLError, TimeoutError) as err:
        summary.update(ok=False, error=str(err), status_code=None)
        code = 1
    except ValueError as err:
        summary.update(ok=False, error=str(err), status_code=None)
        code = 2
    if client is not None:
        summary["calls"] = client.calls
    emit(summary)
    return code


if __name__ == "__main__":
    sys.exit(main())
