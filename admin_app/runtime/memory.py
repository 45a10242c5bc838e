"""memory.recent: the thread's visible messages, bounded, with execution summaries recognised.

An assistant (outbound) message whose content is a `bailing.authorization-execution-summary.v1`
object is projected again into an `authorization_execution_summary` entry holding only the allowed
fact fields, marked `source: agent_client`, `trust: reference_only`: the client wrote it, so it
proves nothing. A user message carrying the same marker stays plain text. Limits drop whole
invocation records and say how many; when not even the shell fits, an explicit omission notice
stands in its place, never a cut JSON text.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import canonical_json, iso
from .models import Message

SUMMARY_SCHEMA = "bailing.authorization-execution-summary.v1"
INVOCATION_STATES = frozenset({"executed", "business_rejected", "awaiting_approval", "denied",
                               "rejected_before_dispatch", "reconciliation_required", "in_progress"})


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def parse_summary(content: str) -> dict | None:
    """The allowed facts of an execution summary, or None when the content is not one."""
    text = content.strip()
    if not text.startswith("{"):
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or raw.get("schema") != SUMMARY_SCHEMA:
        return None
    listed = raw.get("invocations")
    listed = listed if isinstance(listed, list) else []
    records = []
    for item in listed:
        if not isinstance(item, dict):
            continue
        inv, tool, state = item.get("invocation_id"), item.get("tool"), item.get("state")
        if not (isinstance(inv, str) and 0 < len(inv) <= limits.MEMORY_ID_MAX and isinstance(tool, str)
                and 0 < len(tool) <= limits.MEMORY_ID_MAX and isinstance(state, str)
                and state in INVOCATION_STATES):
            continue
        record = {"invocation_id": inv, "tool": tool, "state": state}
        if item.get("next_action") == "inspect_original":
            record["next_action"] = "inspect_original"
        records.append(record)
    total = _count(raw.get("total"))
    omitted = _count(raw.get("omitted")) or 0
    return {"invocations": records,
            "total": total if total is not None and total >= len(records) else len(records) + omitted,
            "omitted": omitted + len(listed) - len(records)}


def _summary_entry(message: Message, facts: dict, room: int) -> dict:
    """The largest entry of whole records that fits `room` characters, or an omission notice."""
    records = list(facts["invocations"])
    while True:
        entry = {
            "role": "assistant", "message_id": message.message_id, "created_at": iso(message.created_at),
            "kind": "authorization_execution_summary", "source": "agent_client",
            "trust": "reference_only", "schema": SUMMARY_SCHEMA,
            "invocations": records, "total": facts["total"],
            "omitted": facts["omitted"] + len(facts["invocations"]) - len(records),
        }
        if len(canonical_json(entry)) <= room:
            return entry
        if not records:
            return {"role": "assistant", "message_id": message.message_id,
                    "created_at": iso(message.created_at), "kind": "authorization_execution_summary",
                    "source": "agent_client", "trust": "reference_only", "omitted_notice": True,
                    "notice": "An execution summary was omitted by memory limits; inspect the "
                              "original invocations.",
                    "total": facts["total"]}
        records.pop()


def _entry_size(entry: dict) -> int:
    if entry.get("omitted_notice"):
        return 0  # a fixed server notice: it must appear however small the limits are
    if "content" in entry:
        return len(entry["content"])
    return len(canonical_json(entry))


def recent(db: Session, thread_id: int | None, settings: dict) -> dict:
    """Prior visible messages, oldest first, within the route's memory limits. Newest messages
    are kept first; once one does not fit the budget, it and every older one are omitted."""
    limit = settings["recent_messages"]
    budget = settings["recent_budget_chars"]
    per_message = settings["per_message_chars"]
    messages: list[Message] = []
    if thread_id is not None and limit > 0:
        messages = list(db.scalars(
            select(Message).where(Message.thread_id == thread_id)
            .order_by(Message.id.desc()).limit(limit)))
    entries: list[dict] = []
    used = 0
    for message in messages:
        facts = parse_summary(message.content) if message.role == "assistant" else None
        if facts is not None:
            entry = _summary_entry(message, facts, max(0, min(per_message, budget - used)))
        else:
            text = message.content[:per_message]
            entry = {"role": message.role, "message_id": message.message_id, "content": text,
                     "created_at": iso(message.created_at), "truncated": len(text) < len(message.content)}
        size = _entry_size(entry)
        if used + size > budget:
            break
        used += size
        entries.append(entry)
    omitted = len(messages) - len(entries)
    entries.reverse()
    # The hub keeps no conversation summaries: `summary` is always null.
    return {"summary": None, "recent": entries, "omitted_messages": omitted,
            "limits": {"recent_messages": limit, "recent_budget_chars": budget,
                       "per_message_chars": per_message}}


def refs(thread_id: int, memory: dict) -> list[dict]:
    """`context.memory_refs`: where the memory came from. Without summaries nothing is folded
    away, so `summary_upto_id` is 0."""
    return [{"thread_id": thread_id, "summary_upto_id": 0, "prior_messages": len(memory["recent"])}]
