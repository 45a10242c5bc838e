"""What configures agent artifacts (BUSINESS_SIDE.md H.1): a route's
`agent_client.artifact_upload`, and the buckets of the configuration file (`artifact_buckets`).

The same rules serve `config apply` (every problem named by its path) and the upload itself,
which reads the stored route again and treats anything that would not pass as uploads disabled:
a row written by hand, or by an older hub, never widens what a route allows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import limits
from ..validation import Checker, join

MIMES = ("image/png", "image/jpeg", "image/webp")
BUCKET_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
UPLOAD_FIELDS = ("enabled", "bucket", "max_bytes", "allowed_mimes")
# The kinds Core knows. This hub stores into `local` buckets only: the others are refused by
# config apply, and a row of theirs (written by hand) answers 503 artifact_storage_unavailable.
KINDS = ("local", "cos", "oss")
STORED_KINDS = ("local",)
BUCKET_FIELDS = ("name", "kind", "dir", "public_base_url", "enabled")


@dataclass(frozen=True)
class UploadSettings:
    bucket: str
    max_bytes: int
    allowed_mimes: tuple[str, ...]


def check_upload(checker: Checker, value: Any, path: str) -> None:
    """`agent_client.artifact_upload`: `{enabled, bucket?, max_bytes?, allowed_mimes?}`, the
    bucket required when enabled."""
    if checker.obj(value, path, required=("enabled",), optional=UPLOAD_FIELDS[1:]) is None:
        return
    enabled = checker.boolean(value["enabled"], join(path, "enabled")) if "enabled" in value else None
    if "bucket" in value:
        checker.string(value["bucket"], join(path, "bucket"), pattern=BUCKET_NAME,
                       pattern_text="1 to 64 characters of A-Z a-z 0-9 _ -")
    elif enabled:
        checker.add(join(path, "bucket"), "is required when uploads are enabled")
    if "max_bytes" in value:
        checker.integer(value["max_bytes"], join(path, "max_bytes"), minimum=1, maximum=limits.ARTIFACT_MAX_BYTES)
    if "allowed_mimes" in value:
        mimes = value["allowed_mimes"]
        mpath = join(path, "allowed_mimes")
        if checker.string_list(mimes, mpath, max_items=len(MIMES)) is not None:
            if not mimes:
                checker.add(mpath, "must list at least one type")
            for i, mime in enumerate(mimes):
                if mime not in MIMES:
                    checker.add(join(mpath, i), f"must be one of {', '.join(MIMES)}")


def upload_settings(agent_client: dict | None) -> UploadSettings | None:
    """The route's upload settings, or None when uploads are off: `agent_client` disabled, or
    `artifact_upload` missing, invalid, disabled or without a bucket."""
    agent_client = agent_client or {}
    if agent_client.get("enabled") is not True:
        return None
    value = agent_client.get("artifact_upload")
    checker = Checker()
    check_upload(checker, value, "artifact_upload")
    if checker.problems or not isinstance(value, dict) or value["enabled"] is not True:
        return None
    return UploadSettings(bucket=value["bucket"], max_bytes=value.get("max_bytes", limits.ARTIFACT_MAX_BYTES),
                          allowed_mimes=tuple(value.get("allowed_mimes", MIMES)))


def public_base_problem(url: str) -> str | None:
    """Why `url` cannot prefix the URLs of receipts (which the official client checks: http(s),
    no credentials, query or fragment, at most 2048 characters), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment \
            or "?" in url or "#" in url:
        return "must not carry credentials, a query or a #fragment"
    if any(ord(c) < 0x21 or c == "\x7f" for c in url):
        return "must not contain spaces or control characters"
    # Room for the object's key (`ab/<sha256>.webp`, 72 characters) within the client's limit.
    if len(url) > limits.ARTIFACT_URL_MAX - 80:
        return f"must be at most {limits.ARTIFACT_URL_MAX - 80} characters"
    return None


def check_bucket(checker: Checker, item: Any, path: str, base_dir: Path) -> dict | None:
    """One `artifact_buckets` entry: `{name, kind: "local", dir, public_base_url?, enabled?}`.
    A relative `dir` is taken from the configuration file's folder. The folder is not touched
    here (the file may be applied from another host): the hub makes it at the first upload."""
    before = len(checker.problems)
    if checker.obj(item, path, required=("name", "kind", "dir"), optional=BUCKET_FIELDS[3:]) is None:
        return None
    if "name" in item:
        checker.string(item["name"], join(path, "name"), pattern=BUCKET_NAME,
                       pattern_text="1 to 64 characters of A-Z a-z 0-9 _ -")
    if "kind" in item and item["kind"] not in STORED_KINDS:
        checker.add(join(path, "kind"), "must be 'local': this hub does not store into cos or oss buckets")
    directory = None
    if "dir" in item and checker.string(item["dir"], join(path, "dir"), min_len=1, max_len=1024,
                                        single_line=True) is not None:
        directory = str((base_dir / item["dir"]).resolve())
    url = item.get("public_base_url")
    if url is not None and checker.string(url, join(path, "public_base_url"), min_len=1,
                                          max_len=limits.ARTIFACT_URL_MAX) is not None:
        problem = public_base_problem(url)
        if problem:
            checker.add(join(path, "public_base_url"), problem)
    if "enabled" in item:
        checker.boolean(item["enabled"], join(path, "enabled"))
    if len(checker.problems) != before:
        return None
    return {"name": item["name"], "kind": item["kind"], "dir": directory,
            "public_base_url": url.rstrip("/") if url else None, "enabled": item.get("enabled", True)}
