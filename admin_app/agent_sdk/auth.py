"""Agent Auth v1 as the official SDK speaks it: authorization (201), code exchange and refresh
(token responses checked field by field), the session view, and revoke."""
from __future__ import annotations

import base64
import hashlib
import secrets

import requests

from . import contract as c
from .check import Reader
from .errors import AgentAuthError, HubError
from .http import answer, send
from .models import Authorization, SessionView, TokenSet

AUTH = "/agent-auth/v1"
SESSION_PATH = f"{AUTH}/session"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)[:96]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def create_authorization(http: requests.Session, hub: str, *, client_app_id: str, redirect_uri: str,
                         state: str, routes: list[str], device_label: str, challenge: str) -> Authorization:
    endpoint = f"POST {AUTH}/authorizations"
    body = {"client_app_id": client_app_id, "redirect_uri": redirect_uri, "state": state,
            "requested_routes": list(routes), "device_label": device_label,
            "code_challenge": challenge, "code_challenge_method": "S256"}
    data = answer(send(http, "POST", hub + f"{AUTH}/authorizations", endpoint, body=body), endpoint, (201,))
    r = Reader(endpoint)
    url = r.string(data, "authorization_url", non_blank=True)
    if not url.startswith(("https://", "http://")):
        r.fail("authorization_url", "must be an http(s) address")
    return Authorization(r.string(data, "authorization_id", pattern=c.UUID), url,
                         r.integer(data, "expires_in", lo=1))


def parse_token(data: dict, endpoint: str, client_app_id: str) -> TokenSet:
    r = Reader(endpoint)
    r.string(data, "token_type", equals="Bearer")
    display = r.object(data, "subject_display", optional=True, nullable=True)
    return TokenSet(
        access_token=r.string(data, "access_token", non_blank=True, max_len=c.TOKEN_MAX_CHARS),
        refresh_token=r.string(data, "refresh_token", non_blank=True, max_len=c.TOKEN_MAX_CHARS),
        expires_in=r.integer(data, "expires_in", lo=c.ACCESS_TTL_RANGE[0], hi=c.ACCESS_TTL_RANGE[1]),
        refresh_expires_in=r.integer(data, "refresh_expires_in", lo=c.REFRESH_TTL_RANGE[0],
                                     hi=c.REFRESH_TTL_RANGE[1]),
        session_id=r.string(data, "session_id", pattern=c.UUID),
        client_app_id=r.string(data, "client_app_id", equals=client_app_id),
        subject_display=display,
        subject_display_status=r.string(data, "subject_display_status", optional=True,
                                        choices=("provided", "missing")),
    )


def exchange_code(http: requests.Session, hub: str, *, client_app_id: str, code: str, redirect_uri: str,
                  verifier: str) -> TokenSet:
    endpoint = f"POST {AUTH}/token"
    body = {"grant_type": "authorization_code", "client_app_id": client_app_id, "code": code,
            "redirect_uri": redirect_uri, "code_verifier": verifier}
    try:
        data = answer(send(http, "POST", hub + f"{AUTH}/token", endpoint, body=body), endpoint)
    except HubError as err:
        raise AgentAuthError(f"the code exchange failed: {err}") from None
    return parse_token(data, endpoint, client_app_id)


def refresh(http: requests.Session, hub: str, *, client_app_id: str, refresh_token: str) -> TokenSet:
    endpoint = f"POST {AUTH}/token"
    body = {"grant_type": "refresh_token", "client_app_id": client_app_id, "refresh_token": refresh_token}
    try:
        data = answer(send(http, "POST", hub + f"{AUTH}/token", endpoint, body=body), endpoint)
    except HubError as err:
        # Never fall back to anything else: the person has to sign in again.
        raise AgentAuthError(f"refresh refused ({err.status} {err.code}); run `bailing-admin agent login` again") \
            from None
    return parse_token(data, endpoint, client_app_id)


def parse_session(data: dict, endpoint: str) -> SessionView:
    r = Reader(endpoint)
    routes = r.array(data, "allowed_routes", min_items=1)
    for i, route in enumerate(routes):
        r.string_at(route, f"allowed_routes[{i}]", non_blank=True)
    view = SessionView(
        session_id=r.string(data, "session_id", pattern=c.UUID),
        client_app_id=r.string(data, "client_app_id", non_blank=True),
        device_label=r.string(data, "device_label", non_blank=True, max_len=c.DEVICE_LABEL_MAX),
        principal=r.object(data, "principal"),
        on_behalf_of=r.string(data, "on_behalf_of", non_blank=True, max_len=c.ON_BEHALF_OF_MAX),
        allowed_routes=tuple(routes),
        created_at=r.timestamp(data, "created_at"),
        expires_at=r.timestamp(data, "expires_at"),
        refresh_expires_at=r.timestamp(data, "refresh_expires_at"),
        subject_display=r.object(data, "subject_display", optional=True, nullable=True),
        subject_display_status=r.string(data, "subject_display_status", optional=True,
                                        choices=("provided", "missing")),
    )
    if view.refresh_expires_at <= view.expires_at:
        r.fail("refresh_expires_at", "must be later than expires_at")
    return view


def revoke(http: requests.Session, hub: str, *, client_app_id: str, refresh_token: str,
           access_token: str | None) -> None:
    """The refresh-token body and, when there is one, the access bearer; only a 200 counts."""
    endpoint = f"POST {AUTH}/revoke"
    response = send(http, "POST", hub + f"{AUTH}/revoke", endpoint, bearer=access_token,
                    body={"client_app_id": client_app_id, "refresh_token": refresh_token})
    if response.status_code != 200:
        raise AgentAuthError(f"{endpoint}: the hub did not confirm the revocation (HTTP {response.status_code})")
