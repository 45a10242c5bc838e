"""Bearer secrets: random, shown once, stored only as SHA-256 hex digests.

A prefix names the kind of token so that a leaked one is recognisable in logs and scanners, and so
that an access token can never be mistaken for a refresh or client token. Agent Session tokens
and authorization codes use the prefixes of the Agent Auth wire contract (`bha_`, `bhr_`, `bhc_`).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

ACCESS = "bha_"
REFRESH = "bhr_"
CODE = "bhc_"
CLIENT = "bzct_"
ADMIN = "bzadm_"
# Refresh tokens issued before the wire-contract prefixes: still honoured by a refresh (which
# hands out tokens of the current format) and by revocation, so stored sessions keep working.
LEGACY_REFRESH = "bzrt_"

_TOKEN_SHAPE = re.compile(r"^[a-z]{2,5}_[A-Za-z0-9_-]{43}$")  # prefix + 32 random bytes, base64url


def new_token(prefix: str) -> tuple[str, str]:
    """A fresh token and its hash; only the hash is ever stored."""
    token = prefix + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def well_formed(token: str, prefix: str) -> bool:
    """Checked before any lookup: a token of another kind or shape is never looked up."""
    return isinstance(token, str) and token.startswith(prefix) and bool(_TOKEN_SHAPE.fullmatch(token))


def refresh_well_formed(token: str) -> bool:
    return well_formed(token, REFRESH) or well_formed(token, LEGACY_REFRESH)


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
