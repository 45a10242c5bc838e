"""Typed mappings of the runtime tables (sql/003_agent_runtime.sql)."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from ..db import Base


class Thread(Base):
    __tablename__ = "bz_threads"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_agent_sessions.id"))
    route_key: Mapped[str]
    client_conversation_id: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")


class Run(Base):
    __tablename__ = "bz_runs"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    thread_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("bz_threads.id"))
    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    client_app_id: Mapped[str]
    route_key: Mapped[str]
    client_conversation_id: Mapped[str]
    client_turn_id: Mapped[str]
    user_message_id: Mapped[str]
    request_hash: Mapped[str]
    context: Mapped[dict[str, Any]] = mapped_column(JSONB)
    profile_revision: Mapped[str]
    capability_revision: Mapped[str]
    task_binding: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(default="prepared")
    completion_hash: Mapped[str | None]
    completion: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    completed_at: Mapped[datetime | None]


class Message(Base):
    __tablename__ = "bz_messages"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    thread_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("bz_threads.id"))
    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("bz_runs.id"))
    role: Mapped[str]
    message_id: Mapped[str]
    content: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")


class KnowledgeDocument(Base):
    __tablename__ = "bz_knowledge_documents"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    route_key: Mapped[str]
    name: Mapped[str]
    title: Mapped[str]
    media_type: Mapped[str]
    sha256: Mapped[str]
    char_count: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")


class KnowledgeChunk(Base):
    __tablename__ = "bz_knowledge_chunks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("bz_knowledge_documents.id"))
    ordinal: Mapped[int]
    heading: Mapped[str]
    content: Mapped[str]
