"""One attempt to deliver a notification, over HTTP (webhook) or SMTP (e-mail). Every failure,
a missing secret included, is an `Outcome` to record, never an exception for the worker."""
from __future__ import annotations

import os
import smtplib
import ssl
import time
import uuid
from dataclasses import dataclass

import requests

from ..config import Settings
from . import message
from .message import Notice

WEBHOOK_TIMEOUT_SECONDS = 5
SMTP_TIMEOUT_SECONDS = 10
ERROR_MAX = 500


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    http_status: int | None = None
    error: str | None = None


def bounded(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the server or library said
    return text if len(text) <= ERROR_MAX else text[:ERROR_MAX - 1] + "…"


def send_webhook(delivery_id: uuid.UUID, notice: Notice, *, url: str, secret_env: str,
                 public_url: str | None) -> Outcome:
    secret = os.environ.get(secret_env)
    if not secret:
        return Outcome(False, error=f"the signing secret is missing: {secret_env} is not set")
    body = message.webhook_body(delivery_id, notice, public_url)
    headers = message.webhook_headers(delivery_id, secret, str(int(time.time())), body)
    try:
        # Redirects are not followed: a receiver that moved is a configuration to fix, and the
        # signed body must not be sent somewhere the file does not name.
        with requests.post(url, data=body, headers=headers, timeout=WEBHOOK_TIMEOUT_SECONDS,
                           allow_redirects=False, stream=True) as response:
            status = response.status_code
            reason = response.reason or ""
    except requests.RequestException as err:
        return Outcome(False, error=bounded(f"{type(err).__name__}: {err}"))
    if 200 <= status < 300:
        return Outcome(True, http_status=status)
    return Outcome(False, http_status=status, error=bounded(f"HTTP {status} {reason}".strip()))


def send_email(delivery_id: uuid.UUID, notice: Notice, *, recipients: list[str],
               settings: Settings) -> Outcome:
    if not settings.smtp_host:
        return Outcome(False, error="BAILING_SMTP_HOST is not set")
    if not settings.smtp_from:
        return Outcome(False, error="BAILING_SMTP_FROM is not set")
    try:
        mail = message.email(notice, sender=settings.smtp_from, recipients=recipients,
                             public_url=settings.public_url, delivery_id=delivery_id)
        with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=SMTP_TIMEOUT_SECONDS) as smtp:
            if settings.smtp_starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            refused = smtp.send_message(mail)
    except smtplib.SMTPResponseException as err:
        text = err.smtp_error.decode("utf-8", "replace") if isinstance(err.smtp_error, bytes) else str(err.smtp_error)
        return Outcome(False, error=bounded(f"SMTP {err.smtp_code}: {text}"))
    except smtplib.SMTPRecipientsRefused as err:
        return Outcome(False, error=bounded(f"SMTP refused every recipient: {_refusals(err.recipients)}"))
    except (smtplib.SMTPException, OSError, ValueError) as err:
        return Outcome(False, error=bounded(f"{type(err).__name__}: {err}"))
    if refused:  # some recipients took it: delivered, and the others named
        return Outcome(True, error=bounded(f"SMTP refused some recipients: {_refusals(refused)}"))
    return Outcome(True)


def _refusals(refused: dict[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{address} ({code})" for address, (code, _) in refused.items())
