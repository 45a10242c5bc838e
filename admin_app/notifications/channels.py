"""Typed mapping of bz_approval_channels (sql/069): where notifications of new approvals go."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import ARRAY, Text
from sqlalchemy.orm import Mapped, mapped_column

from ..db import Base

KINDS = ("webhook", "email", "business_webhook", "approval_webhook")
# The business system's own channel (BUSINESS_SIDE.md §F.1): Core's `tool_approval_request`,
# signed as a webhook is; `approval_webhook` is its alias, kept as written.
BUSINESS_KINDS = ("business_webhook", "approval_webhook")
WEBHOOK_KINDS = ("webhook", *BUSINESS_KINDS)


class Channel(Base):
    __tablename__ = "bz_approval_channels"

    name: Mapped[str] = mapped_column(primary_key=True)
    kind: Mapped[str]
    url: Mapped[str | None]
    secret_env: Mapped[str | None]  # the variable's name; the secret is read when sending
    recipients: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    routes: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    tools: Mapped[list[str]] = mapped_column(ARRAY(Text), default=list)
    enabled: Mapped[bool]
    created_at: Mapped[datetime] = mapped_column(server_default="now()")
    updated_at: Mapped[datetime] = mapped_column(server_default="now()")
