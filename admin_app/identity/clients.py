"""Client apps' own secret: the Client Token their business backend presents to the hub."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..errors import ApiError
from . import tokens
from .models import ClientApp


def rotate_client_token(db: Session, app_id: str) -> dict:
    """Issue a new Client Token; the previous one stops working at once."""
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == app_id).with_for_update())
    if client is None:
        raise ApiError("client_not_found", f"No client app {app_id}.")
    token, digest = tokens.new_token(tokens.CLIENT)
    rotated = client.client_token_hash is not None
    client.client_token_hash = digest
    client.client_token_issued_at = utc_now()
    return {"app_id": app_id, "client_token": token, "rotated": rotated,
            "issued_at": iso(client.client_token_issued_at)}


def authenticate_client_token(db: Session, bearer: str | None) -> ClientApp | None:
    if bearer is None or not tokens.well_formed(bearer, tokens.CLIENT):
        return None
    digest = tokens.hash_token(bearer)
    client = db.scalar(select(ClientApp).where(ClientApp.client_token_hash == digest))
    if client is None or not client.enabled or not tokens.same_hash(client.client_token_hash or "", digest):
        return None
    return client
