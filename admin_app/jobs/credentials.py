"""Who is calling a Core surface (CLIENT_API_AND_EXECUTOR.md §1): a Client Token or an executor
token, presented as `Authorization: Bearer <token>` or `?token=<token>` (the header wins).

A token shorter than 16 characters is never looked up (Core's rule); a disabled client app or
executor token is simply unknown. Only SHA-256 hashes are stored, so a lookup is by hash, then
compared in constant time."""
from __future__ import annotations

from dataclasses import dataclass

from flask import Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from ..identity import tokens
from ..identity.clients import authenticate_client_token
from ..identity.models import ClientApp
from .models import ExecutorToken

MIN_LENGTH = 16
MAX_LENGTH = 256


@dataclass(frozen=True)
class Caller:
    client: ClientApp | None = None
    executor: ExecutorToken | None = None


def presented(request: Request) -> str | None:
    """The token the request presents, or None: the Bearer header, else `?token=`."""
    header = request.headers.get("Authorization")
    if header:
        return tokens.bearer_from_header(header)
    values = request.args.getlist("token")
    if len(values) != 1:
        return None
    return values[0] or None


def resolve(db: Session, token: str | None) -> Caller:
    """The client app or executor token `token` belongs to; Caller() when neither."""
    if token is None or not MIN_LENGTH <= len(token) <= MAX_LENGTH:
        return Caller()
    client = authenticate_client_token(db, token)
    if client is not None:
        return Caller(client=client)
    digest = tokens.hash_token(token)
    executor = db.scalar(select(ExecutorToken).where(ExecutorToken.token_hash == digest))
    if executor is not None and executor.enabled and tokens.same_hash(executor.token_hash, digest):
        return Caller(executor=executor)
    return Caller()
