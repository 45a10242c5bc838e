"""A small Agent Auth client for local-agent developers: `bailing-admin agent login`.

It runs the whole browser flow for a person: creates a PKCE verifier and a random state, listens
on a random loopback port, opens the business system's consent page in a browser (or prints its
address), receives the one-time code on the loopback callback, exchanges it, and stores the
session in a file only the user can read. `AgentSessionFile.access_token()` refreshes when needed.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
import time
import webbrowser
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import requests

DEFAULT_STORE = Path.home() / ".config" / "bailing" / "agent-session.json"
REFRESH_MARGIN = 60  # seconds before expiry at which the access token is renewed


class AgentAuthError(Exception):
    pass


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)[:96]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


class _Callback(BaseHTTPRequestHandler):
    result: dict = {}

    def do_GET(self):  # noqa: N802 - the http.server interface
        parts = urlsplit(self.path)
        if parts.path != "/callback":
            self.send_error(404)
            return
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.server.result.update(query)  # type: ignore[attr-defined]
        body = b"<!doctype html><title>Done</title><p>You can close this window and return to your agent.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)
        self.server.done.set()  # type: ignore[attr-defined]

    def log_message(self, *args):  # keep the terminal quiet
        pass


def login(hub_url: str, client_app_id: str, routes: list[str], *, device_label: str | None = None,
          store: Path = DEFAULT_STORE, open_url: Callable[[str], object] | None = None,
          timeout: float = 600) -> dict:
    """Run the browser flow; return and store the session. `open_url` defaults to the system
    browser; pass `print` to show the address instead."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(24)
    server = HTTPServer(("127.0.0.1", 0), _Callback)
    server.result, server.done = {}, threading.Event()  # type: ignore[attr-defined]
    redirect_uri = f"http://127.0.0.1:{server.server_port}/callback"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub = hub_url.rstrip("/")
    try:
        body = {"client_app_id": client_app_id, "redirect_uri": redirect_uri, "state": state,
                "requested_routes": routes, "code_challenge": challenge, "code_challenge_method": "S256"}
        if device_label:
            body["device_label"] = device_label
        created = requests.post(f"{hub}/agent-auth/v1/authorizations", json=body, timeout=30)
        if created.status_code != 201:
            raise AgentAuthError(f"the hub refused the request: {created.text}")
        (open_url or webbrowser.open)(created.json()["authorization_url"])
        if not server.done.wait(timeout):  # type: ignore[attr-defined]
            raise AgentAuthError("no answer from the browser in time")
        result = server.result  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
    if not secrets.compare_digest(result.get("state", ""), state):
        raise AgentAuthError("the callback's state does not match this login")
    if "error" in result:
        raise AgentAuthError(f"authorization {result['error']}")
    exchanged = requests.post(f"{hub}/agent-auth/v1/token", timeout=30, json={
        "grant_type": "authorization_code", "client_app_id": client_app_id, "code": result.get("code", ""),
        "redirect_uri": redirect_uri, "code_verifier": verifier})
    if exchanged.status_code != 200:
        raise AgentAuthError(f"the code exchange failed: {exchanged.text}")
    session = {"hub_url": hub, "client_app_id": client_app_id, **exchanged.json()}
    AgentSessionFile(store).save(session)
    return session


@dataclass
class AgentSessionFile:
    path: Path = DEFAULT_STORE

    def save(self, session: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(session, handle, indent=2)
        os.chmod(self.path, 0o600)  # also when the file already existed with wider rights

    def load(self) -> dict:
        return json.loads(self.path.read_text())

    def access_token(self) -> str:
        """A valid access token, refreshed (and the file rewritten) when it is about to expire."""
        session = self.load()
        expires = datetime.fromisoformat(session["access_expires_at"].replace("Z", "+00:00"))
        if expires.timestamp() - time.time() > REFRESH_MARGIN:
            return session["access_token"]
        response = requests.post(f"{session['hub_url']}/agent-auth/v1/token", timeout=30, json={
            "grant_type": "refresh_token", "client_app_id": session["client_app_id"],
            "refresh_token": session["refresh_token"]})
        if response.status_code != 200:
            # Never fall back to anything else: the person has to sign in again.
            raise AgentAuthError(f"refresh refused ({response.status_code}); run `bailing-admin agent login` again")
        session.update(response.json())
        self.save(session)
        return session["access_token"]

