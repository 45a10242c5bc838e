"""Client apps' own secret: the Client Token their business backend presents to the hub."""
from __future__ import annotations

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..errors import ApiError
from ..config_audit.log import stage
from . import sealing, tokens
from .models import ClientApp


def _locked(db: Session, app_id: str) -> ClientApp:
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == app_id).with_for_update())
    if client is None:
        raise ApiError("client_not_found", f"No client app {app_id}.")
    return client


def _issued_at(client: ClientApp) -> dict | None:
    """What the configuration-change log keeps of a Client Token: when it was issued (None: no
    token), never the token, its hash or its sealed copy."""
    if client.client_token_hash is None:
        return None
    return {"app_id": client.app_id, "token_issued_at": iso(client.client_token_issued_at)}


def rotate_client_token(db: Session, app_id: str, secret_key: str | bytes | None = None) -> dict:
    """Issue a new Client Token; the previous one stops working at once. Besides its hash, the
    token is kept sealed under the hub's secret key (`secret_key`: Hub.secret_key; None: the
    current app's, in a request or app context), since the client's completion callbacks are
    signed with it (identity/sealing.py)."""
    key = current_app.secret_key if secret_key is None else secret_key
    if not key:
        raise RuntimeError("the hub's secret key is needed to seal a Client Token")
    client = _locked(db, app_id)
    token, digest = tokens.new_token(tokens.CLIENT)
    rotated = client.client_token_hash is not None
    was = _issued_at(client)
    client.client_token_hash = digest
    client.client_token_sealed = sealing.seal(key, token)
    client.client_token_issued_at = utc_now()
    stage(db, "client_token", app_id, was, _issued_at(client))
    return {"app_id": app_id, "client_token": token, "rotated": rotated,
            "issued_at": iso(client.client_token_issued_at)}


def revoke_client_token(db: Session, app_id: str) -> dict:
    """Withdraw the Client Token, hash and sealed copy: the app's backend is refused (401) until a
    new one is issued, and its jobs' callbacks wait for that token too."""
    client = _locked(db, app_id)
    revoked = client.client_token_hash is not None
    was = _issued_at(client)
    client.client_token_hash = None
    client.client_token_sealed = None
    client.client_token_issued_at = None
    if revoked:
        stage(db, "client_token", app_id, was, None)
    return {"app_id": app_id, "revoked": revoked}


def callback_secret(db: Session, app_id: str, secret_key: str | bytes) -> str | None:
    """The client's current token, to sign its completion callbacks with (§D.1); None when none
    is sealed (revoked, or issued before sealing existed) or the seal no longer opens (the hub's
    secret key changed) or holds another token than the one in force."""
    row = db.execute(select(ClientApp.client_token_hash, ClientApp.client_token_sealed)
                     .where(ClientApp.app_id == app_id)).first()
    if row is None or row.client_token_sealed is None or row.client_token_hash is None:
        return None
    token = sealing.unseal(secret_key, row.client_token_sealed)
    if token is None or not tokens.same_hash(row.client_token_hash, tokens.hash_token(token)):
        return None
    return token


def authenticate_client_token(db: Session, bearer: str | None) -> ClientApp | None:
    if bearer is None or not tokens.well_formed(bearer, tokens.CLIENT):
        return None
    digest = tokens.hash_token(bearer)
    client = db.scalar(select(ClientApp).where(ClientApp.client_token_hash == digest))
    if client is None or not client.enabled or not tokens.same_hash(client.client_token_hash or "", digest):
        return None
    return client
