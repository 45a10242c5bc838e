"""One attempt to deliver a notification, over HTTP (webhook) or SMTP (e-mail), within one
deadline for the whole attempt (`Deadline`). Every failure, a missing secret included, is an
`Outcome` to record, never an exception for the worker. A webhook is named by its origin only:
its error never holds the URL's path or query (`redact`)."""
from __future__ import annotations

import http.client
import os
import smtplib
import socket
import ssl
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from requests.utils import requote_uri

from ..config import Settings
from ..deadline import Deadline
from . import message
from .message import Notice
from .redact import origin, scrub

ERROR_MAX = 500


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    http_status: int | None = None
    error: str | None = None


def bounded(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the server or library said
    return text if len(text) <= ERROR_MAX else text[:ERROR_MAX - 1] + "…"


def _failure(err: BaseException, deadline: Deadline, where: str) -> str:
    if deadline.expired or isinstance(err, TimeoutError):
        return f"no complete answer from {where} within {deadline.seconds:g} s"
    return f"{type(err).__name__}: {err} ({where})"


class _Connection(http.client.HTTPConnection):
    """HTTP, or HTTPS with `tls`, over a socket the attempt's deadline opens and watches."""

    def __init__(self, host: str, port: int | None, deadline: Deadline, tls: ssl.SSLContext | None) -> None:
        self.default_port = 443 if tls else 80  # the Host header names a port only when another
        super().__init__(host, port, timeout=deadline.seconds)
        self._deadline, self._tls = deadline, tls

    def connect(self) -> None:
        sock = self._deadline.connect(self.host, self.port)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host) if self._tls else sock


def send_webhook(delivery_id: uuid.UUID, notice: Notice, *, url: str, secret_env: str,
                 public_url: str | None, seconds: float) -> Outcome:
    secret = os.environ.get(secret_env)
    if not secret:
        return Outcome(False, error=f"the signing secret is missing: {secret_env} is not set")
    body = message.webhook_body(delivery_id, notice, public_url)
    return post(url, body, message.webhook_headers(delivery_id, secret, str(int(time.time())), body), seconds)


def send_business(delivery_id: uuid.UUID, body: bytes, *, url: str, secret_env: str, seconds: float) -> Outcome:
    """The business system's approval request (request.py): signed as Core signs callbacks, with
    the timestamp in milliseconds (BUSINESS_SIDE.md §A.7)."""
    secret = os.environ.get(secret_env)
    if not secret:
        return Outcome(False, error=f"the signing secret is missing: {secret_env} is not set")
    return post(url, body, message.webhook_headers(delivery_id, secret, str(time.time_ns() // 1_000_000), body),
                seconds)


def post(url: str, body: bytes, headers: dict[str, str], seconds: float) -> Outcome:
    """One signed POST within `seconds` in all; its errors name the URL's origin only."""
    parts, where = urlsplit(url), origin(url)
    target = requote_uri((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    with Deadline(seconds) as deadline:
        try:
            host = (parts.hostname or "").encode("idna").decode("ascii")
            connection = _Connection(host, parts.port, deadline,
                                     ssl.create_default_context() if parts.scheme == "https" else None)
            # Redirects are not followed: a receiver that moved is a configuration to fix, and
            # the signed body must not be sent somewhere the file does not name. The answer's
            # status decides; its body is not read.
            try:
                connection.request("POST", target, body=body, headers=headers)
                response = connection.getresponse()
                status, reason = response.status, response.reason or ""
            finally:
                connection.close()
        except (OSError, http.client.HTTPException, ValueError) as err:
            return Outcome(False, error=bounded(scrub(_failure(err, deadline, where), url)))
    if 200 <= status < 300:
        return Outcome(True, http_status=status)
    return Outcome(False, http_status=status, error=bounded(scrub(f"HTTP {status} {reason}".strip(), url)))


class _SMTP(smtplib.SMTP):
    """An SMTP session over a socket the attempt's deadline opens and watches."""

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline
        super().__init__(timeout=deadline.seconds)  # no host: `connect` is called by the sender

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        return self._deadline.connect(host, port)


def send_email(delivery_id: uuid.UUID, notice: Notice, *, recipients: list[str],
               settings: Settings, seconds: float) -> Outcome:
    if not settings.smtp_host:
        return Outcome(False, error="BAILING_SMTP_HOST is not set")
    if not settings.smtp_from:
        return Outcome(False, error="BAILING_SMTP_FROM is not set")
    where = f"{settings.smtp_host}:{settings.smtp_port}"
    with Deadline(seconds) as deadline:
        try:
            mail = message.email(notice, sender=settings.smtp_from, recipients=recipients,
                                 public_url=settings.public_url, delivery_id=delivery_id)
            smtp = _SMTP(deadline)
            try:
                smtp.connect(settings.smtp_host, settings.smtp_port)
                if settings.smtp_starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if settings.smtp_username:
                    smtp.login(settings.smtp_username, settings.smtp_password or "")
                refused = smtp.send_message(mail)
            finally:
                _quit(smtp)  # once the message is accepted, how QUIT goes changes nothing
        except smtplib.SMTPResponseException as err:
            text = (err.smtp_error.decode("utf-8", "replace") if isinstance(err.smtp_error, bytes)
                    else str(err.smtp_error))
            return Outcome(False, error=bounded(f"SMTP {err.smtp_code}: {text}"))
        except smtplib.SMTPRecipientsRefused as err:
            return Outcome(False, error=bounded(f"SMTP refused every recipient: {_refusals(err.recipients)}"))
        except (smtplib.SMTPException, OSError, ValueError) as err:
            return Outcome(False, error=bounded(_failure(err, deadline, where)))
    if refused:  # some recipients took it: delivered, and the others named
        return Outcome(True, error=bounded(f"SMTP refused some recipients: {_refusals(refused)}"))
    return Outcome(True)


def _quit(smtp: smtplib.SMTP) -> None:
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        smtp.close()


def _refusals(refused: dict[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{address} ({code})" for address, (code, _) in refused.items())
