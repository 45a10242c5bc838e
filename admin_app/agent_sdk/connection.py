"""One agent's authenticated connection to its hub: the bearer from the stored session, and on a
401 exactly one retry after a forced refresh."""
from __future__ import annotations

from typing import Any

import requests

from .http import NO_BODY, answer, refusal, send
from .session_store import SessionStore


class Connection:
    def __init__(self, store: SessionStore | str, http: requests.Session | None = None):
        self.store = store if isinstance(store, SessionStore) else SessionStore(store, http)
        self.http = http or self.store.http
        stored = self.store.load()
        self.hub_url: str = stored["hub_url"].rstrip("/")
        self.client_app_id: str = stored["client_app_id"]
        self.session_id: str = stored["session_id"]

    def call(self, method: str, path: str, endpoint: str, *, body: Any = NO_BODY, params: dict | None = None,
             expect: tuple[int, ...] = (200,)) -> dict:
        return answer(self.raw(method, path, endpoint, body=body, params=params), endpoint, expect)

    def raw(self, method: str, path: str, endpoint: str, *, body: Any = NO_BODY,
            params: dict | None = None) -> requests.Response:
        token = self.store.access_token()
        response = send(self.http, method, self.hub_url + path, endpoint, body=body, bearer=token, params=params)
        if response.status_code == 401:
            token = self.store.access_token(force=True, stale=token)
            response = send(self.http, method, self.hub_url + path, endpoint, body=body, bearer=token,
                            params=params)
        return response

    def refused(self, response: requests.Response, endpoint: str):
        return refusal(response, endpoint)
