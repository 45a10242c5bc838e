"""Core's executor protocol (CLIENT_API_AND_EXECUTOR.md §B): `POST /executor/claim`,
`/executor/heartbeat` and `/executor/result`, as OpenClaw's runner and Core's generic executor
call them with an executor token (`Authorization: Bearer` or `?token=`).

The channel gate (§B.3), in Core's order: an unknown, disabled or missing token is 401
`unauthorized`; then anything but an executor token (a Client Token) is 403, and so is any
method but POST; then a path other than the three is 404 `not found`. Core also admits its
server (admin) token here; the hub has no such token, and its admins' personal tokens are not
executor credentials (401). Answers follow §1: Core's envelope, JSON as `application/json;
charset=utf-8`, `Cache-Control: no-store`, a body over 1 MiB 413 `payload too large`. Unlike Core,
a body that is not a JSON object is a 400, not a 500."""
from __future__ import annotations

import select
import socket
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from ..jobs import claims, credentials, results
from ..jobs.answers import not_found, refuse, unauthorized
from ..jobs.models import ExecutorToken
from ..jobs.queue_bell import QueueBell, bell_for
from ..jobs.reaper import Reaper
from .auth import database
from .core_surface import json_body, serve_as_core

bp = Blueprint("executor_api", __name__)
serve_as_core(bp)

ENDPOINTS = ("claim", "heartbeat", "result")
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
BELL = "bailing.job_bell"


def _executor() -> ExecutorToken:
    """The gate (§B.3): 401 unknown, 403 a Client Token or a method other than POST."""
    with database().session() as db:
        caller = credentials.resolve(db, credentials.presented(request))
    if caller.executor is None and caller.client is None:
        raise unauthorized()
    if caller.executor is None:
        raise refuse(403, "Only executor tokens may use /executor/*.")
    if request.method != "POST":
        raise refuse(403, "The executor endpoints take POST only.")
    return caller.executor


def _body() -> dict[str, Any]:
    """The body as a JSON object (core_surface.json_body: empty is `{}`)."""
    value = json_body()
    if not isinstance(value, dict):
        raise refuse(400, "The request body must be a JSON object.")
    return value


def _peer_gone() -> bool:
    """Whether the executor closed its connection (it timed out, or was stopped): a readable
    socket with nothing to read. Unknown (False) behind a server that does not expose its socket
    or on TLS, where peeking is not possible; a proxy in front only reports its own connection."""
    sock = request.environ.get("werkzeug.socket") or request.environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return False
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & (select.POLLHUP | select.POLLERR):
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ValueError:  # a TLS socket refuses flags
        return False
    except OSError:
        return True


def _bell() -> QueueBell:
    bell: QueueBell = current_app.extensions[BELL]
    return bell


@bp.route("/executor", methods=METHODS, provide_automatic_options=False)
@bp.route("/executor/<path:endpoint>", methods=METHODS, provide_automatic_options=False)
def executor(endpoint: str = "") -> Response:
    token = _executor()
    if endpoint not in ENDPOINTS:
        raise not_found()
    body = _body()
    hub = current_app.extensions["bailing"]
    if endpoint == "claim":
        answer = claims.claim(hub.db, hub.settings, _bell(), token, body, _peer_gone)
        answer.pop("gone", None)  # nobody is there to read it
        return jsonify(answer)
    if endpoint == "heartbeat":
        return jsonify(claims.heartbeat(hub.db, hub.settings, token, body))
    with hub.db.session() as db:
        return jsonify(results.report(db, token, body))


def init_app(app: Flask) -> None:
    """The executor endpoints, the executors' admin API, the bell waiting claims listen to, and
    (when `job_reaper` is on) the reaper thread, started by the process's first request."""
    from . import admin_executors

    app.register_blueprint(bp)
    app.register_blueprint(admin_executors.bp)
    hub = app.extensions["bailing"]
    app.extensions[BELL] = bell_for(hub.db)
    if hub.settings.job_reaper:
        reaper = Reaper(hub.db, hub.settings)
        app.extensions["bailing.job_reaper"] = reaper
        app.before_request(reaper.ensure_started)
