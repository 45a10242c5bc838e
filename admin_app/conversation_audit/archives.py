"""Creating archives (v1 and v2) and confirming members.

Creation freezes its whole input: the idempotency key is (creator session, writer route,
client_archive_id) and a retry must match the frozen input exactly, or it is a 409. The creator
is confirmed by creating; every other member confirms with its own bearer.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso, sha256_json, utc_now
from ..db import pipelined
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession, ClientApp
from ..validation import RESERVED_ROUTES, RESOURCE_KEY, Checker, join
from .availability import Availability
from .members import (Binding, authorization_invalid, check_locked, live_identity, lock_and_check,
                      locks_for_archive)

SCHEMA = "bailing.agent-conversation-audit.v1"
CREATE_V2 = "bailing.agent-conversation-audit-create.v2"
MAX_MEMBERS = 64
LABEL_MAX = 128
ID_MAX = 191
V1_FIELDS = ("client_archive_id", "client_conversation_id", "route", "member_session_ids", "member_labels")
V2_FIELDS = ("schema", "client_archive_id", "client_conversation_id", "members")

HEADER_COLUMNS = """id, client_archive_id, client_conversation_id, client_app_id, route_key, state,
    member_count, confirmed_count, last_sequence, message_count, turn_count, last_turn_status,
    created_at, updated_at"""


def not_found() -> ApiError:
    return ApiError(404, "conversation_audit_not_found", "No such conversation audit.")


def conflict(message: str) -> ApiError:
    return ApiError(409, "conversation_audit_conflict", message)


def limit_error(message: str, **extra) -> ApiError:
    return ApiError(413, "conversation_audit_limit", message, **extra)


def header_view(row: Any) -> dict:
    return {
        "conversation_id": str(row.id),
        "client_archive_id": str(row.client_archive_id),
        "client_conversation_id": row.client_conversation_id,
        "client_app_id": row.client_app_id,
        "route_key": row.route_key,
        "state": row.state,
        "member_count": row.member_count,
        "confirmed_count": row.confirmed_count,
        "last_sequence": row.last_sequence,
        "message_count": row.message_count,
        "turn_count": row.turn_count,
        "last_turn_status": row.last_turn_status,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def reply(row: Any) -> dict:
    return {"schema": SCHEMA, "conversation": header_view(row)}


def _uuid(checker: Checker, value: Any, path: str) -> str | None:
    if not isinstance(value, str):
        checker.add(path, "must be a UUID string")
        return None
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        checker.add(path, "must be a UUID")
        return None
    if str(parsed) != value:
        checker.add(path, "must be a UUID in its canonical lowercase 8-4-4-4-12 form")
        return None
    return str(parsed)


def _label(checker: Checker, value: Any, path: str) -> None:
    checker.string(value, path, max_len=LABEL_MAX)


def _route(checker: Checker, value: Any, path: str) -> None:
    if checker.string(value, path, pattern=RESOURCE_KEY) is not None and value in RESERVED_ROUTES:
        checker.add(path, f"'{value}' is reserved and cannot be a route")


def _common(checker: Checker, body: dict) -> None:
    if "client_archive_id" in body:
        _uuid(checker, body["client_archive_id"], "client_archive_id")
    if "client_conversation_id" in body:
        checker.string(body["client_conversation_id"], "client_conversation_id", min_len=1,
                       max_len=ID_MAX, single_line=True)


def parse_v1(body: dict, creator: AgentSession) -> tuple[list[Binding], dict[str, str], str]:
    checker = Checker()
    checker.obj(body, "", required=V1_FIELDS[:4], optional=V1_FIELDS[4:])
    _common(checker, body)
    if "route" in body:
        _route(checker, body["route"], "route")
    ids = body.get("member_session_ids")
    if isinstance(ids, list) and len(ids) > MAX_MEMBERS:
        raise limit_error(f"At most {MAX_MEMBERS} members.", max_members=MAX_MEMBERS)
    if "member_session_ids" in body:
        if not isinstance(ids, list) or not ids:
            checker.add("member_session_ids", "must be a non-empty list")
        else:
            seen: set[str] = set()
            for i, value in enumerate(ids):
                sid = _uuid(checker, value, join("member_session_ids", i))
                if sid in seen:
                    checker.add(join("member_session_ids", i), "a session may occur only once")
                seen.add(sid)
    labels = body.get("member_labels", {})
    if checker.obj(labels, "member_labels", open_ended=True) is not None:
        for key, value in labels.items():
            if not isinstance(ids, list) or key not in ids:
                checker.add(join("member_labels", key), "labels only sessions in member_session_ids")
            _label(checker, value, join("member_labels", key))
    if not checker.problems and str(creator.id) not in ids:
        checker.add("member_session_ids", "the creating session must be a member")
    if checker.problems:
        raise invalid_request(checker)
    bindings = [Binding(sid, creator.client_app_id, body["route"]) for sid in ids]
    return bindings, {sid: labels[sid] for sid in ids if sid in labels}, body["route"]


def parse_v2(body: dict, creator: AgentSession) -> tuple[list[Binding], dict[str, str], str]:
    checker = Checker()
    mixed = [k for k in ("route", "member_session_ids", "member_labels") if k in body]
    for key in mixed:
        checker.add(key, "is a v1 field; v2 creation takes members only")
    checker.obj({k: v for k, v in body.items() if k not in mixed}, "", required=V2_FIELDS)
    _common(checker, body)
    members = body.get("members")
    if isinstance(members, list) and len(members) > MAX_MEMBERS:
        raise limit_error(f"At most {MAX_MEMBERS} members.", max_members=MAX_MEMBERS)
    seen: set[str] = set()
    if "members" in body:
        if not isinstance(members, list) or not members:
            checker.add("members", "must hold 1 to 64 members")
            members = []
        for i, member in enumerate(members):
            path = join("members", i)
            if checker.obj(member, path, required=("session_id", "client_app_id", "route"),
                           optional=("label",)) is None:
                continue
            if "session_id" in member:
                sid = _uuid(checker, member["session_id"], join(path, "session_id"))
                if sid is not None and sid in seen:
                    checker.add(join(path, "session_id"), "a session may occur only once")
                seen.add(sid)
            if "client_app_id" in member:
                checker.string(member["client_app_id"], join(path, "client_app_id"), pattern=RESOURCE_KEY)
            if "route" in member:
                _route(checker, member["route"], join(path, "route"))
            if "label" in member:
                _label(checker, member["label"], join(path, "label"))
    if not checker.problems and str(creator.id) not in seen:
        checker.add("members", "the creating session must be a member")
    if checker.problems:
        raise invalid_request(checker)
    # Validation order is by session id, so the same input always fails on the same member.
    ordered = sorted(members, key=lambda m: m["session_id"])
    writer = next(m for m in ordered if m["session_id"] == str(creator.id))
    if writer["client_app_id"] != creator.client_app_id:
        raise authorization_invalid("The writer's client_app_id must be the creating bearer's app.")
    bindings = [Binding(m["session_id"], m["client_app_id"], m["route"]) for m in members]
    labels = {m["session_id"]: m["label"] for m in members if "label" in m}
    return bindings, labels, writer["route"]


def create(db: Session, creator: AgentSession, body: dict, available: Availability) -> tuple[dict, bool]:
    """(reply, created). v2 when the body names the v2 schema; otherwise v1."""
    version = 2 if "schema" in body else 1
    if version == 2:
        if body["schema"] != CREATE_V2:
            raise invalid_request(Checker.single("schema", f"must be '{CREATE_V2}' (or absent for v1)"))
        if not available.cross_binding:
            raise ApiError(503, "conversation_audit_cross_binding_unavailable",
                           "Cross-system member bindings are not available on this hub.")
        bindings, labels, route_key = parse_v2(body, creator)
    else:
        bindings, labels, route_key = parse_v1(body, creator)
    key = f"{creator.id}:{route_key}:{body['client_archive_id']}"
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 57))"), {"k": key})
    input_hash = sha256_json({"version": version, "input": body})
    existing = db.execute(text(f"""
        SELECT {HEADER_COLUMNS}, input_hash FROM bz_agent_conversation_archives
        WHERE creator_session_id = :creator AND route_key = :route AND client_archive_id = :archive
        FOR UPDATE"""), {"creator": creator.id, "route": route_key,
                         "archive": body["client_archive_id"]}).first()
    if existing is not None and existing.input_hash != input_hash:
        raise conflict("This archive was created with a different frozen input.")
    sessions = lock_and_check(db, bindings)
    if existing is not None:
        return reply(existing), False
    archive_id = uuid.uuid4()
    now = utc_now()
    single = len(bindings) == 1
    db.execute(text(f"""
        INSERT INTO bz_agent_conversation_archives
            (id, client_archive_id, client_conversation_id, creator_session_id, client_app_id,
             route_key, input_hash, state, member_count, confirmed_count, created_at, updated_at
             {", membership_version" if available.cross_binding else ""})
        VALUES (:id, :archive, :conversation, :creator, :app, :route, :hash, :state, :members, 1,
                :now, :now {", :version" if available.cross_binding else ""})"""),
        {"id": archive_id, "archive": body["client_archive_id"],
         "conversation": body["client_conversation_id"], "creator": creator.id,
         "app": creator.client_app_id, "route": route_key, "hash": input_hash,
         "state": "ready" if single else "enrolling", "members": len(bindings), "now": now,
         "version": version})
    names = {}
    if version == 2:
        names = {c.app_id: c.name for c in db.query(ClientApp).filter(
            ClientApp.app_id.in_({b.client_app_id for b in bindings}))}
    for position, b in enumerate(bindings):
        session = sessions[b.session_id]
        confirmed = b.session_id == str(creator.id)
        values = {"archive": archive_id, "session": b.session_id, "position": position,
                  "label": labels.get(b.session_id), "confirmed_at": now if confirmed else None,
                  "principal": _json(session.principal) if confirmed else None,
                  "obo": session.on_behalf_of if confirmed else None,
                  "identity": live_identity(session) if confirmed else None}
        binding_cols = binding_vals = ""
        if version == 2:
            binding_cols = ", client_app_id, route_key, client_name"
            binding_vals = ", :app, :route, :client_name"
            values.update(app=b.client_app_id, route=b.route_key, client_name=names.get(b.client_app_id))
        db.execute(text(f"""
            INSERT INTO bz_agent_conversation_members
                (archive_id, session_id, position, label, confirmed_at, principal, on_behalf_of,
                 identity_hash{binding_cols})
            VALUES (:archive, :session, :position, :label, :confirmed_at, CAST(:principal AS jsonb),
                    :obo, :identity{binding_vals})"""), values)
    return reply(load_header(db, archive_id)), True


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


_HEADER_SQL = (f"SELECT {HEADER_COLUMNS}, creator_session_id, running_turn_id, text_bytes "
               "FROM bz_agent_conversation_archives WHERE id = %(id)s")


def load_header(db: Session, archive_id: Any, *, lock: bool = False):
    rows = pipelined(db, (_HEADER_SQL + (" FOR UPDATE" if lock else ""), {"id": archive_id}))[0]
    return rows[0] if rows else None


def parse_archive_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise not_found() from None


def _members_sql(available: Availability) -> str:
    binding = ", client_app_id, route_key" if available.cross_binding else ", NULL AS client_app_id, NULL AS route_key"
    return f"""SELECT session_id, confirmed_at, identity_hash{binding}
        FROM bz_agent_conversation_members WHERE archive_id = %(id)s ORDER BY position"""


def group_bindings(header: Any, members: list) -> list[Binding]:
    return [Binding(str(m.session_id), m.client_app_id or header.client_app_id,
                    m.route_key or header.route_key, m.identity_hash) for m in members]


def locked_archive_for_member(db: Session, session: AgentSession, archive_id: uuid.UUID,
                              available: Availability, *also: tuple[str, dict]):
    """(header, members, locked, *more): the archive (locked) and its members, when this session
    is one of them, else 404. In the same round trip every member's session, client app and route
    is share-locked; `locked` holds those rows for `check_locked`, which the caller runs once it
    has made the checks that come first. `also`: more statements sent after the locks; their rows
    are `more`."""
    headers, members, *found = pipelined(
        db, (_HEADER_SQL + " FOR UPDATE", {"id": archive_id}),
        (_members_sql(available), {"id": archive_id}),
        *locks_for_archive(archive_id, available.cross_binding), *also)
    locked, more = found[:3], found[3:]
    if not headers or str(session.id) not in {str(m.session_id) for m in members}:
        raise not_found()
    return (headers[0], members, locked, *more)


def confirm(db: Session, session: AgentSession, archive_ref: str, available: Availability) -> dict:
    header, members, locked = locked_archive_for_member(db, session, parse_archive_id(archive_ref),
                                                        available)
    check_locked(group_bindings(header, members), locked)
    mine = next(m for m in members if str(m.session_id) == str(session.id))
    if mine.confirmed_at is None:
        db.execute(text("""
            UPDATE bz_agent_conversation_members
               SET confirmed_at = now(), principal = CAST(:principal AS jsonb), on_behalf_of = :obo,
                   identity_hash = :identity
             WHERE archive_id = :archive AND session_id = :session"""),
            {"principal": _json(session.principal), "obo": session.on_behalf_of,
             "identity": live_identity(session), "archive": header.id, "session": session.id})
        db.execute(text("""
            UPDATE bz_agent_conversation_archives
               SET confirmed_count = confirmed_count + 1,
                   state = CASE WHEN confirmed_count + 1 = member_count THEN 'ready' ELSE state END,
                   updated_at = now()
             WHERE id = :id"""), {"id": header.id})
        header = load_header(db, header.id)
    return reply(header)
