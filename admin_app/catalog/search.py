"""Deterministic lexical ranking of a workspace's tools.

Every authorized tool is a candidate: zero-score tools are ranked after the others, never dropped,
so an inventory question can still surface an authorized order tool. Ties break by name, so the
same query over the same catalog always gives the same order. The hub has no semantic retrieval;
this lexical order is what a client gets whenever semantic retrieval would be unavailable too.
"""
from __future__ import annotations

import re

from .projection import Projection, Visible

TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
SEARCH_LIMIT = 12
# Where a query word is found weighs how much it says about the tool.
WEIGHTS = (("name", 5), ("scope", 3), ("description", 2), ("guidance", 1))


def tokens(text: str) -> list[str]:
    return [t.lower() for t in TOKEN.findall(text)]


def _fields(visible: Visible) -> dict[str, set[str]]:
    tool = visible.tool
    return {
        "name": set(tokens(tool.name)),
        "scope": set(tokens(tool.scope)),
        "description": set(tokens(tool.description.text)),
        "guidance": set(tokens(tool.guidance.text)),
    }


def score(visible: Visible, query_tokens: list[str]) -> int:
    fields = _fields(visible)
    total = 0
    for word in dict.fromkeys(query_tokens):  # each distinct word once, in query order
        for field, weight in WEIGHTS:
            if word in fields[field] or (len(word) >= 4 and any(t.startswith(word) for t in fields[field])):
                total += weight
    return total


def rank(projection: Projection, query: str) -> list[Visible]:
    words = tokens(query)[:64]
    scored = [(score(v, words), v.tool.name, v) for v in projection.tools.values()]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [v for _, _, v in scored]


def discovery(returned: int, authorized_total: int, limit: int) -> dict:
    """The optional `discovery` block, with exactly the spec's meaning: match totals unknown,
    `truncated`/`has_more` only about authorized candidates left out by the limit."""
    truncated = authorized_total > returned
    return {
        "mode": "ranked_candidates",
        "scope": "current_authorization",
        "returned_count": returned,
        "authorized_total": authorized_total,
        "matched_total": None,
        "matched_total_exact": False,
        "limit": limit,
        "truncated": truncated,
        "has_more": truncated,
        "truncation_scope": "authorized_catalog",
        "pagination": "unsupported",
    }
