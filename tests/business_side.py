"""A business system on loopback, written from BUSINESS_SIDE.md §A.8, §B and §C (not from the
hub's code), for the spec pull and authorization probe tests.

Routes are set per test in `System.routes`: path -> a function (Request) -> (status, headers,
body bytes). Every request is recorded whole (method, path with query, headers, body). `verify`
checks a request's signature as the connect SDKs do (A.3 string, ±300 s, constant-time)."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers import LoopbackServer

SECRET = "bailing-test-secret"
SECRET_ENV = "SPEC_PULL_TEST_SECRET"


@dataclass
class Request:
    method: str
    target: str  # path + query as sent (REQUEST_URI)
    headers: dict[str, str]  # names lower-cased
    body: bytes


Answer = tuple[int, dict[str, str], bytes]


def verify(request: Request, secret: str = SECRET, *, signed_path: str | None = None) -> bool:
    """The connect SDKs' check: `ts.METHOD.path.sha256(body).subject.job`, HMAC-SHA256 with the
    secret, `sha256=` + lowercase hex, |now - ts| < 300 s."""
    ts = request.headers.get("x-bailing-timestamp", "")
    sent = request.headers.get("x-bailing-signature", "")
    if not ts.isdigit() or abs(time.time() - int(ts)) >= 300 or not sent:
        return False
    message = ".".join([ts, request.method.upper(), signed_path or request.target,
                        hashlib.sha256(request.body).hexdigest(),
                        request.headers.get("x-bailing-on-behalf-of", ""),
                        request.headers.get("x-bailing-job-id", "")])
    mac = hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest("sha256=" + mac, sent)


def json_answer(value: Any, status: int = 200, **headers: str) -> Answer:
    return status, {"Content-Type": "application/json; charset=utf-8", **headers}, json.dumps(value).encode()


def refused(status: int = 401) -> Answer:
    return json_answer({"error": "bad signature"}, status)


def signed_spec(get_spec: Callable[[], bytes], content_type: str = "application/json") -> Callable[[Request], Answer]:
    """A spec served only on a valid signature (CS-PHP `SpecServer::respond`): 401 otherwise."""
    def route(request: Request) -> Answer:
        if not verify(request):
            return refused(401)
        return 200, {"Content-Type": content_type, "Cache-Control": "private, no-store"}, get_spec()
    return route


class System:
    def __init__(self) -> None:
        self.routes: dict[str, Callable[[Request], Answer]] = {}
        self.seen: list[Request] = []
        self._lock = threading.Lock()
        system = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with system._lock:
                    system.seen.append(request)
                route = system.routes.get(self.path.split("?")[0])
                if route is None:
                    status, headers, payload = 404, {"Content-Type": "text/plain"}, b"not found"
                else:
                    status, headers, payload = route(request)
                self.send_response(status)
                unsized = headers.get("Content-Length") == "none"  # a body ended by closing
                for name, value in headers.items():
                    if not (unsized and name == "Content-Length"):
                        self.send_header(name, value)
                if unsized:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                elif "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve  # http.server's method names

            def log_message(self, *args: object) -> None:
                pass

        self.handler = Handler
        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def requests_to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.seen if r.target.split("?")[0] == path]

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()
        self.routes.clear()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def tool_spec(*, title: str = "Shop", tools: dict[str, dict[str, Any]] | None = None,
              root: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAPI 3.1 document; `tools`: operationId -> {method, path, scope, subject, params}."""
    tools = tools if tools is not None else {"orders_list": {}}
    paths: dict[str, Any] = {}
    for name, spec in tools.items():
        method = spec.get("method", "get")
        acc: dict[str, Any] = {"version": 1, "enabled": True, "scope": spec.get("scope", "orders.read"),
                               "risk": {"level": "low"},
                               "execution": {"readonly": method == "get", "idempotent": method == "get"}}
        if spec.get("subject"):
            acc["subject"] = {"required": True}
        op: dict[str, Any] = {"operationId": name, "summary": spec.get("summary", f"The {name} tool"),
                              "parameters": spec.get("params", []),
                              "responses": {"200": {"description": "ok"}}, "x-agent-capability": acc}
        if method != "get":
            op["requestBody"] = {"content": {"application/json": {"schema": {
                "type": "object", "properties": {"note": {"type": "string"}}}}}}
        op.update(spec.get("extra", {}))
        paths.setdefault(spec.get("path", "/" + name.replace("_", "/")), {})[method] = op
    return {"openapi": "3.1.0", "info": {"title": title, "version": "1.0.0"}, "paths": paths, **(root or {})}
