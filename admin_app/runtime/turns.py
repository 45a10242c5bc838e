"""Turns (bailing.agent-turn-context.v1) and their completion.

A turn is keyed by (session, route, client_conversation_id, client_turn_id). Its whole validated
request is hashed; the first request freezes a run with the context the hub answered, and an
identical retry gets that same run back while any change under the same key is a 409. Turns of
one thread are serialised on the thread row, so two clients sending the same turn at once get
one run. Prior memory is read before the current visible user message is appended.
"""
from __future__ import annotations

import re
import uuid

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from ..canonical import sha256_json, utc_now, iso
from ..catalog.projection import project
from ..catalog.search import rank
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession, Route
from ..validation import CONTROL_CHARS, Checker, join, utf16_len
from . import knowledge, memory, profile
from .models import Message, Run, Thread

USER_INPUT_MAX = 64000  # UTF-16 code units, as JavaScript clients count
CONTENT_MAX = 64000
ID_MAX = 191
MAX_RENDERERS = 20
RENDERER = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TASK_BINDING_SCHEMA = "bailing.agent-task-binding.v1"
TURN_FIELDS = ("client_conversation_id", "client_turn_id", "user_message_id", "user_input")
TURN_OPTIONAL = ("page_context", "renderers", "knowledge_delivery", "task_binding")
COMPLETION_STATUSES = ("completed", "failed", "cancelled")
USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens", "tool_calls")


def _identifier(checker: Checker, body: dict, key: str) -> None:
    if key in body:
        checker.string(body[key], key, min_len=1, max_len=ID_MAX, single_line=True)


def _text(checker: Checker, value, path: str, maximum: int, *, allow_empty: bool) -> None:
    if not isinstance(value, str):
        checker.add(path, "must be a string")
    elif not allow_empty and value == "":
        checker.add(path, "must not be empty")
    elif utf16_len(value) > maximum:
        checker.add(path, f"must be at most {maximum} characters (UTF-16 code units)")


def validate_turn(body: dict, session: AgentSession) -> None:
    checker = Checker()
    checker.obj(body, "", required=TURN_FIELDS, optional=TURN_OPTIONAL)
    for key in TURN_FIELDS[:3]:
        _identifier(checker, body, key)
    if "user_input" in body:
        _text(checker, body["user_input"], "user_input", USER_INPUT_MAX, allow_empty=False)
    if "page_context" in body:
        page = checker.obj(body["page_context"], "page_context", optional=("url", "title"))
        if page is not None:
            if "url" in page:
                checker.string(page["url"], "page_context.url", max_len=2048, single_line=True)
            if "title" in page:
                checker.string(page["title"], "page_context.title", max_len=512, single_line=True)
    if "renderers" in body:
        checker.string_list(body["renderers"], "renderers", max_items=MAX_RENDERERS,
                            item_pattern=RENDERER, item_max_len=64)
    if "knowledge_delivery" in body and body["knowledge_delivery"] != "on_demand":
        checker.add("knowledge_delivery", "must be 'on_demand' when given")
    if "task_binding" in body:
        binding = checker.obj(body["task_binding"], "task_binding",
                              required=("schema", "task_id", "scope_hash"))
        if binding is not None:
            if "schema" in binding and binding["schema"] != TASK_BINDING_SCHEMA:
                checker.add("task_binding.schema", f"must be '{TASK_BINDING_SCHEMA}'")
            if "task_id" in binding:
                checker.string(binding["task_id"], "task_binding.task_id", min_len=1, max_len=ID_MAX,
                               single_line=True)
            if "scope_hash" in binding:
                checker.string(binding["scope_hash"], "task_binding.scope_hash", pattern=HEX64,
                               pattern_text="64 lowercase hex digits")
    elif session.task_enrolled:
        checker.add("task_binding", "is required for a task-enrolled session")
    if checker.problems:
        raise invalid_request(checker)


def _thread(db: Session, session: AgentSession, route_key: str, conversation: str) -> Thread:
    """The thread row, created if needed, locked until commit: turns of one thread queue here."""
    db.execute(insert(Thread).values(session_id=session.id, route_key=route_key,
                                     client_conversation_id=conversation)
               .on_conflict_do_nothing(index_elements=["session_id", "route_key", "client_conversation_id"]))
    return db.scalar(select(Thread).where(
        Thread.session_id == session.id, Thread.route_key == route_key,
        Thread.client_conversation_id == conversation).with_for_update())


def _turn_conflict(message: str) -> ApiError:
    return ApiError(409, "turn_conflict", message)


def prepare_turn(db: Session, session: AgentSession, route: Route, body: dict) -> dict:
    validate_turn(body, session)
    request_hash = sha256_json({"route": route.route_key, "request": body})
    thread = _thread(db, session, route.route_key, body["client_conversation_id"])
    existing = db.scalar(select(Run).where(Run.thread_id == thread.id,
                                           Run.client_turn_id == body["client_turn_id"]))
    if existing is not None:
        if existing.request_hash != request_hash:
            raise _turn_conflict("This turn was already prepared with a different request.")
        return existing.context
    used = db.scalar(select(Message.id).where(Message.thread_id == thread.id, Message.role == "user",
                                              Message.message_id == body["user_message_id"]))
    if used is not None:
        raise _turn_conflict("user_message_id was already used by another turn of this conversation.")

    projection = project(db, route, session)
    prof = profile.build_profile(db, route)
    recent = memory.recent(db, thread.id, prof["memory"])  # read before appending this turn
    delivery = body.get("knowledge_delivery", "inline")
    run_id = uuid.uuid4()
    active = rank(projection, body["user_input"])[:profile.ACTIVE_TOOL_LIMIT]
    context = {
        "schema_version": "bailing.agent-turn-context.v1",
        "run_id": str(run_id),
        "route": route.route_key,
        "client_conversation_id": body["client_conversation_id"],
        "client_turn_id": body["client_turn_id"],
        "user_message_id": body["user_message_id"],
        "profile_revision": prof["revision"],
        "capability_revision": projection.revision,
        "context": {
            "instructions": prof["instructions"],
            "memory": recent,
            "knowledge_delivery": delivery,
            "knowledge": _knowledge(db, route, prof["knowledge"], body["user_input"], delivery),
            "governance": prof["governance"],
            "tools": [v.projection() for v in active],
            "capabilities": profile.capabilities_summary(projection),
        },
    }
    if "task_binding" in body:
        context["context"]["task_binding"] = body["task_binding"]
    if "renderers" in body:
        context["context"]["renderers"] = body["renderers"]
    if "page_context" in body:
        context["context"]["page_context"] = body["page_context"]
    db.add(Run(id=run_id, thread_id=thread.id, session_id=session.id,
               client_app_id=session.client_app_id, route_key=route.route_key,
               client_conversation_id=body["client_conversation_id"],
               client_turn_id=body["client_turn_id"], user_message_id=body["user_message_id"],
               request_hash=request_hash, context=context, profile_revision=prof["revision"],
               capability_revision=projection.revision, task_binding=body.get("task_binding")))
    db.flush()
    db.add(Message(thread_id=thread.id, run_id=run_id, role="user",
                   message_id=body["user_message_id"], content=body["user_input"]))
    db.flush()
    return context


def _knowledge(db: Session, route: Route, settings: dict, query: str, delivery: str) -> dict:
    if not settings["enabled"]:
        return {"trust": "reference_only", "enabled": False, "items": []}
    rows = knowledge.search(db, route.route_key, query, settings["top_k"], settings["max_docs"])
    build = knowledge.hint_item if delivery == "on_demand" else knowledge.inline_item
    return {"trust": "reference_only", "enabled": True, "items": [build(r) for r in rows]}


def find_run(db: Session, session: AgentSession, run_id: str, *, lock: bool = False) -> Run:
    """A run of this session, or 404 whether it is missing or someone else's."""
    try:
        rid = uuid.UUID(run_id)
    except (ValueError, TypeError, AttributeError):
        raise ApiError(404, "run_not_found", "No such run for this session.") from None
    query = select(Run).where(Run.id == rid, Run.session_id == session.id)
    run = db.scalar(query.with_for_update() if lock else query)
    if run is None:
        raise ApiError(404, "run_not_found", "No such run for this session.")
    return run


def validate_completion(body: dict) -> None:
    checker = Checker()
    checker.obj(body, "", required=("assistant_message_id", "status", "content"),
                optional=("model", "runtime", "usage"))
    _identifier(checker, body, "assistant_message_id")
    if "status" in body and body["status"] not in COMPLETION_STATUSES:
        checker.add("status", "must be one of " + ", ".join(COMPLETION_STATUSES))
    if "content" in body:
        _text(checker, body["content"], "content", CONTENT_MAX, allow_empty=True)
    for key in ("model", "runtime"):
        if key in body:
            checker.string(body[key], key, min_len=1, max_len=191)
            if isinstance(body[key], str) and CONTROL_CHARS.search(body[key]):
                checker.add(key, "must not contain control characters")
    if "usage" in body:
        usage = checker.obj(body["usage"], "usage", optional=USAGE_FIELDS)
        if usage is not None:
            for key in USAGE_FIELDS:
                if key in usage:
                    checker.integer(usage[key], join("usage", key), minimum=0, maximum=2**53 - 1)
    if checker.problems:
        raise invalid_request(checker)


def complete_run(db: Session, session: AgentSession, run: Run, body: dict) -> dict:
    validate_completion(body)
    fingerprint = sha256_json(body)
    if run.completion_hash is not None:
        if run.completion_hash != fingerprint:
            raise ApiError(409, "completion_conflict", "This run was already completed differently.")
        return _completion_view(run)
    # Runs of one thread complete one at a time, so a message id is checked and taken atomically.
    db.execute(select(Thread.id).where(Thread.id == run.thread_id).with_for_update())
    clash = db.scalar(select(Message.id).where(Message.thread_id == run.thread_id,
                                               Message.role == "assistant",
                                               Message.message_id == body["assistant_message_id"]))
    if clash is not None:
        raise ApiError(409, "completion_conflict",
                       "assistant_message_id was already used in this conversation.")
    run.status = body["status"]
    run.completion = body
    run.completion_hash = fingerprint
    run.completed_at = utc_now()
    if body["content"]:
        db.add(Message(thread_id=run.thread_id, run_id=run.id, role="assistant",
                       message_id=body["assistant_message_id"], content=body["content"]))
    db.flush()
    return _completion_view(run)


def _completion_view(run: Run) -> dict:
    return {"schema": "bailing.agent-run-completion.v1", "run_id": str(run.id),
            "status": run.status, "assistant_message_id": run.completion["assistant_message_id"],
            "completed_at": iso(run.completed_at)}
