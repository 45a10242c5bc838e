"""The Agent Sessions of a client app as its business backend manages them with its Client Token
(BUSINESS_SIDE.md §H.2, §H.3): the business session object, the filtered list paged newest first
by a cursor bound to its filters, and the subject display set on a live session.

The business object never carries token material; its `expires_at` is the session's end (the
refresh expiry), unlike GET /session where it is the access token's.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, literal, select, tuple_
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, utc_now
from ..errors import ApiError, invalid_request
from ..validation import JS_BLANK, UUID_V1_5, Checker, strict_json_loads, utf16_len
from . import subject_display as display
from .models import AgentAuthorization, AgentSession, ClientApp
from .sessions import UNLABELLED_DEVICE, session_state

LIST_PARAMETERS = ("authorization_id", "on_behalf_of", "principal_id", "tenant", "state", "limit", "cursor")
STATES = ("active", "expired", "revoked")
_LIMIT = re.compile(r"[1-9][0-9]{0,2}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CURSOR_KEYS = {"v", "binding", "created_at", "session_id"}

_S = AgentSession.__table__
_A = AgentAuthorization.__table__


def not_found() -> ApiError:
    return ApiError("not_found", "No such agent session.")


# ------------------------------------------------------------------ the business session object

def _principal(principal: Any) -> dict[str, Any] | None:
    """`{id, tenant?, roles[], audience?, channel?}`: roles always present. An operator may issue
    a session without a principal (`bailing-admin sessions issue`): null then."""
    if not isinstance(principal, dict):
        return None
    view: dict[str, Any] = {"id": principal.get("id")}
    if "tenant" in principal:
        view["tenant"] = principal["tenant"]
    view["roles"] = list(principal.get("roles") or [])
    for key in ("audience", "channel"):
        if key in principal:
            view[key] = principal[key]
    return view


def business_view(row: Any, authorization_id: uuid.UUID | None, now: datetime) -> dict[str, Any]:
    """`row`: an AgentSession, or a row of its columns."""
    view: dict[str, Any] = {"session_id": str(row.id)}
    if authorization_id is not None:
        view["authorization_id"] = str(authorization_id)
    view.update({
        "client_app_id": row.client_app_id,
        "device_label": row.device_label or UNLABELLED_DEVICE,
        **display.view(row.subject_display),
        "principal": _principal(row.principal),
        "on_behalf_of": row.on_behalf_of,
        "allowed_routes": list(row.allowed_routes),
        "state": session_state(row.revoked_at, row.refresh_expires_at, now),
        "created_at": iso(row.created_at),
        "expires_at": iso(row.refresh_expires_at),
    })
    if row.revoked_at is not None:
        view["revoked_at"] = iso(row.revoked_at)
    return view


# ------------------------------------------------------------------ GET /sessions

@dataclass(frozen=True)
class Filters:
    authorization_id: str | None = None
    on_behalf_of: str | None = None
    principal_id: str | None = None
    tenant: str | None = None
    state: str | None = None

    def binding(self, client_app_id: str) -> str:
        """SHA-256 hex of the JSON array of the client and the filters (null for each not
        given), compact and unescaped as JavaScript's JSON.stringify writes it: a cursor made
        under other filters, or for another client, does not match."""
        values = [client_app_id, self.authorization_id, self.on_behalf_of, self.principal_id, self.tenant,
                  self.state]
        text = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ListQuery:
    filters: Filters
    limit: int
    cursor: str | None


def _text_filter(checker: Checker, params: dict[str, str], key: str, shortest: int, longest: int) -> str | None:
    value = params.get(key)
    if value is None:
        return None
    if not shortest <= utf16_len(value) <= longest:
        checker.add(key, f"must be {shortest} to {longest} characters")
    elif _CONTROL.search(value):
        checker.add(key, "must not contain control characters")
    elif value != value.strip(JS_BLANK):
        checker.add(key, "must not start or end with blanks")
    return value


def parse_list_query(params: dict[str, str]) -> ListQuery:
    """The query's values; `params` holds only the known parameters, each given once."""
    checker = Checker()
    authorization_id = params.get("authorization_id")
    if authorization_id is not None:
        if UUID_V1_5.fullmatch(authorization_id):
            authorization_id = authorization_id.lower()
        else:
            checker.add("authorization_id", "must be a UUID")
    on_behalf_of = _text_filter(checker, params, "on_behalf_of", 1, limits.ON_BEHALF_OF_MAX)
    principal_id = _text_filter(checker, params, "principal_id", 1, limits.PRINCIPAL_FIELD_MAX["id"])
    tenant = _text_filter(checker, params, "tenant", 0, limits.PRINCIPAL_FIELD_MAX["tenant"])
    if principal_id is not None and tenant is None:
        checker.add("principal_id", "requires tenant")
    state = params.get("state")
    if state is not None and state not in STATES:
        checker.add("state", "must be one of " + ", ".join(STATES))
    default, _, most = limits.SESSIONS_LIMIT
    limit = default
    if "limit" in params:
        if _LIMIT.fullmatch(params["limit"]) and int(params["limit"]) <= most:
            limit = int(params["limit"])
        else:
            checker.add("limit", f"must be a whole number from 1 to {most}")
    cursor = params.get("cursor")
    if cursor is not None and not (0 < len(cursor) <= limits.SESSIONS_CURSOR_MAX and _BASE64URL.fullmatch(cursor)):
        checker.add("cursor", "is not a cursor of this list")
    if checker.problems:
        raise invalid_request(checker)
    return ListQuery(Filters(authorization_id, on_behalf_of, principal_id, tenant, state), limit, cursor)


def encode_cursor(binding: str, created_at: datetime, session_id: uuid.UUID) -> str:
    text = json.dumps({"v": 1, "binding": binding, "created_at": iso(created_at), "session_id": str(session_id)},
                      separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str, binding: str) -> tuple[datetime, uuid.UUID]:
    """The position a cursor names, when it is the canonical unpadded base64url of this list's
    cursor JSON under the same binding; anything else is a 400."""
    bad = invalid_request(Checker.single("cursor", "is not a cursor of this list (or of these filters)"))
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = strict_json_loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise bad from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != cursor:
        raise bad  # a second spelling of the same bytes (padding bits set)
    if not isinstance(value, dict) or set(value) != _CURSOR_KEYS or type(value["v"]) is not int \
            or value["v"] != 1 or value["binding"] != binding:
        raise bad
    created_at, session_id = value["created_at"], value["session_id"]
    if not (isinstance(created_at, str) and _TIMESTAMP.fullmatch(created_at)
            and isinstance(session_id, str) and UUID_V1_5.fullmatch(session_id)):
        raise bad
    try:
        moment = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        raise bad from None
    return moment, uuid.UUID(session_id)


def _filtered(query: Select[Any], filters: Filters, now: datetime) -> Select[Any]:
    if filters.authorization_id is not None:
        query = query.where(_A.c.id == uuid.UUID(filters.authorization_id))
    if filters.on_behalf_of is not None:
        query = query.where(_S.c.on_behalf_of == filters.on_behalf_of)
    if filters.tenant is not None:
        # An empty tenant: the sessions whose principal names none.
        query = query.where(_S.c.principal["tenant"].astext.is_(None) if filters.tenant == ""
                            else _S.c.principal["tenant"].astext == filters.tenant)
    if filters.principal_id is not None:
        query = query.where(_S.c.principal["id"].astext == filters.principal_id)
    if filters.state == "revoked":
        query = query.where(_S.c.revoked_at.is_not(None))
    elif filters.state == "active":
        query = query.where(_S.c.revoked_at.is_(None), _S.c.refresh_expires_at > now)
    elif filters.state == "expired":
        query = query.where(_S.c.revoked_at.is_(None), _S.c.refresh_expires_at <= now)
    return query


def list_sessions(db: Session, client: ClientApp, request: ListQuery) -> dict[str, Any]:
    """One page, newest first (ties by session id, descending): an index range of
    (client_app_id, created_at DESC, id DESC) that stops after the page."""
    binding = request.filters.binding(client.app_id)
    after = decode_cursor(request.cursor, binding) if request.cursor is not None else None
    now = utc_now()
    query = (select(_S.c.id, _S.c.client_app_id, _S.c.device_label, _S.c.subject_display, _S.c.principal,
                    _S.c.on_behalf_of, _S.c.allowed_routes, _S.c.created_at, _S.c.refresh_expires_at,
                    _S.c.revoked_at, _A.c.id.label("authorization_id"))
             .select_from(_S.outerjoin(_A, _A.c.session_id == _S.c.id))
             .where(_S.c.client_app_id == client.app_id))
    query = _filtered(query, request.filters, now)
    if after is not None:
        position = tuple_(literal(after[0], _S.c.created_at.type), literal(after[1], _S.c.id.type))
        query = query.where(tuple_(_S.c.created_at, _S.c.id) < position)
    query = query.order_by(_S.c.created_at.desc(), _S.c.id.desc()).limit(request.limit + 1)
    try:
        rows = db.execute(query).all()
    except DBAPIError:
        raise ApiError("agent_auth_lifecycle_unavailable") from None
    page = rows[:request.limit]
    more = len(rows) > request.limit
    return {"list": [business_view(row, row.authorization_id, now) for row in page],
            "next_cursor": encode_cursor(binding, page[-1].created_at, page[-1].id) if more else None}


# ------------------------------------------------------------------ PUT /sessions/:id/subject-display

def check_subject_display_body(body: dict[str, Any]) -> None:
    checker = Checker()
    checker.obj(body, "", required=("subject_display",))
    if "subject_display" in body:
        display.check(checker, body["subject_display"], "subject_display")
    if checker.problems:
        raise invalid_request(checker)


def set_subject_display(db: Session, client: ClientApp, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` has passed check_subject_display_body. The last write wins; nothing else of the
    session changes and no token is issued. A live session of this client only."""
    if not UUID_V1_5.fullmatch(session_id):
        raise not_found()
    try:
        row = db.get(AgentSession, uuid.UUID(session_id), with_for_update=True)
        if row is None or row.client_app_id != client.app_id:
            raise not_found()
        now = utc_now()
        if session_state(row.revoked_at, row.refresh_expires_at, now) != "active":
            raise ApiError("session_inactive")
        row.subject_display = display.stored(body["subject_display"])
        db.flush()
        authorization_id = db.scalar(select(_A.c.id).where(_A.c.session_id == row.id))
    except DBAPIError:
        raise ApiError("subject_display_unavailable") from None
    return business_view(row, authorization_id, now)
