"""Per-route reference knowledge: Markdown and text documents, chunked, searched with
PostgreSQL full-text search. Knowledge is reference material, never instructions or authority:
every item the hub hands out says `trust: reference_only`."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import utc_now
from ..catalog.search import tokens
from ..errors import ApiError, invalid_field
from .models import KnowledgeChunk, KnowledgeDocument
from .profile import safe_text

CHUNK_CHARS = 1200
MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain"}

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _sections(body: str, markdown: bool) -> list[tuple[str, str]]:
    """(heading, text) pairs; plain text is one section without a heading."""
    if not markdown:
        return [("", body)]
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in body.splitlines():
        match = _HEADING.match(line)
        if match:
            sections.append((match.group(2), []))
        else:
            sections[-1][1].append(line)
    return [(heading, "\n".join(lines)) for heading, lines in sections]


def chunk(body: str, markdown: bool) -> list[tuple[str, str]]:
    """Chunks of at most CHUNK_CHARS, cut at paragraph boundaries where possible."""
    out: list[tuple[str, str]] = []
    for heading, section in _sections(body, markdown):
        current = ""
        for para in (p.strip() for p in re.split(r"\n\s*\n", section)):
            if not para:
                continue
            while len(para) > CHUNK_CHARS:
                if current:
                    out.append((heading, current))
                    current = ""
                out.append((heading, para[:CHUNK_CHARS]))
                para = para[CHUNK_CHARS:]
            if current and len(current) + 2 + len(para) > CHUNK_CHARS:
                out.append((heading, current))
                current = ""
            current = f"{current}\n\n{para}" if current else para
        if current:
            out.append((heading, current))
    return out


def add_document(db: Session, route_key: str, path: Path) -> dict:
    """Add or replace (by file name) one document of a route; returns what was stored."""
    media_type = MEDIA_TYPES.get(path.suffix.lower())
    if media_type is None:
        raise ApiError("invalid_request", f"{path.name}: only .md, .markdown and .txt files are accepted")
    raw = path.read_bytes()
    if len(raw) > limits.KNOWLEDGE_DOCUMENT_MAX_BYTES:
        raise ApiError("request_too_large", f"{path.name} is larger than {limits.KNOWLEDGE_DOCUMENT_MAX_BYTES} bytes")
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError("invalid_request", f"{path.name} is not UTF-8 text") from None
    if "\x00" in body:
        raise ApiError("invalid_request", f"{path.name} contains NUL characters")
    markdown = media_type == "text/markdown"
    title = next((m.group(2) for line in body.splitlines() if (m := _HEADING.match(line))
                  and m.group(1) == "#"), path.stem) if markdown else path.stem
    digest = hashlib.sha256(raw).hexdigest()
    doc = db.scalar(select(KnowledgeDocument).where(
        KnowledgeDocument.route_key == route_key, KnowledgeDocument.name == path.name).with_for_update())
    if doc is not None and doc.sha256 == digest:
        return {"route": route_key, "name": path.name, "status": "unchanged"}
    status = "replaced" if doc is not None else "added"
    if doc is None:
        doc = KnowledgeDocument(route_key=route_key, name=path.name)
        db.add(doc)
    doc.title, doc.media_type, doc.sha256, doc.char_count = title[:255], media_type, digest, len(body)
    doc.updated_at = utc_now()
    db.flush()
    db.execute(delete(KnowledgeChunk).where(KnowledgeChunk.document_id == doc.id))
    pieces = chunk(body, markdown)
    db.add_all(KnowledgeChunk(document_id=doc.id, ordinal=i, heading=h, content=c)
               for i, (h, c) in enumerate(pieces))
    db.flush()
    return {"route": route_key, "name": path.name, "status": status, "title": doc.title,
            "chunks": len(pieces)}


def search(db: Session, route_key: str, query: str, top_k: int, max_docs: int) -> list[dict]:
    """Best chunks for the query (any of its words), at most top_k from at most max_docs
    documents; ties break by document and position so results are stable."""
    words = sorted(set(tokens(query)))[:64]
    if not words:
        return []
    tsquery = " | ".join(f"'{w}'" for w in words)
    rows = db.execute(text("""
        SELECT c.id, c.heading, c.content, d.name, d.title, d.id AS document_id,
               ts_rank(c.search, to_tsquery('simple', :q)) AS rank
        FROM bz_knowledge_chunks c JOIN bz_knowledge_documents d ON d.id = c.document_id
        WHERE d.route_key = :route AND c.search @@ to_tsquery('simple', :q)
        ORDER BY rank DESC, d.name, c.ordinal
        LIMIT :limit
    """), {"q": tsquery, "route": route_key, "limit": max(top_k * 4, 20)}).mappings()
    results: list[dict] = []
    documents: set[int] = set()
    for row in rows:
        if row["document_id"] not in documents and len(documents) >= max_docs:
            continue
        documents.add(row["document_id"])
        results.append(dict(row))
        if len(results) >= top_k:
            break
    return results


def _turn_item(index: int, row: dict, on_demand: bool) -> dict:
    """One entry of a turn's `context.knowledge`: `ref`, `title` and `content` as every client
    reads them. Inline, `content` is the chunk's text; negotiated on demand, it is only the
    bounded hint, and `chunk_id` says what to read with knowledge/read."""
    item: dict[str, Any] = {"ref": f"knowledge:{index}", "title": safe_text(row["title"], limits.KNOWLEDGE_TITLE_MAX)}
    if on_demand:
        hint = row["content"][:limits.KNOWLEDGE_HINT_MAX]
        item.update({"content": hint, "hint_truncated": len(hint) < len(row["content"]),
                     "content_chars": len(row["content"])})
    else:
        content = row["content"][:limits.KNOWLEDGE_INLINE_MAX]
        item.update({"content": content, "truncated": len(content) < len(row["content"])})
    item.update({"chunk_id": row["id"], "document": row["name"], "heading": row["heading"],
                 "trust": "reference_only"})
    return item


def turn_knowledge(rows: list[dict], on_demand: bool) -> tuple[list[dict], list[dict]]:
    """`context.knowledge` and `context.knowledge_refs` of a turn, best first."""
    items = [_turn_item(i, row, on_demand) for i, row in enumerate(rows, start=1)]
    refs = [{"ref": item["ref"], "doc_id": row["document_id"], "title": item["title"],
             "score": round(float(row["rank"]), 6)} for item, row in zip(items, rows)]
    return items, refs


def hint_item(row: dict) -> dict:
    hint = row["content"][:limits.KNOWLEDGE_HINT_MAX]
    return {"chunk_id": row["id"], "document": row["name"], "title": row["title"],
            "heading": row["heading"], "hint": hint, "hint_truncated": len(hint) < len(row["content"]),
            "content_chars": len(row["content"]), "trust": "reference_only"}


def read(db: Session, route_key: str, chunk_id: int, offset: int) -> dict:
    row = db.execute(select(KnowledgeChunk, KnowledgeDocument)
                     .join(KnowledgeDocument, KnowledgeDocument.id == KnowledgeChunk.document_id)
                     .where(KnowledgeChunk.id == chunk_id, KnowledgeDocument.route_key == route_key)).first()
    if row is None:
        raise ApiError("knowledge_not_found")
    piece, doc = row
    total = len(piece.content)
    if offset > total:
        raise invalid_field("offset", f"must be at most {total}")
    content = piece.content[offset:offset + limits.KNOWLEDGE_READ_MAX]
    end = offset + len(content)
    return {"schema": "bailing.agent-knowledge-read.v1", "route": route_key, "chunk_id": piece.id,
            "document": doc.name, "title": doc.title, "heading": piece.heading,
            "content": content, "offset": offset, "total_chars": total,
            "truncated": end < total, "next_offset": end if end < total else None,
            "max_chars": limits.KNOWLEDGE_READ_MAX, "trust": "reference_only"}
