"""Creating archives (v1 and v2) and confirming members.

Creation freezes its whole input: the idempotency key is (creator session, writer route,
client_archive_id) and a retry must match the frozen input exactly, or it is a 409. The creator
is confirmed by creating; every other member confirms with its own bearer.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, sha256_json, utc_now
from ..db import pipelined
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession, ClientApp
from ..validation import RESERVED_ROUTES, RESOURCE_KEY, Checker, client_text, join
from .availability import Availability
from .members import Binding, check_locked, live_identity, lock_and_check, locks_for_archive
from .values import ARCHIVE_REF, client_id, uuid_value

SCHEMA = "bailing.agent-conversation-audit.v1"
CREATE_V2 = "bailing.agent-conversation-audit-create.v2"
V1_FIELDS = ("client_archive_id", "client_conversation_id", "route", "member_session_ids", "member_labels")
V2_FIELDS = ("schema", "client_archive_id", "client_conversation_id", "members")

HEADER_COLUMNS = """id, client_archive_id, client_conversation_id, client_app_id, route_key, state,
    member_count, confirmed_count, last_sequence, message_count, turn_count, last_turn_status,
    created_at, updated_at"""


def not_found() -> ApiError:
    return ApiError("conversation_audit_not_found")


def conflict(message: str) -> ApiError:
    return ApiError("conversation_audit_conflict", message)


def limit_error(message: str, **extra: Any) -> ApiError:
    return ApiError("conversation_audit_limit", message, **extra)


def header_view(row: Any) -> dict[str, Any]:
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


def reply(row: Any) -> dict[str, Any]:
    """The header flat beside `schema`, as the client SDK reads it; the same header under
    `conversation` too, for the clients that read it there."""
    header = header_view(row)
    return {"schema": SCHEMA, **header, "conversation": header}


def _label(checker: Checker, value: Any, path: str) -> str | None:
    return client_text(checker, value, path, limits.AUDIT_LABEL_MAX_UNITS)


def _route(checker: Checker, value: Any, path: str) -> str | None:
    route = checker.string(value, path, pattern=RESOURCE_KEY)
    if route is None:
        return None
    if route in RESERVED_ROUTES:
        checker.add(path, f"'{route}' is reserved and cannot be a route")
        return None
    return route


def _common(checker: Checker, body: dict[str, Any]) -> dict[str, Any]:
    found = {}
    if "client_archive_id" in body:
        found["client_archive_id"] = uuid_value(checker, body["client_archive_id"], "client_archive_id")
    if "client_conversation_id" in body:
        found["client_conversation_id"] = client_id(checker, body["client_conversation_id"],
                                                    "client_conversation_id")
    return found


def _member_list(checker: Checker, value: Any, path: str) -> bool:
    if not isinstance(value, list) or not 1 <= len(value) <= limits.AUDIT_MAX_MEMBERS:
        checker.add(path, f"must be a list of 1 to {limits.AUDIT_MAX_MEMBERS} members")
        return False
    return True


# A parse returns the members in the order sent (their positions), their labels, the writer's
# route and the normalised input: UUIDs lower-cased, members sorted. The normalised input is what
# is frozen, so a reordered or upper-cased retry is the same archive.
Parsed = tuple[list[Binding], dict[str, str], str, dict[str, Any]]


def parse_v1(body: dict[str, Any], creator: AgentSession) -> Parsed:
    checker = Checker()
    checker.obj(body, "", required=V1_FIELDS[:4], optional=V1_FIELDS[4:])
    common = _common(checker, body)
    route = _route(checker, body["route"], "route") if "route" in body else None
    members: list[str] = []
    if "member_session_ids" in body and _member_list(checker, body["member_session_ids"],
                                                     "member_session_ids"):
        for i, value in enumerate(body["member_session_ids"]):
            sid = uuid_value(checker, value, join("member_session_ids", i))
            if sid is not None and sid in members:
                checker.add(join("member_session_ids", i), "a session may occur only once")
            elif sid is not None:
                members.append(sid)
    labels: dict[str, str] = {}
    raw_labels = body.get("member_labels", {})
    if checker.obj(raw_labels, "member_labels", open_ended=True) is not None:
        for key, value in raw_labels.items():
            path = join("member_labels", key)
            sid = uuid_value(checker, key, path)
            if sid is not None and (sid not in members or sid in labels):
                checker.add(path, "labels each session of member_session_ids at most once")
            label = _label(checker, value, path)
            if sid is not None and label is not None:
                labels[sid] = label
    if checker.problems:
        raise invalid_request(checker)
    if str(creator.id) not in members:
        raise not_found()  # the creating session must be a member
    assert route is not None  # required, so its absence was a problem above
    normalised = {**common, "route": route, "member_session_ids": sorted(members),
                  "member_labels": dict(sorted(labels.items()))}
    return [Binding(sid, creator.client_app_id, route) for sid in members], labels, route, normalised


def parse_v2(body: dict[str, Any], creator: AgentSession) -> Parsed:
    checker = Checker()
    mixed = [k for k in ("route", "member_session_ids", "member_labels") if k in body]
    for key in mixed:
        checker.add(key, "is a v1 field; v2 creation takes members only")
    checker.obj({k: v for k, v in body.items() if k not in mixed}, "", required=V2_FIELDS)
    common = _common(checker, body)
    members: list[dict[str, Any]] = []
    if "members" in body and _member_list(checker, body["members"], "members"):
        seen: set[str | None] = set()
        for i, raw in enumerate(body["members"]):
            path = join("members", i)
            if checker.obj(raw, path, required=("session_id", "client_app_id", "route"),
                           optional=("label",)) is None:
                continue
            member = {}
            if "session_id" in raw:
                sid = uuid_value(checker, raw["session_id"], join(path, "session_id"))
                if sid is not None and sid in seen:
                    checker.add(join(path, "session_id"), "a session may occur only once")
                member["session_id"] = sid
                seen.add(sid)
            if "client_app_id" in raw:
                member["client_app_id"] = checker.string(raw["client_app_id"], join(path, "client_app_id"),
                                                         pattern=RESOURCE_KEY)
            if "route" in raw:
                member["route"] = _route(checker, raw["route"], join(path, "route"))
            if "label" in raw:
                member["label"] = _label(checker, raw["label"], join(path, "label"))
            members.append(member)
    if checker.problems:
        raise invalid_request(checker)
    # The writer is the member of the creating bearer's session and app, wherever it stands.
    writer = next((m for m in members if m["session_id"] == str(creator.id)
                   and m["client_app_id"] == creator.client_app_id), None)
    if writer is None:
        raise not_found()
    bindings = [Binding(m["session_id"], m["client_app_id"], m["route"]) for m in members]
    labels = {m["session_id"]: m["label"] for m in members if "label" in m}
    normalised = {"schema": CREATE_V2, **common,
                  "members": sorted(members, key=lambda m: m["session_id"])}
    return bindings, labels, writer["route"], normalised


def create(db: Session, creator: AgentSession, body: dict[str, Any], available: Availability) -> dict[str, Any]:
    """v2 when the body names a schema (which must be the v2 schema); otherwise v1. A first
    creation and an identical retry answer alike."""
    version = 2 if "schema" in body else 1
    if version == 2:
        if body["schema"] != CREATE_V2:
            raise invalid_request(Checker.single("schema", f"must be '{CREATE_V2}' (or absent for v1)"))
        if not available.cross_binding:
            raise ApiError("conversation_audit_cross_binding_unavailable")
        bindings, labels, route_key, normalised = parse_v2(body, creator)
    else:
        bindings, labels, route_key, normalised = parse_v1(body, creator)
    client_archive_id = normalised["client_archive_id"]
    key = f"{creator.id}:{route_key}:{client_archive_id}"
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 57))"), {"k": key})
    input_hash = sha256_json({"version": version, "input": normalised})
    # Archives frozen before inputs were normalised hold the hash of the body as sent.
    frozen_as_sent = sha256_json({"version": version, "input": body})
    existing = db.execute(text(f"""
        SELECT {HEADER_COLUMNS}, input_hash FROM bz_agent_conversation_archives
        WHERE creator_session_id = :creator AND route_key = :route AND client_archive_id = :archive
        FOR UPDATE"""), {"creator": creator.id, "route": route_key,  # noqa: S608 - constant identifiers, bound values
                         "archive": client_archive_id}).first()
    if existing is not None and existing.input_hash not in (input_hash, frozen_as_sent):
        raise conflict("This archive was created with a different frozen input.")
    # Checked in session order, so the same input always fails on the same member.
    sessions = lock_and_check(db, sorted(bindings, key=lambda b: b.session_id))
    if existing is not None:
        return reply(existing)
    archive_id = uuid.uuid4()
    now = utc_now()
    single = len(bindings) == 1
    db.execute(text(f"""
        INSERT INTO bz_agent_conversation_archives
            (id, client_archive_id, client_conversation_id, creator_session_id, client_app_id,
             route_key, input_hash, state, member_count, confirmed_count, created_at, updated_at
             {", membership_version" if available.cross_binding else ""})
        VALUES (:id, :archive, :conversation, :creator, :app, :route, :hash, :state, :members, 1,
                :now, :now {", :version" if available.cross_binding else ""})"""),  # noqa: S608 - constant identifiers, bound values
        {"id": archive_id, "archive": client_archive_id,
         "conversation": normalised["client_conversation_id"], "creator": creator.id,
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
                    :obo, :identity{binding_vals})"""), values)  # noqa: S608 - constant identifiers, bound values
    return reply(load_header(db, archive_id))


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


_HEADER_SQL = (f"SELECT {HEADER_COLUMNS}, creator_session_id, running_turn_id, text_bytes "  # noqa: S608 - constant identifiers, bound values
               "FROM bz_agent_conversation_archives WHERE id = %(id)s")


def load_header(db: Session, archive_id: Any, *, lock: bool = False) -> Any:
    rows = pipelined(db, (_HEADER_SQL + (" FOR UPDATE" if lock else ""), {"id": archive_id}))[0]
    return rows[0] if rows else None


def parse_archive_id(value: str) -> uuid.UUID:
    """An archive named in a path. A segment of another shape names no endpoint at all (404
    `not_found`); one of the right shape that is no UUID is a 400."""
    if not ARCHIVE_REF.fullmatch(value):
        raise unknown_endpoint()
    checker = Checker()
    if uuid_value(checker, value, "conversation_id") is None:
        raise invalid_request(checker)
    return uuid.UUID(value)


def unknown_endpoint() -> ApiError:
    return ApiError("not_found")


def _members_sql(available: Availability) -> str:
    binding = ", client_app_id, route_key" if available.cross_binding else ", NULL AS client_app_id, NULL AS route_key"
    return f"""SELECT session_id, confirmed_at, identity_hash{binding}
        FROM bz_agent_conversation_members WHERE archive_id = %(id)s ORDER BY position"""  # noqa: S608 - constant identifiers, bound values


def group_bindings(header: Any, members: list[Any]) -> list[Binding]:
    return [Binding(str(m.session_id), m.client_app_id or header.client_app_id,
                    m.route_key or header.route_key, m.identity_hash) for m in members]


@dataclass(frozen=True)
class CheckedArchive:
    """A locked archive whose every member passed revalidation under its share locks. Only
    `LockedArchive.check_bindings` makes one, and every write of an archive takes one: a write
    that skipped the check does not type-check."""

    header: Any
    members: list[Any]
    looked_up: list[Any]  # the rows of the lookup sent with the locks (none without one)


@dataclass(frozen=True)
class LockedArchive:
    """An archive locked for a member (FOR UPDATE, until commit) with its members, and the rows
    of its members' sessions, client apps and routes read under share locks. The header and
    members may be read for the checks that answer first (who may write, the archive's state);
    a write needs `check_bindings()`."""

    header: Any
    members: list[Any]
    share_locked: list[list[Any]]  # sessions, client apps, routes (members.locks_for_archive)
    looked_up: list[Any]

    def check_bindings(self) -> CheckedArchive:
        """Revalidate every member against the rows read under the locks, or raise 403."""
        check_locked(group_bindings(self.header, self.members), self.share_locked)
        return CheckedArchive(self.header, self.members, self.looked_up)


def locked_archive_for_member(db: Session, session: AgentSession, archive_id: uuid.UUID,
                              available: Availability, *,
                              lookup: tuple[str, dict[str, Any]] | None = None) -> LockedArchive:
    """The archive (locked) and its members, when this session is one of them, else 404; in the
    same round trip every member's session, client app and route is share-locked and read, and
    then `lookup` (a statement of the caller's, sent last) is run: its rows are `looked_up`."""
    locks = locks_for_archive(archive_id, available.cross_binding)
    headers, members, *found = pipelined(
        db, (_HEADER_SQL + " FOR UPDATE", {"id": archive_id}),
        (_members_sql(available), {"id": archive_id}), *locks, *([lookup] if lookup else []))
    share_locked, looked_up = found[:len(locks)], found[len(locks):]
    if not headers or str(session.id) not in {str(m.session_id) for m in members}:
        raise not_found()
    return LockedArchive(headers[0], members, share_locked, looked_up[0] if looked_up else [])


def confirm(db: Session, session: AgentSession, archive_ref: str, available: Availability) -> dict[str, Any]:
    archive = locked_archive_for_member(db, session, parse_archive_id(archive_ref), available)
    return reply(_confirm_member(db, archive.check_bindings(), session))


def _confirm_member(db: Session, archive: CheckedArchive, session: AgentSession) -> Any:
    """The header after `session` confirmed (once; a repeat changes nothing)."""
    header = archive.header
    mine = next(m for m in archive.members if str(m.session_id) == str(session.id))
    if mine.confirmed_at is not None:
        return header
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
    return load_header(db, header.id)
