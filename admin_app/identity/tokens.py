"""Bearer secrets: random, shown once, stored only as SHA-256 hex digests.

A prefix names the kind of token so that a leaked one is recognisable in logs and scanners, and so
that an access token can never be mistaken for a refresh or client token.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

ACCESS = "bzat_"
REFRESH = "bzrt_"
CLIENT = "bzct_"
ADMIN = "bzadm_"
CODE = "bzac_"

_TOKEN_SHAPE = re.compile(r"^[a-z]{4,5}_[A-Za-z0-9_-]{43}$")


def new_token(prefix: str) -> tuple[str, str]:
    """A fresh token and its hash; only the hash is ever stored."""
    token = prefix + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def well_formed(token: str, prefix: str) -> bool:
    return token.startswith(prefix) and bool(_TOKEN_SHAPE.match(token))


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def bearer_from_header(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when malformed."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token or " " in token.strip() or len(token) > 256:
        return None
    return token.strip()
