"""Signed tree heads: the log's size and root hash, signed with Ed25519, like a Certificate
Transparency signed tree head or a transparency-log signed note.

What is signed is exactly these four lines, UTF-8, each ending in a newline:

    bailing-evidence-head/v1
    <tree_size, decimal>
    <root_hash, standard base64 with padding>
    <signed_at, RFC 3339 UTC with milliseconds and a Z>

The key: BAILING_EVIDENCE_SIGNING_KEY (standard base64 of the 32-byte Ed25519 private seed) when
set, else `<data_dir>/evidence_signing_key` (the same base64, mode 0600), made on first use the
way the app's secret key is. Its public half is recorded in bz_evidence_keys before it signs;
`rotate_key` replaces the file's key and retires the old public key, which is kept so the heads
it signed still verify."""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..errors import ApiError
from . import log, merkle

ENV = "BAILING_EVIDENCE_SIGNING_KEY"
KEY_FILE = "evidence_signing_key"
FORMAT = "bailing-evidence-head/v1"


class HeadError(ValueError):
    """A head that does not verify: the message says why."""


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def unb64(value: object, what: str, length: int | None = None) -> bytes:
    if not isinstance(value, str):
        raise HeadError(f"{what} is not a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise HeadError(f"{what} is not valid base64") from None
    if length is not None and len(raw) != length:
        raise HeadError(f"{what} is not {length} bytes")
    return raw


def message(tree_size: int, root_hash: bytes, signed_at: str) -> bytes:
    return f"{FORMAT}\n{tree_size}\n{b64(root_hash)}\n{signed_at}\n".encode()


def key_id_of(public_key: bytes) -> str:
    """A short name of a public key: its SHA-256's first 8 bytes, hex."""
    return "ed25519:" + hashlib.sha256(public_key).hexdigest()[:16]


def public_bytes(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _seed_of(raw: str, where: str) -> Ed25519PrivateKey:
    try:
        seed = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        seed = b""
    if len(seed) != 32:
        raise ApiError("invalid_request", f"{where} must be the base64 of a 32-byte Ed25519 private seed")
    return Ed25519PrivateKey.from_private_bytes(seed)


def _seed_text(private: Ed25519PrivateKey) -> str:
    return b64(private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption()))


def _write_private(path: Path, content: str, replace: bool) -> bool:
    """Write whole under a private name (mkstemp: mode 0600), then link (first writer wins) or
    replace into place. False when another process linked its key first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        if replace:
            os.replace(scratch, path)
            return True
        try:
            os.link(scratch, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def signing_key(data_dir: Path) -> Ed25519PrivateKey:
    """The key that signs now (read at each head, so a rotation reaches every process)."""
    raw = os.environ.get(ENV)
    if raw:
        return _seed_of(raw, ENV)
    path = Path(data_dir) / KEY_FILE
    if not path.exists():
        _write_private(path, _seed_text(Ed25519PrivateKey.generate()), replace=False)
    return _seed_of(path.read_text(), str(path))


def _register(db: Session, public_key: bytes) -> str:
    """Make `public_key` the current key in bz_evidence_keys, retiring any other (under the head
    lock, taken by the caller)."""
    key_id = key_id_of(public_key)
    current = db.scalar(text("SELECT key_id FROM bz_evidence_keys WHERE retired_at IS NULL"))
    if current == key_id:
        return key_id
    db.execute(text("UPDATE bz_evidence_keys SET retired_at = now() WHERE retired_at IS NULL"))
    db.execute(text("INSERT INTO bz_evidence_keys (key_id, public_key) VALUES (:k, :p) "
                    "ON CONFLICT (key_id) DO UPDATE SET retired_at = NULL"), {"k": key_id, "p": public_key})
    return key_id


def _row_to_head(row: Any) -> dict[str, Any]:
    return {"format": FORMAT, "tree_size": row.tree_size, "root_hash": b64(bytes(row.root_hash)),
            "signed_at": iso(row.signed_at), "key_id": row.key_id, "signature": b64(bytes(row.signature))}


_HEAD = "SELECT tree_size, root_hash, signed_at, key_id, signature FROM bz_evidence_heads "


def make_head(db: Session, data_dir: Path) -> dict[str, Any]:
    """Sign the tree as committed now; the head already made at this size when there is one."""
    db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": log.HEAD_LOCK})
    tree_size = log.size(db)
    existing = db.execute(text(_HEAD + "WHERE tree_size = :n"), {"n": tree_size}).first()
    if existing is not None:
        return _row_to_head(existing)
    _check_extends_latest(db, tree_size)
    private = signing_key(data_dir)
    key_id = _register(db, public_bytes(private))
    root = log.root_at(db, tree_size)
    signed_at = iso(utc_now())
    assert signed_at is not None
    signature = private.sign(message(tree_size, root, signed_at))
    db.execute(text("INSERT INTO bz_evidence_heads (tree_size, root_hash, signed_at, key_id, signature) "
                    "VALUES (:n, :r, :t, :k, :s)"),
               {"n": tree_size, "r": root, "t": datetime.fromisoformat(signed_at), "k": key_id, "s": signature})
    return {"format": FORMAT, "tree_size": tree_size, "root_hash": b64(root), "signed_at": signed_at,
            "key_id": key_id, "signature": b64(signature)}


def _check_extends_latest(db: Session, tree_size: int) -> None:
    """Never sign a tree that does not extend the latest signed one: the log must be at least as
    large, and the stored subtrees must still give the root that head signed (O(log n) reads).
    Otherwise the hub would put its signature on history changed behind its back."""
    latest = latest_head(db)
    if latest is None:
        return
    size, signed_root = latest["tree_size"], unb64(latest["root_hash"], "root_hash", merkle.HASH_SIZE)
    try:
        intact = size <= tree_size and log.root_at(db, size) == signed_root
    except LookupError:
        intact = False
    if not intact:
        raise ApiError("evidence_inconsistent", f"The evidence log no longer extends its signed head of size {size}: "
                       "no new head is signed. Run `bailing-admin evidence check` to find the first bad leaf.")


def make_head_if_grown(db: Session, data_dir: Path) -> dict[str, Any] | None:
    """The background cadence: a head only when leaves arrived since the latest one."""
    latest = latest_head(db)
    if latest is not None and latest["tree_size"] >= log.size(db):
        return None
    return make_head(db, data_dir)


def latest_head(db: Session) -> dict[str, Any] | None:
    row = db.execute(text(_HEAD + "ORDER BY tree_size DESC LIMIT 1")).first()
    return None if row is None else _row_to_head(row)


def head_at(db: Session, tree_size: int) -> dict[str, Any] | None:
    row = db.execute(text(_HEAD + "WHERE tree_size = :n"), {"n": tree_size}).first()
    return None if row is None else _row_to_head(row)


def keys(db: Session) -> list[dict[str, Any]]:
    rows = db.execute(text("SELECT key_id, public_key, created_at, retired_at FROM bz_evidence_keys "
                           "ORDER BY created_at, key_id")).all()
    return [{"key_id": r.key_id, "algorithm": "ed25519", "public_key": b64(bytes(r.public_key)),
             "created_at": iso(r.created_at), "retired_at": iso(r.retired_at)} for r in rows]


def rotate_key(db: Session, data_dir: Path) -> dict[str, Any]:
    """A new key in the data folder; the old public key retired and kept. With the key set in
    the environment there is nothing here to rotate: the operator sets a new one."""
    if os.environ.get(ENV):
        raise ApiError("invalid_request", f"The signing key comes from {ENV}: set a new one there to rotate "
                                          "(the next head records it and retires the old public key).")
    db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": log.HEAD_LOCK})
    before = db.scalar(text("SELECT key_id FROM bz_evidence_keys WHERE retired_at IS NULL"))
    fresh = Ed25519PrivateKey.generate()
    key_id = _register(db, public_bytes(fresh))
    _write_private(Path(data_dir) / KEY_FILE, _seed_text(fresh), replace=True)
    return {"key_id": key_id, "public_key": b64(public_bytes(fresh)), "retired": before}


def verify_head(head: object, public_keys: dict[str, bytes]) -> tuple[int, bytes]:
    """Check a head's signature with the public key of its key_id; (tree_size, root) when it holds."""
    if not isinstance(head, dict):
        raise HeadError("the head is not an object")
    if head.get("format", FORMAT) != FORMAT:
        raise HeadError(f"the head is not a {FORMAT} head")
    tree_size = head.get("tree_size")
    if not isinstance(tree_size, int) or isinstance(tree_size, bool) or tree_size < 0:
        raise HeadError("the head's tree_size is not a whole number")
    root = unb64(head.get("root_hash"), "the head's root_hash", merkle.HASH_SIZE)
    signature = unb64(head.get("signature"), "the head's signature", 64)
    signed_at = head.get("signed_at")
    if not isinstance(signed_at, str):
        raise HeadError("the head's signed_at is not a string")
    key = public_keys.get(str(head.get("key_id")))
    if key is None:
        raise HeadError(f"no public key given for the head's key_id {head.get('key_id')!r}")
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message(tree_size, root, signed_at))
    except InvalidSignature:
        raise HeadError(f"the signature of the head of size {tree_size} does not verify") from None
    return tree_size, root


def stored_public_keys(db: Session) -> dict[str, bytes]:
    return {r.key_id: bytes(r.public_key) for r in db.execute(text("SELECT key_id, public_key FROM bz_evidence_keys"))}
