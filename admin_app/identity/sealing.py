"""Secrets the hub must read again, kept sealed with its own secret key.

A Client Token is otherwise stored only as its SHA-256, but Core signs a job's completion
callback with the client's token (CLIENT_API_AND_EXECUTOR.md §D.1), so the callback sender needs
the token itself. It is kept encrypted (Fernet: AES-128-CBC with HMAC-SHA256, from the
`cryptography` package) under a key derived from the hub's secret key with HKDF-SHA256: the
database alone (a dump, a replica, a backup) does not give the token away. A sealed value that
no longer opens (the secret key was changed) reads as None: the token must be issued again."""
from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# Names this use of the secret key, so the derived key is of no use to any other.
_INFO = b"bailing-hub/client-token-seal/v1"


def _fernet(secret_key: str | bytes) -> Fernet:
    material = secret_key.encode("utf-8") if isinstance(secret_key, str) else secret_key
    if not material:
        raise ValueError("the hub's secret key is empty")
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(material)
    return Fernet(base64.urlsafe_b64encode(derived))


def seal(secret_key: str | bytes, plain: str) -> str:
    """`plain` encrypted and authenticated under the hub's secret key (URL-safe text)."""
    return _fernet(secret_key).encrypt(plain.encode("utf-8")).decode("ascii")


def unseal(secret_key: str | bytes, sealed: str) -> str | None:
    """What `seal` sealed, or None when it does not open under this key (or is not a seal)."""
    try:
        return _fernet(secret_key).decrypt(sealed.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError, ValueError):
        return None
