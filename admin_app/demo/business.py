"""The demo business system: a small real web app serving the operations of the example CRM and
ERP OpenAPI documents (under /crm and /erp).

Like a real business system it verifies the hub's signature and timestamp on every call, runs
its own authorization (a subject is required for writes), and deduplicates writes by the hub's
idempotency key. For tests and demos it can be told, through a control endpoint guarded by its
own token, to drop a connection after executing a call, so the hub's reconciliation shows.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from pathlib import Path

from flask import Flask, Response, jsonify, request
from werkzeug.routing import Map, Rule
from werkzeug.exceptions import MethodNotAllowed, NotFound

from ..resources import EXAMPLES_DIR
from ..invocations import signing
from .store import DemoStore

DOCUMENTS = {"crm": EXAMPLES_DIR / "crm.openapi.json",
             "erp": EXAMPLES_DIR / "erp.openapi.json"}
SECRET_ENV = {"crm": "DEMO_CRM_SECRET", "erp": "DEMO_ERP_SECRET"}


def _routes(document: Path) -> Map:
    doc = json.loads(document.read_text("utf-8"))
    rules = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "operationId" in op:
                rule = path.replace("{", "<").replace("}", ">")
                rules.append(Rule(rule, methods=[method.upper()], endpoint=op["operationId"]))
    return Map(rules, strict_slashes=False)


class Faults:
    """One-shot faults: {operation or '*': [mode, ...]}."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending: dict[str, list[dict]] = {}

    def add(self, operation: str, fault: dict, count: int) -> None:
        with self.lock:
            self.pending.setdefault(operation, []).extend([fault] * count)

    def take(self, operation: str) -> dict | None:
        with self.lock:
            for key in (operation, "*"):
                if self.pending.get(key):
                    return self.pending[key].pop(0)
        return None


def create_business_app(secrets_by_system: dict[str, str], control_token: str | None = None,
                        hub_url: str | None = None, client_tokens: dict[str, str] | None = None) -> Flask:
    """`secrets_by_system` maps "crm"/"erp" to the signing secret the hub uses for that provider.
    With `hub_url` and the systems' Client Tokens it also serves the Agent Auth consent pages."""
    app = Flask(__name__)
    app.secret_key = secrets.token_urlsafe(32)
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_NAME="demo_business_session")
    if hub_url is not None:
        from .consent import create_consent_blueprint

        app.register_blueprint(create_consent_blueprint(hub_url, {} if client_tokens is None else client_tokens))
    maps = {system: _routes(path) for system, path in DOCUMENTS.items()}
    store = DemoStore()
    faults = Faults()
    executions: list[dict] = []
    replies: dict[str, tuple[int, bytes]] = {}  # idempotency key -> the first reply
    control = control_token or secrets.token_urlsafe(24)
    app.config.update(DEMO_CONTROL_TOKEN=control, DEMO_STORE=store)

    def refuse(status: int, code: str, message: str):
        response = jsonify({"error": code, "message": message})
        response.status_code = status
        return response

    @app.route("/<system>/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def operation(system: str, rest: str):
        if system not in maps or system not in secrets_by_system:
            return refuse(404, "not_found", "No such system.")
        body = request.get_data(cache=True)
        # The target exactly as sent (still percent-encoded), without this system's own prefix
        # (its base URL's path): the operation's path as the spec declares it is what is signed.
        target = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or (
            request.path + (f"?{request.query_string.decode()}" if request.query_string else ""))
        path_with_query = target.removeprefix(f"/{system}")
        if not signing.verify(secrets_by_system[system], dict(request.headers), method=request.method,
                              path_with_query=path_with_query, body=body, now=time.time()):
            return refuse(401, "invalid_signature", "Missing, forged or stale hub signature.")
        try:
            name, params = maps[system].bind("demo").match("/" + rest, method=request.method)
        except (NotFound, MethodNotAllowed):
            return refuse(404, "not_found", "No such operation.")
        params = {**request.args.to_dict(), **params}
        writes = request.method not in ("GET", "HEAD")
        subject = request.headers.get("X-Bailing-On-Behalf-Of", "")
        if writes and not subject:
            return refuse(403, "subject_required", "Writes need the end user the agent acts for.")
        key = request.headers.get("X-Bailing-Idempotency-Key", "")
        if writes and key in replies:
            status, payload = replies[key]
            return Response(payload, status=status, mimetype="application/json")
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            return refuse(400, "invalid_json", "The body is not JSON.")
        status, result = store.handle(name, params, data)
        payload = json.dumps(result).encode() if result is not None else b""
        executions.append({"system": system, "operation": name, "job_id": request.headers.get("X-Bailing-Job-Id"),
                           "idempotency_key": key, "on_behalf_of": subject, "status": status})
        if writes and key:
            replies[key] = (status, payload)
        fault = faults.take(name)
        if fault and fault["mode"] == "drop_response":
            return _broken_response(status, payload)
        if fault and fault["mode"] == "delay":
            time.sleep(fault.get("delay_ms", 1000) / 1000)
        return Response(payload, status=status, mimetype="application/json")

    def _guard():
        if not secrets.compare_digest(request.headers.get("X-Demo-Control", ""), control):
            return refuse(401, "unauthorized", "The demo control token is required.")
        return None

    @app.post("/_demo/faults")
    def add_fault():
        if (denied := _guard()) is not None:
            return denied
        spec = request.get_json(force=True)
        if spec.get("mode") not in ("drop_response", "delay"):
            return refuse(400, "invalid_request", "mode must be drop_response or delay")
        faults.add(spec.get("operation", "*"), {"mode": spec["mode"], "delay_ms": spec.get("delay_ms", 1000)},
                   int(spec.get("count", 1)))
        return jsonify({"ok": True})

    @app.get("/_demo/executions")
    def list_executions():
        if (denied := _guard()) is not None:
            return denied
        return jsonify({"executions": executions})

    return app


def _broken_response(status: int, payload: bytes) -> Response:
    """Headers promise the whole body; the connection drops halfway through it."""
    def body():
        yield payload[: len(payload) // 2]
        raise ConnectionAbortedError("demo fault: connection dropped mid-response")

    response = Response(body(), status=status, mimetype="application/json")
    response.headers["Content-Length"] = str(len(payload) + 64)
    return response
