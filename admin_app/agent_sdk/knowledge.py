"""Knowledge on demand (our Runtime spec): capabilities, search hints and bounded reads. Every
item is reference material, so each must say `trust: "reference_only"`."""
from __future__ import annotations

from . import contract as c
from .check import Reader, join
from .models import KnowledgeCapabilities, KnowledgeHint, KnowledgePiece

TRUST = "reference_only"


def parse_capabilities(data: dict, endpoint: str, route: str) -> KnowledgeCapabilities:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["knowledge_capabilities"])
    r.string(data, "route", equals=route)
    r.string(data, "trust", equals=TRUST)
    modes = r.array(data, "delivery_modes", min_items=1)
    for i, mode in enumerate(modes):
        r.string_at(mode, join("delivery_modes", i), choices=c.KNOWLEDGE_DELIVERY)
    search = r.object(data, "search")
    most = r.integer(search, "max_results", "search", lo=1, hi=c.KNOWLEDGE_RESULTS_MAX)
    return KnowledgeCapabilities(
        enabled=r.boolean(data, "enabled"), documents=r.integer(data, "documents", lo=0),
        delivery_modes=tuple(modes),
        max_query_chars=r.integer(search, "max_query_chars", "search", lo=1, hi=c.KNOWLEDGE_QUERY_MAX),
        max_results=most, default_results=r.integer(search, "default_results", "search", lo=1, hi=most),
        hint_max_chars=r.integer(search, "hint_max_chars", "search", lo=1, hi=c.KNOWLEDGE_HINT_MAX),
        read_max_chars=r.integer(r.object(data, "read"), "max_chars", "read", lo=1, hi=c.KNOWLEDGE_READ_MAX),
    )


def parse_hint(r: Reader, value, base: str) -> KnowledgeHint:
    d = r.object_at(value, base)
    r.string(d, "trust", base, equals=TRUST)
    hint = KnowledgeHint(
        chunk_id=r.integer(d, "chunk_id", base, lo=1), document=r.string(d, "document", base),
        title=r.string(d, "title", base), heading=r.string(d, "heading", base, nullable=True),
        hint=r.string(d, "hint", base, max_len=c.KNOWLEDGE_HINT_MAX),
        hint_truncated=r.boolean(d, "hint_truncated", base), content_chars=r.integer(d, "content_chars", base, lo=0))
    if hint.hint_truncated != (len(hint.hint) < hint.content_chars):
        r.fail(join(base, "hint_truncated"), "must say whether the hint is shorter than the content")
    return hint


def parse_search(data: dict, endpoint: str, route: str, limit: int | None) -> list[KnowledgeHint]:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["knowledge_search"])
    r.string(data, "route", equals=route)
    r.string(data, "trust", equals=TRUST)
    effective = r.integer(data, "limit", lo=1, hi=c.KNOWLEDGE_RESULTS_MAX,
                          choices=(limit,) if limit is not None else None)
    results = r.array(data, "results", max_items=effective)
    return [parse_hint(r, item, join("results", i)) for i, item in enumerate(results)]


def parse_read(data: dict, endpoint: str, route: str, chunk_id: int, offset: int) -> KnowledgePiece:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["knowledge_read"])
    r.string(data, "route", equals=route)
    r.string(data, "trust", equals=TRUST)
    most = r.integer(data, "max_chars", lo=1, hi=c.KNOWLEDGE_READ_MAX)
    piece = KnowledgePiece(
        chunk_id=r.integer(data, "chunk_id", choices=(chunk_id,)), document=r.string(data, "document"),
        title=r.string(data, "title"), heading=r.string(data, "heading", nullable=True),
        content=r.string(data, "content", max_len=most), offset=r.integer(data, "offset", choices=(offset,)),
        total_chars=r.integer(data, "total_chars", lo=0), truncated=r.boolean(data, "truncated"),
        next_offset=r.integer(data, "next_offset", lo=1, nullable=True))
    end = piece.offset + len(piece.content)
    if piece.truncated != (end < piece.total_chars) or piece.next_offset != (end if piece.truncated else None):
        r.fail("next_offset", "must continue exactly where this content ends, and only when truncated")
    return piece
