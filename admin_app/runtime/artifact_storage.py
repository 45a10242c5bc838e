"""Where artifacts are kept: the buckets of the configuration (sql/077) and the `local` store.

A local bucket is a folder of the hub's host. Objects are named by their content
(`ab/<sha256>.png`), written to a temporary file beside their final name, flushed to disk and
renamed into place, so a reader never sees half a file and two uploads of the same bytes share one
object. An object's URL is the bucket's `public_base_url` (a web server the operator points at the
folder) followed by its key; a bucket without one is served by the hub itself at
`BAILING_PUBLIC_URL/artifacts/<bucket>/<key>` (api/artifact_files.py).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, Session, mapped_column

from ..db import Base
from .artifact_config import STORED_KINDS, public_base_problem

EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
MIME_OF = {ext: mime for mime, ext in EXTENSIONS.items()}
OBJECT_KEY = re.compile(r"([0-9a-f]{2})/([0-9a-f]{64})\.(png|jpg|webp)")
HUB_SERVED_PREFIX = "/artifacts"


class Bucket(Base):
    __tablename__ = "bz_artifact_buckets"

    name: Mapped[str] = mapped_column(primary_key=True)
    kind: Mapped[str]
    dir: Mapped[str | None]
    public_base_url: Mapped[str | None]
    enabled: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class Artifact(Base):
    __tablename__ = "bz_agent_artifacts"

    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    upload_id: Mapped[str] = mapped_column(primary_key=True)
    record_json: Mapped[dict[str, Any]] = mapped_column(JSONB)
    state: Mapped[str] = mapped_column(default="pending")
    url: Mapped[str | None]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


def installed(db: Session) -> bool:
    """Whether sql/077 is applied (a hub upgraded only part way answers 501 artifact_unsupported)."""
    return bool(db.execute(text("SELECT to_regclass('bz_agent_artifacts') IS NOT NULL "
                                "AND to_regclass('bz_artifact_buckets') IS NOT NULL")).scalar())


def object_key(sha256: str, mime: str) -> str:
    return f"{sha256[:2]}/{sha256}.{EXTENSIONS[mime]}"


@dataclass(frozen=True)
class Target:
    """A bucket an object can be stored into now."""
    name: str
    directory: Path
    base_url: str

    def url(self, key: str) -> str:
        return f"{self.base_url}/{key}"


def hub_served_base(public_url: str | None, bucket: str) -> str | None:
    return f"{public_url}{HUB_SERVED_PREFIX}/{bucket}" if public_url else None


def target(db: Session, name: str, public_url: str | None) -> Target | None:
    """The bucket when it can take an object: present, enabled, of a kind this hub stores into,
    with an absolute folder and a usable public URL; None otherwise."""
    row = db.get(Bucket, name)
    if row is None or not row.enabled or row.kind not in STORED_KINDS or not row.dir \
            or not os.path.isabs(row.dir):
        return None
    base = row.public_base_url or hub_served_base(public_url, name)
    if base is None or public_base_problem(base) is not None:
        return None
    return Target(name=row.name, directory=Path(row.dir), base_url=base.rstrip("/"))


def served_folder(db: Session, name: str) -> Path | None:
    """The folder of a local bucket the hub itself publishes (one without a public_base_url)."""
    row = db.get(Bucket, name)
    if row is None or not row.enabled or row.kind != "local" or row.public_base_url or not row.dir \
            or not os.path.isabs(row.dir):
        return None
    return Path(row.dir)


class StoreFailed(Exception):
    """The object could not be written; nothing half-written is left under its name."""


def _holds(path: Path, sha256: str) -> bool:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    except OSError:
        return False


def store(bucket: Target, key: str, data: bytes, sha256: str) -> None:
    """Write `data` under `key` atomically (already there with these bytes: nothing to do)."""
    final = bucket.directory / key
    if _holds(final, sha256):
        return
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=final.parent, prefix=".upload-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, 0o644)  # published: whatever serves the folder must read it
            os.replace(temp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    except OSError as err:
        raise StoreFailed(str(err)) from err
