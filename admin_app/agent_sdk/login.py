"""The browser login: PKCE and a random state, a loopback callback on a random port, the
business system's consent page, the code exchange, and the session stored with mode 0600.

A stored session is revoked first; if that revocation is not confirmed (HTTP 200) the login stops,
so a person never ends up with two live sessions believing the old one is gone."""
from __future__ import annotations

import platform
import secrets
import threading
import time
import webbrowser
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import requests

from . import auth
from .errors import AgentAuthError, AgentSdkError, HubError
from .http import answer, send
from .models import SessionView, TokenSet
from .session_store import DEFAULT_STORE, SessionStore, session_record

DONE_PAGE = b"<!doctype html><title>Done</title><p>You can close this window and return to your agent.</p>"


class _Callback(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server interface
        parts = urlsplit(self.path)
        if parts.path != "/callback" or self.server.done.is_set():  # type: ignore[attr-defined]
            self.send_error(404)
            return
        self.server.result.update({k: v[0] for k, v in parse_qs(parts.query).items()})  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(DONE_PAGE)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(DONE_PAGE)
        self.server.done.set()  # type: ignore[attr-defined]

    def log_message(self, *args):  # keep the terminal quiet
        pass


def revoke_stored(store: SessionStore) -> None:
    """Revoke the session in `store` (refresh-token body and access bearer) and forget it."""
    if not store.exists():
        return
    with store.locked():
        stored = store.load()
        try:
            auth.revoke(store.http, stored["hub_url"], client_app_id=stored["client_app_id"],
                        refresh_token=stored["refresh_token"], access_token=stored.get("access_token"))
        except AgentSdkError as err:
            raise AgentAuthError(f"the stored session could not be revoked, so no new login was started: {err}") \
                from None
        store.delete()


def login(hub_url: str, client_app_id: str, routes: list[str], *, device_label: str | None = None,
          store: Path | SessionStore = DEFAULT_STORE, open_url: Callable[[str], object] | None = None,
          timeout: float = 600, http: requests.Session | None = None) -> dict:
    """Run the browser flow; return and store the session record. `open_url` defaults to the
    system browser; pass `print` to show the address instead."""
    store = store if isinstance(store, SessionStore) else SessionStore(store, http)
    http = http or store.http
    hub = hub_url.rstrip("/")
    revoke_stored(store)
    tokens, view, issued_at = authorize(http, hub, client_app_id, routes, device_label=device_label,
                                        open_url=open_url, timeout=timeout)
    record = session_record(hub, tokens, view, issued_at)
    store.save(record)
    return record


def authorize(http: requests.Session, hub: str, client_app_id: str, routes: list[str], *,
              device_label: str | None, open_url: Callable[[str], object] | None,
              timeout: float) -> tuple[TokenSet, SessionView, float]:
    """The browser flow alone: the tokens, the session's view, and when the tokens were issued.
    Nothing is stored; the caller keeps the session where it belongs."""
    verifier, challenge = auth.pkce_pair()
    state = secrets.token_urlsafe(24)
    server = HTTPServer(("127.0.0.1", 0), _Callback)
    server.result, server.done = {}, threading.Event()  # type: ignore[attr-defined]
    redirect_uri = f"http://127.0.0.1:{server.server_port}/callback"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        try:
            created = auth.create_authorization(http, hub, client_app_id=client_app_id, redirect_uri=redirect_uri,
                                                state=state, routes=routes,
                                                device_label=device_label or platform.node() or "Local agent",
                                                challenge=challenge)
        except HubError as err:
            raise AgentAuthError(f"the hub refused the request: {err}") from None
        (open_url or webbrowser.open)(created.authorization_url)
        if not server.done.wait(timeout):  # type: ignore[attr-defined]
            raise AgentAuthError("no answer from the browser in time")
        result = dict(server.result)  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
    if not secrets.compare_digest(result.get("state", ""), state):
        raise AgentAuthError("the callback's state does not match this login")
    if "error" in result:
        raise AgentAuthError(f"authorization {result['error']}")
    issued_at = time.time()
    tokens = auth.exchange_code(http, hub, client_app_id=client_app_id, code=result.get("code", ""),
                                redirect_uri=redirect_uri, verifier=verifier)
    endpoint = f"GET {auth.SESSION_PATH}"
    view = auth.parse_session(answer(send(http, "GET", hub + auth.SESSION_PATH, endpoint, bearer=tokens.access_token),
                                     endpoint), endpoint)
    if view.session_id != tokens.session_id:
        raise AgentAuthError("the session view belongs to another session")
    return tokens, view, issued_at
