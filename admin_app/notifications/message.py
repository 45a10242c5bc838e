"""What a notification says: the webhook's JSON and its signature, and the e-mail.

Built only from an approval's bounded fields (`Notice`): never the argument snapshot, never an
argument value beyond the bounded summary the approvals queue already shows, never a secret.
Their text is untrusted: each field is made one line, and every character that hides or changes
how text is shown is replaced by the marker the console shows (⟨RLO⟩, ⟨ESC⟩), so neither a mail
reader nor whatever shows the webhook's JSON is fooled by it."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from ..canonical import iso
from ..untrusted_text import revealed

SCHEMA = "bailing.approval-notification.v1"
EVENT = "approval.pending"
SUBJECT_MAX = 200
# Header lines up to RFC 5322's 998 characters: the subject is never folded (Python folds a long
# one before its first word, which some readers then show with a leading space).
MAIL_POLICY = policy.SMTP.clone(max_line_length=998)
# Line breaks (and tabs): a one-line field shows each run of them as one space.
_BREAKS = re.compile(r"[\t\n\x0b\x0c\r\x1c-\x1e\x85\u2028\u2029]+")


@dataclass(frozen=True)
class Notice:
    """The bounded fields of one pending approval, as read for a delivery."""

    id: uuid.UUID
    number: int
    tool: str
    route: str
    risk: str
    summary: str
    on_behalf_of: str | None
    snapshot_bytes: int
    args_hash: str
    created_at: datetime
    expires_at: datetime | None


def console_path(notice: Notice) -> str:
    return f"/console/approvals/{notice.id}"


def link(notice: Notice, public_url: str | None) -> str | None:
    """The approval's page in the console; None without BAILING_PUBLIC_URL (a relative link
    would resolve against the receiver's own address)."""
    return public_url + console_path(notice) if public_url else None


def webhook_body(delivery_id: uuid.UUID, notice: Notice, public_url: str | None) -> bytes:
    payload: dict[str, Any] = {
        "schema": SCHEMA,
        "event": EVENT,
        "delivery_id": str(delivery_id),
        "approval": {
            "id": str(notice.id),
            "approval_id": notice.number,
            "tool": one_line(notice.tool),
            "route": one_line(notice.route),
            "risk": one_line(notice.risk),
            "summary": one_line(notice.summary),
            "on_behalf_of": one_line(notice.on_behalf_of) if notice.on_behalf_of is not None else None,
            "snapshot_bytes": notice.snapshot_bytes,
            "args_hash": notice.args_hash,
            "created_at": iso(notice.created_at),
            "expires_at": iso(notice.expires_at),
        },
        "link": link(notice, public_url),
    }
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=` and the hex HMAC-SHA256 of `timestamp.body` under the channel's secret: the
    timestamp is signed too, so a receiver can refuse an old request replayed."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_headers(delivery_id: uuid.UUID, secret: str, timestamp: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "bailing-hub",
        "X-Bailing-Delivery": str(delivery_id),
        "X-Bailing-Timestamp": timestamp,
        "X-Bailing-Signature": signature(secret, timestamp, body),
    }


def one_line(value: str) -> str:
    """Untrusted text made one line and visible: every run of line breaks becomes one space, and
    every other control or hidden character its marker, so nothing left can end or bend a mail
    header, or hide in a JSON string."""
    return revealed(_BREAKS.sub(" ", value)).strip()


def subject(notice: Notice) -> str:
    text = one_line(f"Approval #{notice.number} waiting: {notice.tool} on {notice.route} ({notice.risk})")
    return text if len(text) <= SUBJECT_MAX else text[:SUBJECT_MAX - 1] + "…"


def email(notice: Notice, *, sender: str, recipients: list[str], public_url: str | None,
          delivery_id: uuid.UUID) -> EmailMessage:
    """A plain-text mail: the bounded summary and the link. EmailMessage itself refuses a
    header value holding CR or LF, so the untrusted parts are made one line first."""
    message = EmailMessage(policy=MAIL_POLICY)
    message["Subject"] = subject(notice)
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(idstring=delivery_id.hex)
    message["X-Bailing-Delivery"] = str(delivery_id)
    where = link(notice, public_url)
    lines = [
        "An agent's write is waiting for approval.",
        "",
        f"Approval:      #{notice.number}",
        f"Tool:          {one_line(notice.tool)}",
        f"Route:         {one_line(notice.route)}",
        f"Risk:          {one_line(notice.risk)}",
        f"On behalf of:  {one_line(notice.on_behalf_of or '-')}",
        f"Arguments:     {notice.snapshot_bytes} bytes, SHA-256 {notice.args_hash}",
        f"Requested at:  {iso(notice.created_at)}",
        f"Expires at:    {iso(notice.expires_at) or 'never'}",
        "",
        "Summary:",
        one_line(notice.summary),
        "",
        f"Review it: {where}" if where else
        f"Review it in the console at {console_path(notice)} (the hub has no BAILING_PUBLIC_URL "
        "to make a full link).",
    ]
    message.set_content("\n".join(lines) + "\n")
    return message
