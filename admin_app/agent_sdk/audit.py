"""Conversation audit: v1 and v2 creation bodies, batching under the limits, and the flat header,
ACK and capabilities answers checked as the official SDK checks them (every audit body carries
`schema`, never `schema_version`)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import contract as c
from .check import Reader
from .errors import RequestRefused
from .http import encode
from .models import ArchiveHeader, AuditAck, AuditCapabilities
from .runtime import client_id, client_text, route_key

HEADER_FIELDS = ("client_archive_id", "client_conversation_id", "message_count", "turn_count",
                 "last_turn_status", "created_at", "updated_at")


@dataclass(frozen=True)
class Member:
    """One member of a v2 archive: a session bound to one app and one route."""
    session_id: str
    client_app_id: str
    route: str
    label: str | None = None

    def wire(self) -> dict:
        body = {"session_id": self.session_id, "client_app_id": self.client_app_id, "route": self.route}
        if self.label is not None:
            body["label"] = self.label
        return body


def _uuid(value, field: str) -> str:
    if not isinstance(value, str) or not c.UUID.fullmatch(value):
        raise RequestRefused(field, "must be a UUID")
    return value


def _label(value, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > c.ARCHIVE_LABEL_MAX or c.CONTROL.search(value):
        raise RequestRefused(field, f"must be non-blank text of at most {c.ARCHIVE_LABEL_MAX} characters")
    return value


def _common(client_archive_id: str, client_conversation_id: str) -> dict:
    return {"client_archive_id": _uuid(client_archive_id, "client_archive_id"),
            "client_conversation_id": client_id(client_conversation_id, "client_conversation_id")}


def create_v1_body(*, client_archive_id: str, client_conversation_id: str, route: str,
                   member_session_ids: list[str], member_labels: dict[str, str] | None) -> dict:
    members = [_uuid(m, f"member_session_ids[{i}]") for i, m in enumerate(member_session_ids)]
    if not 1 <= len(members) <= c.ARCHIVE_MEMBERS_MAX or len({m.lower() for m in members}) != len(members):
        raise RequestRefused("member_session_ids", f"must be 1-{c.ARCHIVE_MEMBERS_MAX} unique sessions")
    body = {**_common(client_archive_id, client_conversation_id), "route": route_key(route),
            "member_session_ids": members}
    if member_labels:
        for key, label in member_labels.items():
            if key not in members:
                raise RequestRefused("member_labels", "keys must be members")
            _label(label, f"member_labels.{key}")
        body["member_labels"] = dict(member_labels)
    return body


def create_v2_body(*, client_archive_id: str, client_conversation_id: str, members: list[Member]) -> dict:
    if not 1 <= len(members) <= c.ARCHIVE_MEMBERS_MAX:
        raise RequestRefused("members", f"must have 1-{c.ARCHIVE_MEMBERS_MAX} entries")
    seen = set()
    for i, m in enumerate(members):
        _uuid(m.session_id, f"members[{i}].session_id")
        if not c.ROUTE_KEY.fullmatch(m.client_app_id):
            raise RequestRefused(f"members[{i}].client_app_id", "must be an app id")
        route_key(m.route, f"members[{i}].route")
        if m.label is not None:
            _label(m.label, f"members[{i}].label")
        if m.session_id.lower() in seen:
            raise RequestRefused(f"members[{i}].session_id", "a session may be a member once")
        seen.add(m.session_id.lower())
    return {"schema": c.SCHEMA["audit_create_v2"], **_common(client_archive_id, client_conversation_id),
            "members": [m.wire() for m in members]}


def check_event(event, i: int) -> dict:
    field = f"events[{i}]"
    if not isinstance(event, dict):
        raise RequestRefused(field, "must be an object")
    kind = event.get("kind")
    if kind not in c.EVENT_KINDS:
        raise RequestRefused(f"{field}.kind", "is not an event kind")
    allowed = {"event_id", "sequence", "client_turn_id", "kind", *c.EVENT_KINDS[kind]}
    if set(event) != allowed:
        raise RequestRefused(field, f"a {kind} event has exactly {', '.join(sorted(allowed))}")
    client_id(event["event_id"], f"{field}.event_id")
    client_id(event["client_turn_id"], f"{field}.client_turn_id")
    seq = event["sequence"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise RequestRefused(f"{field}.sequence", "must be an integer of at least 1")
    if "content" in event:
        client_text(event["content"], f"{field}.content", c.CONTENT_MAX)
    if kind == "run_link":
        _uuid(event["run_id"], f"{field}.run_id")
        _uuid(event["member_session_id"], f"{field}.member_session_id")
    if kind == "turn_end" and event["status"] not in c.RUN_STATUSES:
        raise RequestRefused(f"{field}.status", "must be completed, failed or cancelled")
    return event


def batches(events: list[dict]) -> Iterator[list[dict]]:
    """Ordered batches of at most 50 events and 192 KiB of JSON (the whole `{"events": [...]}`)."""
    empty = len(encode({"events": []}))
    batch: list[dict] = []
    size = empty
    for i, event in enumerate(events):
        check_event(event, i)
        one = len(encode(event))
        if empty + one > c.BATCH_JSON_MAX_BYTES:
            raise RequestRefused(f"events[{i}]", "does not fit in one batch")
        if batch and (len(batch) == c.BATCH_EVENTS_MAX or size + 1 + one > c.BATCH_JSON_MAX_BYTES):
            yield batch
            batch, size = [], empty
        size += one + (1 if batch else 0)  # the comma between events
        batch.append(event)
    if batch:
        yield batch


# ---------------------------------------------------------------- answers

def parse_capabilities(data: dict, endpoint: str) -> AuditCapabilities:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["audit_capabilities"], keys=("schema",))
    return AuditCapabilities(r.boolean(data, "cross_binding_members"),
                             r.string(data, "member_bindings", optional=True))


def parse_header(data: dict, endpoint: str, member_count: int | None = None,
                 conversation_id: str | None = None) -> ArchiveHeader:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["audit"], keys=("schema",))
    count = r.integer(data, "member_count", lo=1, hi=c.ARCHIVE_MEMBERS_MAX)
    if member_count is not None and count != member_count:
        r.fail("member_count", f"must be {member_count}, the members sent")
    confirmed = r.integer(data, "confirmed_count", lo=1, hi=count)
    state = r.string(data, "state", choices=c.ARCHIVE_STATES)
    if (state == "ready") != (confirmed == count):
        r.fail("state", "must be ready exactly when every member confirmed")
    got = r.string(data, "conversation_id", pattern=c.UUID)
    if conversation_id is not None and got.lower() != conversation_id.lower():
        r.fail("conversation_id", f"must echo {conversation_id!r}")
    return ArchiveHeader(conversation_id=got, state=state, member_count=count, confirmed_count=confirmed,
                         last_sequence=r.integer(data, "last_sequence", lo=0),
                         client_app_id=r.string(data, "client_app_id", optional=True, pattern=c.ROUTE_KEY),
                         route_key=r.string(data, "route_key", optional=True, pattern=c.ROUTE_KEY),
                         extra={k: data[k] for k in HEADER_FIELDS if k in data})


def parse_ack(data: dict, endpoint: str, conversation_id: str, last_sent: int) -> AuditAck:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["audit_ack"], keys=("schema",))
    got = r.string(data, "conversation_id", pattern=c.UUID)
    if got.lower() != conversation_id.lower():
        r.fail("conversation_id", f"must echo {conversation_id!r}")
    return AuditAck(got, r.integer(data, "last_sequence", lo=last_sent))
