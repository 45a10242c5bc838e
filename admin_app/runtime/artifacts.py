"""Agent artifacts (BUSINESS_SIDE.md H.1): an image a local agent uploads for a turn, kept in the
route's bucket and answered with a receipt (bailing.agent-artifact.v1) that names its public URL.

An upload is checked in Core's order; the first failure answers and nothing is written:

    1. hub paused                                                   503 hub_paused (api layer)
    2. X-Bailing-Artifact header, its JSON and the metadata         400 artifact_invalid_request
    3. Content-Type is not the declared mime, Content-Length not
       the declared bytes                                           400 artifact_content_mismatch
    4. the body streams past min(bytes, 6 MiB)                      413 artifact_too_large
    5. the route gate, without `agent_direct`                       400/403/404
    6. sql/077 not applied                                          501 artifact_unsupported
    7. uploads off on the route                                     403 artifact_upload_disabled
    8. body length or SHA-256 differ from the metadata              400 artifact_content_mismatch
    9. magic bytes not of the mime, or mime not allowed             415 artifact_type_not_allowed
   10. over the route's max_bytes                                   413 artifact_too_large
   11. run_id of another session/client/workspace/conversation      403 artifact_run_mismatch,
       or of another turn                                           403 artifact_run_turn_mismatch
   12. upload_id seen with another workspace or metadata            409 artifact_conflict;
       already stored: the original receipt; the route's bucket
       changed since it was accepted                                409 artifact_storage_changed
   13. the bucket cannot take objects                               503 artifact_storage_unavailable
   14. writing failed: the upload stays pending (committed)         503 artifact_upload_pending

Steps 1-4 need no database (api/agent_artifacts.py runs them before opening a transaction, so a
slow upload holds no connection). Idempotency is keyed by (session, upload_id), and the row is
locked from its first check to the commit, so concurrent retries of one upload store it once.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import utc_now
from ..errors import ApiError
from ..identity.models import AgentSession, Route
from ..identity.workspace import resolve_route
from ..validation import Checker, join, strict_json_loads, utf16_len
from . import artifact_storage as storage
from .artifact_config import MIMES, UploadSettings, upload_settings
from .models import Run

SCHEMA = "bailing.agent-artifact.v1"
HEADER = "X-Bailing-Artifact"
UPLOAD_ID = re.compile(r"[0-9a-f]{64}")
SHA256 = re.compile(r"[0-9a-f]{64}")
RUN_ID = re.compile(r"[a-f0-9-]{36}")
BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
TEXT_FIELDS = ("client_conversation_id", "client_turn_id", "name")
META_FIELDS = (*TEXT_FIELDS, "mime", "bytes", "sha256")
# C0, DEL and C1 controls, and the line and paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAGIC = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/webp": lambda b: len(b) >= 12 and b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}


@dataclass(frozen=True)
class Metadata:
    client_conversation_id: str
    client_turn_id: str
    name: str
    mime: str
    bytes: int
    sha256: str
    run_id: str | None

    def as_json(self) -> dict[str, Any]:
        """The normalised metadata, in the receipt's order (run_id only when given)."""
        values: dict[str, Any] = {key: getattr(self, key) for key in META_FIELDS}
        if self.run_id is not None:
            values["run_id"] = self.run_id
        return values


def _invalid(message: str) -> ApiError:
    return ApiError("artifact_invalid_request", message)


def parse_header(raw: str | None) -> Metadata:
    """X-Bailing-Artifact: unpadded base64url (at most 4096 characters) of a UTF-8 JSON object
    with exactly the metadata keys (run_id optional)."""
    if raw is None:
        raise _invalid(f"The {HEADER} header is required.")
    if len(raw) > limits.ARTIFACT_HEADER_MAX or not BASE64URL.fullmatch(raw):
        raise _invalid(f"{HEADER} must be 1 to {limits.ARTIFACT_HEADER_MAX} characters of base64url "
                       "(A-Z a-z 0-9 _ -).")
    try:
        decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8")
        value = strict_json_loads(decoded)
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise _invalid(f"{HEADER} is not base64url of UTF-8 JSON.") from None
    checker = Checker()
    if checker.obj(value, "", required=META_FIELDS, optional=("run_id",)) is not None:
        for key in TEXT_FIELDS:
            if key in value:
                _text(checker, value[key], key)
        if "mime" in value and value["mime"] not in MIMES:
            checker.add("mime", f"must be one of {', '.join(MIMES)}")
        if "bytes" in value:
            checker.integer(value["bytes"], "bytes", minimum=1, maximum=limits.ARTIFACT_MAX_BYTES)
        if "sha256" in value:
            checker.string(value["sha256"], "sha256", pattern=SHA256, pattern_text="64 lowercase hex digits")
        if "run_id" in value:
            checker.string(value["run_id"], "run_id", pattern=RUN_ID,
                           pattern_text=f"{limits.ARTIFACT_RUN_ID_LENGTH} characters of a-f 0-9 -")
    if checker.problems:
        raise _invalid("; ".join(f"{join(HEADER, p)}: {m}" for p, m in checker.problems))
    return Metadata(**{key: value[key] for key in META_FIELDS}, run_id=value.get("run_id"))


def _text(checker: Checker, value: Any, path: str) -> None:
    if not isinstance(value, str) or not 1 <= utf16_len(value) <= limits.ARTIFACT_TEXT_MAX:
        checker.add(path, f"must be a string of 1 to {limits.ARTIFACT_TEXT_MAX} characters")
    elif CONTROL.search(value):
        checker.add(path, "must not contain control characters")
    elif path == "name" and ("/" in value or "\\" in value):
        checker.add(path, "must not contain / or \\")


def check_declared(meta: Metadata, content_type: str | None, content_length: int | None) -> None:
    """The request's own headers agree with the metadata: the exact Content-Type, and the
    Content-Length when one is sent."""
    if content_type != meta.mime:
        raise ApiError("artifact_content_mismatch", "Content-Type must be exactly the declared mime.")
    if content_length is not None and content_length != meta.bytes:
        raise ApiError("artifact_content_mismatch", "Content-Length must equal the declared bytes.")


def read_bound(meta: Metadata) -> int:
    """The most of a body that is ever read: the declared size, within the hard limit."""
    return min(meta.bytes, limits.ARTIFACT_MAX_BYTES)


# ------------------------------------------------------------------ the upload

def _receipt(row: storage.Artifact) -> dict[str, Any]:
    record = row.record_json
    receipt: dict[str, Any] = {
        "schema_version": SCHEMA,
        "upload_id": row.upload_id,
        "workspace": record["workspace"],
        "session_id": str(row.session_id),
        "state": row.state,
        **record["metadata"],
        "visibility": "public",
    }
    if row.state == "ready":
        receipt["url"] = row.url
    receipt["next_action"] = "use_url" if row.state == "ready" else "retry_same_upload"
    return receipt


def _check_content(meta: Metadata, data: bytes, settings: UploadSettings) -> None:
    if len(data) != meta.bytes or hashlib.sha256(data).hexdigest() != meta.sha256:
        raise ApiError("artifact_content_mismatch", "The body's length or SHA-256 is not the declared one.")
    if not MAGIC[meta.mime](data) or meta.mime not in settings.allowed_mimes:
        raise ApiError("artifact_type_not_allowed")
    if meta.bytes > settings.max_bytes:
        raise ApiError("artifact_too_large", f"This route takes images of at most {settings.max_bytes} bytes.",
                       max_bytes=settings.max_bytes)


def _check_run(db: Session, session: AgentSession, route: Route, meta: Metadata) -> None:
    if meta.run_id is None:
        return
    run = db.get(Run, uuid.UUID(meta.run_id)) if _uuid_shaped(meta.run_id) else None
    if run is None or run.session_id != session.id or run.client_app_id != session.client_app_id \
            or run.route_key != route.route_key or run.client_conversation_id != meta.client_conversation_id:
        raise ApiError("artifact_run_mismatch")
    if run.client_turn_id != meta.client_turn_id:
        raise ApiError("artifact_run_turn_mismatch")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _uuid_shaped(value: str) -> bool:
    # run_id's pattern admits 36 characters that are no UUID: such an id names no run.
    return _UUID.fullmatch(value) is not None


def _locked_row(db: Session, session: AgentSession, upload_id: str, record: dict) -> tuple[storage.Artifact, bool]:
    """The upload's row, locked to the end of the transaction: inserted pending (True) or the one
    an earlier request made (False)."""
    inserted = db.execute(insert(storage.Artifact).values(
        session_id=session.id, upload_id=upload_id, record_json=record, state="pending")
        .on_conflict_do_nothing().returning(storage.Artifact.upload_id)).first()
    row = db.scalars(select(storage.Artifact).where(
        storage.Artifact.session_id == session.id, storage.Artifact.upload_id == upload_id)
        .with_for_update().execution_options(populate_existing=True)).one()
    return row, inserted is not None


def upload(db: Session, session: AgentSession, route_key: str, upload_id: str, meta: Metadata,
           data: bytes, public_url: str | None) -> dict[str, Any]:
    """Steps 5 to 14 for a body already read within its bound; the receipt."""
    route = resolve_route(db, session, route_key, "system")
    if not storage.installed(db):
        raise ApiError("artifact_unsupported")
    settings = upload_settings(route.agent_client)
    if settings is None:
        raise ApiError("artifact_upload_disabled")
    _check_content(meta, data, settings)
    _check_run(db, session, route, meta)

    key = storage.object_key(meta.sha256, meta.mime)
    record = {"workspace": route.route_key, "metadata": meta.as_json(), "client_app_id": session.client_app_id,
              "bucket": settings.bucket, "object_key": key}
    row, new = _locked_row(db, session, upload_id, record)
    if not new:
        same = row.record_json["workspace"] == route.route_key and row.record_json["metadata"] == meta.as_json()
        if not same:
            raise ApiError("artifact_conflict")
        if row.state == "ready":
            return _receipt(row)
        if row.record_json["bucket"] != settings.bucket:
            raise ApiError("artifact_storage_changed")
    bucket = storage.target(db, settings.bucket, public_url)
    if bucket is None:
        raise ApiError("artifact_storage_unavailable")
    try:
        storage.store(bucket, key, data, meta.sha256)
    except storage.StoreFailed:
        # The upload stands as pending (so GET shows it, and a retry of the same upload_id
        # finishes it): this refusal commits the row, nothing else.
        err = ApiError("artifact_upload_pending")
        err.commit_anyway = True
        raise err from None
    row.state, row.url, row.updated_at = "ready", bucket.url(key), utc_now()
    db.flush()
    return _receipt(row)


def receipt(db: Session, session: AgentSession, route_key: str, upload_id: str) -> dict[str, Any]:
    """GET: the receipt of this session's upload in this workspace (works while paused)."""
    route = resolve_route(db, session, route_key, "system")
    if not storage.installed(db):
        raise ApiError("artifact_unsupported")
    row = db.get(storage.Artifact, (session.id, upload_id))
    if row is None or row.record_json.get("workspace") != route.route_key:
        raise ApiError("artifact_not_found")
    return _receipt(row)
