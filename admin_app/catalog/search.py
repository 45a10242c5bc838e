"""Deterministic lexical ranking of a workspace's tools.

Every authorized tool is a candidate: zero-score tools are ranked after the others, never dropped,
so an inventory question can still surface an authorized order tool. Ties break by name, so the
same query over the same catalog always gives the same order. The hub has no semantic retrieval;
this lexical order is what a client gets whenever semantic retrieval would be unavailable too.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from typing import TYPE_CHECKING


if TYPE_CHECKING:  # for annotations only: a projection builds its index from this module
    from .projection import Projection, Visible

TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
# Where a query word is found weighs how much it says about the tool.
WEIGHTS = (("name", 5), ("scope", 3), ("description", 2), ("guidance", 1))


def tokens(text: str) -> list[str]:
    return [t.lower() for t in TOKEN.findall(text)]


def _text(visible: Visible, field: str) -> str:
    tool = visible.tool
    return {"name": tool.name, "scope": tool.scope, "description": tool.description.text,
            "guidance": tool.guidance.text}[field]


class Index:
    """Per field, every (word, tool position) of a projection in word order: the tools whose words
    start with a query word are one contiguous run, found by bisection instead of a scan."""

    def __init__(self, visible: list[Visible]):
        self.visible = visible
        self.fields = {field: sorted((w, i) for i, v in enumerate(visible)
                                     for w in set(tokens(_text(v, field))))
                       for field, _ in WEIGHTS}

    def matches(self, field: str, word: str) -> set[int]:
        """Tools with `word` in this field, or for words of 4 or more characters, a word
        starting with it."""
        entries = self.fields[field]
        end = word + "\U0010ffff" if len(word) >= 4 else word
        lo = bisect_left(entries, (word, -1))
        hi = bisect_left(entries, (end, len(self.visible)))
        return {i for _, i in entries[lo:hi]}


def rank(projection: Projection, query: str) -> list[Visible]:
    index: Index = projection.search_index
    scores = [0] * len(index.visible)
    for word in dict.fromkeys(tokens(query)[:64]):  # each distinct word once, in query order
        for field, weight in WEIGHTS:
            for i in index.matches(field, word):
                scores[i] += weight
    # The projection is in name order, and the sort is stable: ties keep it.
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [index.visible[i] for i in order]


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
