"""Notifications of new approvals: channels in the configuration file, the transactional outbox
written with the approval, and delivery to a REAL webhook receiver and a REAL SMTP server on
loopback, with signatures, retries, leases and racing workers.

Approvals are made through the agent API over HTTP (`hub`, tests/browser.py). Deliveries run in
the test's own thread (`deliver_due`) unless a test starts the hub's background worker; back-off
waits are never slept through: the tests move `next_attempt_at` in the database instead."""
from __future__ import annotations

import asyncio
import email
import hashlib
import hmac
import json
import logging
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from email import policy
from html import unescape
from http.server import BaseHTTPRequestHandler

import pytest
from aiosmtpd.controller import Controller

from admin_app import create_app, limits
from admin_app.db import Database
from admin_app.notifications import message, redact, worker
from admin_app.notifications.bell import BELL
from admin_app.notifications.senders import Outcome
from admin_app.notifications.worker import LEASE_SECONDS, Report, claim, deliver_due, record, retry_delay
from tests.browser import ADJUST, CREDIT, MERGE, ROUTE, Hub
from tests.conftest import serve
from tests.helpers import LoopbackServer, apply_config, make_admin, row_counts
from tests.test_console_server import signed_in

PUBLIC = "https://hub.example.com"
SECRET = "ops-hook-signing-secret-for-tests"
SECRET_ENV = "BZ_TEST_OPS_HOOK_SECRET"
SENDER = "Bailing hub <hub@example.com>"
CHANNEL_TABLES = ("bz_approval_channels", "bz_approval_deliveries", "bz_approval_delivery_attempts")


def merge_arguments(marker: str) -> dict:
    """A merge whose reason ends, past the summary's bound, with `marker`."""
    return {"source_customer_id": "C-100235", "target_customer_id": "C-100234",
            "reason": "Same company, registered twice. " + "x" * 300 + " " + marker}


# ================================================================ real servers on loopback

class Receiver:
    """A webhook receiver: records every request; the next `fail` requests are answered with
    `status` (and `reason`), the others with 204; each answer waits `delay` seconds first.
    `answers`, while it lasts, scripts the next answers instead: (seconds to wait, status)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: list[tuple[float, int]] = []
        self.fail = 0
        self.status = 500
        self.reason = "Internal Server Error"
        self.delay = 0.0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    failing = receiver.fail > 0
                    receiver.fail -= 1 if failing else 0
                    delay, status = receiver.answers.pop(0) if receiver.answers else (
                        receiver.delay, receiver.status if failing else 204)
                if delay:
                    time.sleep(delay)
                self.send_response(status, receiver.reason if failing else None)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/approvals"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def payloads(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Inbox:
    """aiosmtpd's handler: keeps every message; the next `fail` are refused with 554. Each
    recipient and each message is answered `pause` seconds late."""

    def __init__(self) -> None:
        self.envelopes: list = []
        self.fail = 0
        self.pause = 0.0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802 - aiosmtpd's name
        await asyncio.sleep(self.pause)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        await asyncio.sleep(self.pause)
        if self.fail > 0:
            self.fail -= 1
            return "554 Transaction failed: try later"
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"

    def messages(self) -> list:
        return [email.message_from_bytes(e.content, policy=policy.default) for e in self.envelopes]


class Trickler:
    """A webhook receiver that reads each request whole, then sends its answer (a 200) one byte
    every `pace` seconds; records each request."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self, pace: float, path: str = "/hooks/approvals") -> None:
        self.pace = pace
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        trickler = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with trickler.lock:
                    trickler.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.close_connection = True
                try:
                    for byte in trickler.ANSWER:
                        self.wfile.write(bytes([byte]))
                        time.sleep(trickler.pace)
                except OSError:  # the hub hung up
                    pass

            def log_message(self, *args):
                pass

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def receiver():
    instance = Receiver()
    yield instance
    instance.stop()


@pytest.fixture
def inbox():
    handler = Inbox()
    controller = Controller(handler, hostname="127.0.0.1", port=free_port())
    controller.start()
    handler.port = controller.port
    yield handler
    controller.stop()


@pytest.fixture
def app(db_url, tmp_path, inbox):
    """The suite's app, with a public URL and the loopback SMTP server (no worker thread)."""
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "var", "public_url": PUBLIC,
                              "smtp_host": "127.0.0.1", "smtp_port": inbox.port, "smtp_from": SENDER,
                              "smtp_starttls": False})
    yield application
    application.extensions["bailing"].db.dispose()


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    return SECRET


# ================================================================ helpers

def pending(hub: Hub, tool: str, arguments: dict) -> int:
    """An approval made through the agent API; its number (`approval_id`)."""
    out = hub.invoke(tool, arguments)
    assert out["status"] == "awaiting_approval", out
    return out["approval_id"]


def webhook(receiver: Receiver, name: str = "ops-hook", **extra) -> dict:
    return {"name": name, "kind": "webhook", "url": receiver.url, "secret_env": SECRET_ENV, **extra}


def mail(name: str = "approvers", to: tuple[str, ...] = ("approvers@example.com", "duty@example.com"),
         **extra) -> dict:
    return {"name": name, "kind": "email", "to": list(to), **extra}


def channels(cli, tmp_path, *items: dict, **sections) -> dict:
    return apply_config(cli, tmp_path, {**sections, "approval_notifications": list(items)})


def deliver(app, **settings) -> Report:
    hub = app.extensions["bailing"]
    return deliver_due(hub.db, hub.settings.replace(**settings))


def deliveries(sql) -> list[dict]:
    rows = sql("SELECT d.id, d.channel, d.status, d.attempts, d.last_http_status, d.last_error, a.number, "
               "d.next_attempt_at - now() FROM bz_approval_deliveries d JOIN bz_tool_approvals a "
               "ON a.id = d.approval_id ORDER BY a.number, d.channel")
    return [{"id": r[0], "channel": r[1], "status": r[2], "attempts": r[3], "http_status": r[4], "error": r[5],
             "approval": r[6], "due_in": r[7].total_seconds() if r[7] is not None else None} for r in rows]


def attempts(sql, delivery_id) -> list[tuple]:
    return sql("SELECT attempt, outcome, http_status, error, started_at IS NOT NULL, "
               "next_attempt_at IS NOT NULL FROM bz_approval_delivery_attempts "
               "WHERE delivery_id = %s ORDER BY attempt", (delivery_id,))


def make_due(sql) -> None:
    """Every waiting delivery due now (instead of sleeping through its back-off or lease)."""
    sql("UPDATE bz_approval_deliveries SET next_attempt_at = now() - interval '1 second' "
        "WHERE status IN ('pending', 'sending')")


def verify(secret: str, request: dict) -> bool:
    """What a receiver does with the signature (docs/operations.md)."""
    timestamp = request["headers"]["X-Bailing-Timestamp"]
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(request["headers"]["X-Bailing-Signature"], "sha256=" + expected)


def approval_row(sql, number: int) -> dict:
    row = sql("SELECT id, summary, snapshot, args_hash, snapshot_bytes, risk FROM bz_tool_approvals "
              "WHERE number = %s", (number,))[0]
    return {"id": str(row[0]), "summary": row[1], "snapshot": row[2], "args_hash": row[3],
            "snapshot_bytes": row[4], "risk": row[5]}


# ================================================================ webhooks

def test_each_new_approval_notifies_each_matching_webhook_once_signed_and_bounded(
        hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver), webhook(receiver, "merges-only", tools=["customer_merge"]),
             webhook(receiver, "desk-only", routes=[ROUTE]))
    marker = f"SNAPSHOT-MARKER-{uuid.uuid4().hex}"
    merge = pending(hub, "customer_merge", merge_arguments(marker))
    credit = pending(hub, "customer_update_credit_limit", CREDIT)
    # Queued in the approvals' own transactions, before anything is sent.
    assert [(d["approval"], d["channel"], d["status"]) for d in deliveries(sql)] == [
        (merge, "desk-only", "pending"), (merge, "merges-only", "pending"),
        (merge, "ops-hook", "pending"),
        (credit, "desk-only", "pending"), (credit, "ops-hook", "pending")]

    report = deliver(app)

    assert report.delivered == 5 and report.retrying == report.failed == 0
    assert len(receiver.requests) == 5
    assert {r["headers"]["X-Bailing-Delivery"] for r in receiver.requests} == {str(d["id"]) for d in deliveries(sql)}
    for request in receiver.requests:
        assert request["path"] == "/hooks/approvals"
        assert request["headers"]["Content-Type"] == "application/json"
        assert verify(SECRET, request)
        assert not verify("another-secret", request)
        assert not verify(SECRET, {**request, "body": request["body"].replace(b"customer", b"Customer")})
        assert abs(int(request["headers"]["X-Bailing-Timestamp"]) - time.time()) < 60
        raw = request["body"].decode() + json.dumps(request["headers"])
        assert marker not in raw and SECRET not in raw
    merged = approval_row(sql, merge)
    assert marker in merged["snapshot"] and marker not in merged["summary"]  # the test means something
    payload = next(p for p in receiver.payloads() if p["approval"]["approval_id"] == merge)
    assert payload == {
        "schema": "bailing.approval-notification.v1", "event": "approval.pending",
        "delivery_id": payload["delivery_id"],
        "approval": {"id": merged["id"], "approval_id": merge, "tool": "customer_merge",
                     "route": ROUTE, "risk": merged["risk"], "summary": merged["summary"],
                     "on_behalf_of": "tenant-7:user-42", "snapshot_bytes": merged["snapshot_bytes"],
                     "args_hash": merged["args_hash"], "created_at": payload["approval"]["created_at"],
                     "expires_at": None},
        "link": f"{PUBLIC}/console/approvals/{merged['id']}"}
    assert payload["approval"]["created_at"].endswith("Z")
    assert all(d["status"] == "delivered" and d["attempts"] == 1 and d["http_status"] == 204
               for d in deliveries(sql))
    assert attempts(sql, deliveries(sql)[0]["id"]) == [(1, "delivered", 204, None, True, False)]
    # Nothing is sent twice.
    assert deliver(app).delivered == 0 and len(receiver.requests) == 5


def test_channels_that_do_not_match_or_are_disabled_send_nothing(hub, cli, sql, app, receiver, secret, tmp_path):
    back_office = {"route_key": "back-office", "name": "Back office"}
    channels(cli, tmp_path, webhook(receiver, "merges", tools=["customer_merge"]),
             webhook(receiver, "other-route", routes=["back-office"]),
             webhook(receiver, "both-needed", routes=[ROUTE], tools=["order_cancel"]),
             webhook(receiver, "switched-off", enabled=False),
             routes=[back_office])
    pending(hub, "customer_update_credit_limit", CREDIT)

    assert deliveries(sql) == []
    assert deliver(app).as_json() == Report().as_json()
    assert receiver.requests == []


def test_a_failed_attempt_is_retried_with_back_off_until_it_is_delivered(hub, cli, sql, app, receiver, secret,
                                                                         tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    receiver.fail, receiver.status, receiver.reason = 2, 503, "Busy"

    assert deliver(app).retrying == 1
    [first] = deliveries(sql)
    assert (first["status"], first["attempts"], first["http_status"], first["error"]) == (
        "pending", 1, 503, "HTTP 503 Busy")
    assert 30 - 5 < first["due_in"] <= 30  # the first back-off
    assert deliver(app).as_json() == Report().as_json()  # not due yet: nothing sent
    assert len(receiver.requests) == 1

    make_due(sql)
    assert deliver(app).retrying == 1
    assert 120 - 5 < deliveries(sql)[0]["due_in"] <= 120  # four times longer
    make_due(sql)
    assert deliver(app).delivered == 1

    [done] = deliveries(sql)
    assert (done["status"], done["attempts"], done["http_status"], done["error"], done["due_in"]) == (
        "delivered", 3, 204, None, None)
    assert attempts(sql, done["id"]) == [(1, "failed", 503, "HTTP 503 Busy", True, True),
                                         (2, "failed", 503, "HTTP 503 Busy", True, True),
                                         (3, "delivered", 204, None, True, False)]
    # One delivery: the same id on every attempt, for the receiver to deduplicate by.
    assert len({r["headers"]["X-Bailing-Delivery"] for r in receiver.requests}) == 1
    assert len(receiver.requests) == 3


def test_out_of_attempts_the_delivery_fails(hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    receiver.fail = 10

    # No back-off: each retry is due at once, so one pass runs them all.
    report = deliver(app, notification_max_attempts=3, notification_backoff_seconds=0)

    assert (report.retrying, report.failed, report.delivered) == (2, 1, 0)
    [failed] = deliveries(sql)
    assert (failed["status"], failed["attempts"], failed["due_in"]) == ("failed", 3, None)
    assert [a[1] for a in attempts(sql, failed["id"])] == ["failed"] * 3
    assert attempts(sql, failed["id"])[-1][5] is False  # no next attempt after the last
    assert len(receiver.requests) == 3
    make_due(sql)
    assert deliver(app).as_json() == Report().as_json()


def test_retry_delays_grow_four_times_and_stop_at_six_hours():
    assert [retry_delay(n, 30) for n in range(1, 6)] == [30, 120, 480, 1920, 7680]
    assert retry_delay(20, 30) == 6 * 3600
    assert retry_delay(3, 0) == 0


def test_a_missing_secret_is_a_recorded_failure_and_nothing_is_sent(hub, cli, sql, app, receiver, monkeypatch,
                                                                     tmp_path):
    monkeypatch.delenv(SECRET_ENV, raising=False)
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)

    assert deliver(app).retrying == 1

    [row] = deliveries(sql)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["error"] == f"the signing secret is missing: {SECRET_ENV} is not set"
    assert receiver.requests == []
    # Set it, and the next attempt goes out signed with it.
    monkeypatch.setenv(SECRET_ENV, SECRET)
    make_due(sql)
    assert deliver(app).delivered == 1
    assert verify(SECRET, receiver.requests[0])


def test_an_unreachable_receiver_and_a_redirect_are_retried_failures(hub, cli, sql, app, secret, tmp_path):
    gone = Receiver()
    url = gone.url
    gone.stop()  # nothing listens there any more
    moved = Receiver()
    moved.fail, moved.status, moved.reason = 1, 302, "Found"
    try:
        channels(cli, tmp_path, {**webhook(moved, "gone"), "url": url}, webhook(moved, "moved"))
        pending(hub, "customer_update_credit_limit", CREDIT)
        assert deliver(app).retrying == 2
    finally:
        moved.stop()
    rows = {d["channel"]: d for d in deliveries(sql)}
    where = url.removesuffix("/hooks/approvals")  # the origin: never the path
    assert rows["gone"]["error"] == f"ConnectionRefusedError: [Errno 111] Connection refused ({where})"
    assert rows["gone"]["http_status"] is None
    assert len(rows["gone"]["error"]) <= 500
    assert (rows["moved"]["error"], rows["moved"]["http_status"]) == ("HTTP 302 Found", 302)
    assert len(moved.requests) == 1  # the redirect was not followed


# ================================================================ e-mail

def test_each_new_approval_mails_each_matching_list_once_with_summary_and_link(hub, cli, sql, app, inbox, tmp_path):
    channels(cli, tmp_path, mail(), mail("merges-desk", to=("merges@example.com",), tools=["customer_merge"]))
    marker = f"SNAPSHOT-MARKER-{uuid.uuid4().hex}"
    merge = pending(hub, "customer_merge", merge_arguments(marker))
    pending(hub, "customer_update_credit_limit", CREDIT)

    assert deliver(app).delivered == 3

    assert sorted(tuple(e.rcpt_tos) for e in inbox.envelopes) == [
        ("approvers@example.com", "duty@example.com"), ("approvers@example.com", "duty@example.com"),
        ("merges@example.com",)]
    merged = approval_row(sql, merge)
    for envelope in inbox.envelopes:
        assert marker.encode() not in envelope.content
        assert envelope.mail_from == "hub@example.com"
    [merge_mail] = [m for m in inbox.messages() if m["To"] == "merges@example.com"]
    assert merge_mail["Subject"] == (f"Approval #{merge} waiting: customer_merge on desk "
                                     f"({merged['risk']})")
    assert merge_mail["From"] == SENDER
    body = merge_mail.get_content()
    assert merged["summary"] in body
    assert f"Review it: {PUBLIC}/console/approvals/{merged['id']}" in body
    assert merged["args_hash"] in body and marker not in body
    assert all(d["status"] == "delivered" for d in deliveries(sql))


def test_a_refused_mail_is_retried_and_a_missing_smtp_setting_is_recorded(hub, cli, sql, app, inbox, tmp_path):
    channels(cli, tmp_path, mail())
    pending(hub, "customer_update_credit_limit", CREDIT)
    inbox.fail = 1

    assert deliver(app).retrying == 1
    assert deliveries(sql)[0]["error"] == "SMTP 554: Transaction failed: try later"
    make_due(sql)
    assert deliver(app, smtp_host=None).retrying == 1
    assert deliveries(sql)[0]["error"] == "BAILING_SMTP_HOST is not set"
    make_due(sql)
    assert deliver(app, smtp_port=free_port()).retrying == 1  # nobody listens there
    assert deliveries(sql)[0]["error"].startswith("ConnectionRefusedError: ")
    make_due(sql)
    assert deliver(app).delivered == 1
    assert len(inbox.envelopes) == 1
    assert [a[1] for a in attempts(sql, deliveries(sql)[0]["id"])] == ["failed", "failed", "failed", "delivered"]


def _notice(**changes) -> message.Notice:
    values = dict(id=uuid.uuid4(), number=7, tool="customer_merge", route="desk", risk="high",
                  summary="customer_merge {}", on_behalf_of="tenant-7:user-42", snapshot_bytes=2,
                  args_hash="0" * 64, created_at=datetime.now(UTC), expires_at=None)
    values.update(changes)
    return message.Notice(**values)


def test_untrusted_text_cannot_add_mail_headers():
    notice = _notice(tool="x\r\nBcc: victim@example.com", route="desk\nX-Evil: 1",
                     summary="line one\r\n.\r\nMAIL FROM:<evil@example.com>\u2028Bcc: b@example.com",
                     on_behalf_of="\r\nCc: c@example.com")
    mail_message = message.email(notice, sender=SENDER, recipients=["a@example.com"], public_url=None,
                                 delivery_id=uuid.uuid4())
    parsed = email.message_from_bytes(mail_message.as_bytes(), policy=policy.default)

    assert parsed["Bcc"] is None and parsed["Cc"] is None and parsed["X-Evil"] is None
    assert "\r" not in parsed["Subject"] and "\n" not in parsed["Subject"]
    assert parsed["Subject"].startswith("Approval #7 waiting: x Bcc: victim@example.com on desk X-Evil: 1")
    body = parsed.get_content()
    assert "line one . MAIL FROM:<evil@example.com> Bcc: b@example.com" in body
    # Without BAILING_PUBLIC_URL the mail names the page's path, and says why there is no link.
    assert f"/console/approvals/{notice.id}" in body and "BAILING_PUBLIC_URL" in body
    assert len(message.subject(_notice(tool="t" * 400))) == message.SUBJECT_MAX


def test_without_a_public_url_the_webhook_link_is_null():
    body = json.loads(message.webhook_body(uuid.uuid4(), _notice(), None))
    assert body["link"] is None
    assert json.loads(message.webhook_body(uuid.uuid4(), _notice(), PUBLIC))["link"].startswith(PUBLIC + "/console/")


# ================================================================ the outbox and the workers

def test_a_rolled_back_approval_notifies_nobody(hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    # The approval's transaction fails at its very end (COMMIT), after the deliveries were queued.
    sql("CREATE FUNCTION bz_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'refused by the test'; END$$")
    sql("CREATE CONSTRAINT TRIGGER bz_test_refuse AFTER INSERT ON bz_approval_deliveries "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bz_test_refuse()")
    rung = BELL.count
    envelope = {"invocation_id": uuid.uuid4().hex * 2, "route": ROUTE, "capability_revision": hub.revision(),
                "tool": "customer_update_credit_limit", "arguments": CREDIT}

    response = hub.server.post("/agent-api/v1/tool-invocations", headers=hub.headers(), json=envelope)

    assert response.status_code == 503 and response.json()["error"] == "invocation_storage_unavailable"
    assert row_counts(sql, "bz_tool_approvals", "bz_tool_invocations", "bz_approval_deliveries") == {
        "bz_tool_approvals": 0, "bz_tool_invocations": 0, "bz_approval_deliveries": 0}
    assert BELL.count == rung  # the worker is not even woken
    assert deliver(app).as_json() == Report().as_json()
    assert receiver.requests == []


def test_two_workers_racing_deliver_each_notification_once(hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver), webhook(receiver, "second"))
    for limit in range(6):
        pending(hub, "customer_update_credit_limit", {**CREDIT, "credit_limit": 20000 + limit})
    receiver.delay = 0.02  # each send takes a while, so the two overlap
    settings = app.extensions["bailing"].settings
    workers = [Database(settings) for _ in range(2)]  # two processes' pools
    reports: list[Report] = []
    start = threading.Barrier(2)

    def work(database: Database) -> None:
        start.wait()
        reports.append(deliver_due(database, settings))

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        for database in workers:
            database.dispose()

    sent = [r["headers"]["X-Bailing-Delivery"] for r in receiver.requests]
    assert len(sent) == 12 and len(set(sent)) == 12
    assert sum(r.delivered for r in reports) == 12 and len(reports) == 2
    assert all(d["status"] == "delivered" and d["attempts"] == 1 for d in deliveries(sql))


def test_a_send_whose_worker_died_is_taken_again_when_its_lease_runs_out(hub, cli, sql, app, receiver, secret,
                                                                       tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    hub_db, settings = app.extensions["bailing"].db, app.extensions["bailing"].settings
    # A worker claims the row, then dies before it records anything.
    with hub_db.session() as db:
        lost = claim(db, settings, Report())
    assert lost is not None and lost.attempt == 1
    [row] = deliveries(sql)
    assert row["status"] == "sending" and LEASE_SECONDS - 5 < row["due_in"] <= LEASE_SECONDS
    assert deliver(app).as_json() == Report().as_json()  # leased: nobody else takes it meanwhile

    make_due(sql)  # the lease runs out
    report = deliver(app)

    assert (report.interrupted, report.delivered) == (1, 1)
    [row] = deliveries(sql)
    assert (row["status"], row["attempts"]) == ("delivered", 2)
    first, second = attempts(sql, row["id"])
    assert first[:2] == (1, "interrupted") and "lease ran out" in first[3]
    assert second[:3] == (2, "delivered", 204)
    # The dead worker comes back and reports its attempt: the row is no longer its to change.
    late = Report()
    with hub_db.session() as db:
        record(db, lost, Outcome(False, http_status=500, error="HTTP 500"), settings, late)
    assert late.lease_lost == 1
    assert deliveries(sql)[0]["status"] == "delivered"
    assert attempts(sql, row["id"]) == [first, second]


def test_an_interrupted_last_attempt_fails_the_delivery(hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    hub_db, settings = app.extensions["bailing"].db, app.extensions["bailing"].settings.replace(
        notification_max_attempts=1)
    with hub_db.session() as db:
        assert claim(db, settings, Report()) is not None
    make_due(sql)

    report = deliver_due(hub_db, settings)

    assert (report.interrupted, report.failed, report.delivered) == (1, 1, 0)
    assert deliveries(sql)[0]["status"] == "failed"
    assert receiver.requests == []


def test_a_channel_disabled_before_sending_cancels_its_deliveries(hub, cli, sql, app, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    channels(cli, tmp_path, webhook(receiver, enabled=False))

    assert deliver(app).cancelled == 1
    assert deliveries(sql)[0]["status"] == "cancelled"
    assert receiver.requests == []


def test_an_approval_decided_or_expired_before_sending_is_not_announced(hub, cli, sql, app, receiver, secret,
                                                                        tmp_path):
    channels(cli, tmp_path, webhook(receiver))
    decided = pending(hub, "customer_update_credit_limit", CREDIT)
    lapsed = pending(hub, "customer_merge", MERGE)
    waiting = pending(hub, "inventory_adjust", ADJUST)
    sql("UPDATE bz_tool_approvals SET status = 'approved', decided_by = 'quick', decided_at = now() "
        "WHERE number = %s", (decided,))
    sql("UPDATE bz_tool_approvals SET created_at = now() - interval '2 hours', "
        "expires_at = now() - interval '1 hour' WHERE number = %s", (lapsed,))

    report = deliver(app)
    assert (report.delivered, report.cancelled) == (1, 2)
    assert [(d["approval"], d["status"], d["attempts"]) for d in deliveries(sql)] == sorted(
        [(decided, "cancelled", 0), (lapsed, "cancelled", 0), (waiting, "delivered", 1)])
    assert {d["error"] for d in deliveries(sql) if d["status"] == "cancelled"} == {
        "the approval was decided or expired before this was sent"}
    assert [json.loads(r["body"])["approval"]["approval_id"] for r in receiver.requests] == [waiting]


def test_the_hub_process_delivers_at_once_in_its_own_thread(db_url, tmp_path, governed, cli, sql, receiver, secret):
    channels(cli, tmp_path, webhook(receiver))
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "worker", "notifications": True,
                              "public_url": PUBLIC})
    worker = application.extensions["bailing.notifications"]
    live = serve(application)
    try:
        agent = Hub(live, cli, sql, governed)
        approval = pending(agent, "customer_update_credit_limit", CREDIT)
        # Far sooner than its poll (10 s): the approval's commit woke it.
        deadline = time.monotonic() + 5
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [p["approval"]["approval_id"] for p in receiver.payloads()] == [approval]
        assert worker.runner.thread is not None and worker.runner.thread.is_alive()
    finally:
        worker.stop()
        live.stop()
        application.extensions["bailing"].db.dispose()
    assert worker.runner.thread is not None and not worker.runner.thread.is_alive()


def test_in_process_apps_of_the_suite_run_no_worker_unless_asked(app, db_url, tmp_path):
    assert "bailing.notifications" not in app.extensions
    assert app.extensions["bailing"].settings.notifications is False
    asked = create_app({"database_url": db_url, "data_dir": tmp_path / "asked", "notifications": True})
    assert "bailing.notifications" in asked.extensions


def test_the_deliver_command_sends_what_is_due_and_reports(hub, cli, sql, receiver, secret, tmp_path):
    channels(cli, tmp_path, webhook(receiver), mail())
    pending(hub, "customer_update_credit_limit", CREDIT)
    receiver.fail = 1

    code, out, err = cli("notifications", "deliver", "--once")

    assert code == 0, err
    assert out == {"delivered": 1, "retrying": 1, "failed": 0, "cancelled": 0, "interrupted": 0,
                   "lease_lost": 0, "deliveries": {"delivered": 1, "pending": 1}}


# ================================================================ deadlines and leases

def race(app, *passes) -> list[Report]:
    """Each pass (a function of its own Database, as another process would have) in a thread of
    its own, started together; their reports."""
    settings = app.extensions["bailing"].settings
    databases = [Database(settings) for _ in passes]
    reports: list[Report] = [Report() for _ in passes]
    start = threading.Barrier(len(passes))

    def run(index: int) -> None:
        start.wait()
        reports[index] = passes[index](databases[index], settings)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(passes))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for database in databases:
            database.dispose()
    assert not any(thread.is_alive() for thread in threads)
    return reports


def attempt_seconds(sql) -> list[float]:
    return [r[0] for r in sql("SELECT EXTRACT(EPOCH FROM finished_at - started_at)::float "
                              "FROM bz_approval_delivery_attempts ORDER BY finished_at")]


def test_a_receiver_that_trickles_its_answer_is_cut_off_by_the_attempts_deadline(
        hub, cli, sql, app, secret, tmp_path, monkeypatch):
    deadline = 1.0
    monkeypatch.setattr(limits, "NOTIFICATION_WEBHOOK_SECONDS", deadline)
    # A byte every 0.4 s: far within any one read's timeout, 17 s for the whole answer.
    trickler = Trickler(pace=0.4)
    try:
        channels(cli, tmp_path, {**webhook(trickler), "url": trickler.url})
        numbers = [pending(hub, "customer_update_credit_limit", {**CREDIT, "credit_limit": 20000 + n})
                   for n in range(3)]

        reports = race(app, deliver_due, deliver_due)  # two processes' workers

        assert sum(r.retrying for r in reports) == 3
        assert sum(r.delivered + r.interrupted + r.lease_lost + r.failed for r in reports) == 0
        # One request per notification: none was taken again while its attempt ran.
        sent = [r["headers"]["X-Bailing-Delivery"] for r in trickler.requests]
        assert len(sent) == 3 and set(sent) == {str(d["id"]) for d in deliveries(sql)}
        # Each attempt ended by its deadline, well before the answer (or the lease) would have.
        assert all(deadline <= took < deadline + 5 for took in attempt_seconds(sql)), attempt_seconds(sql)
        origin = trickler.url.removesuffix("/hooks/approvals")
        for row in deliveries(sql):
            assert (row["status"], row["attempts"], row["http_status"]) == ("pending", 1, None)
            assert row["error"] == f"no complete answer from {origin} within 1 s"
            assert attempts(sql, row["id"]) == [(1, "failed", None, row["error"], True, True)]
        assert sorted(d["approval"] for d in deliveries(sql)) == numbers

        # The receiver mends its ways: the next attempts deliver, once each.
        trickler.pace = 0
        make_due(sql)
        assert sum(r.delivered for r in race(app, deliver_due, deliver_due)) == 3
    finally:
        trickler.stop()
    assert len(trickler.requests) == 6 and len({r["headers"]["X-Bailing-Delivery"] for r in trickler.requests}) == 3
    for row in deliveries(sql):
        assert (row["status"], row["attempts"], row["http_status"], row["error"]) == ("delivered", 2, 200, None)
        assert [a[1:3] for a in attempts(sql, row["id"])] == [("failed", None), ("delivered", 200)]


def test_a_late_answer_after_the_lease_was_lost_overwrites_nothing(hub, cli, sql, app, receiver, secret,
                                                                   tmp_path, monkeypatch, caplog):
    channels(cli, tmp_path, webhook(receiver))
    pending(hub, "customer_update_credit_limit", CREDIT)
    # What a process paused mid-attempt looks like: its lease runs out before its answer comes.
    monkeypatch.setattr(worker, "LEASE_SECONDS", 1)
    receiver.answers = [(6.0, 200), (0, 503)]  # the first sender's 200 comes late; the second's 503 at once

    def second(database: Database, settings) -> Report:
        until = time.monotonic() + 20
        report = Report()
        while not report.interrupted and time.monotonic() < until:
            time.sleep(0.1)
            report = deliver_due(database, settings)
        return report

    first, taken_over = race(app, deliver_due, second)

    assert (first.lease_lost, first.delivered, first.retrying) == (1, 0, 0)
    assert (taken_over.interrupted, taken_over.retrying) == (1, 1)
    assert len({r["headers"]["X-Bailing-Delivery"] for r in receiver.requests}) == 1
    assert len(receiver.requests) == 2
    # The second sender's record stands: the first one's late 200 changed neither row.
    [row] = deliveries(sql)
    assert (row["status"], row["attempts"], row["http_status"], row["error"]) == (
        "pending", 2, 503, "HTTP 503 Service Unavailable")
    interrupted, failed = attempts(sql, row["id"])
    assert interrupted[:3] == (1, "interrupted", None) and "lease ran out" in interrupted[3]
    assert failed == (2, "failed", 503, "HTTP 503 Service Unavailable", True, True)
    assert "the outcome is dropped" in caplog.text


def test_a_lease_outlasts_the_longest_attempt_and_its_recording():
    longest = max(limits.NOTIFICATION_WEBHOOK_SECONDS, limits.NOTIFICATION_EMAIL_SECONDS)
    assert LEASE_SECONDS == limits.NOTIFICATION_LEASE_SECONDS >= longest + limits.NOTIFICATION_RECORD_SECONDS
    assert limits.NOTIFICATION_RECORD_SECONDS > 0


def test_a_slow_mail_server_is_cut_off_by_the_attempts_deadline(hub, cli, sql, app, inbox, tmp_path,
                                                                monkeypatch):
    deadline = 1.5
    monkeypatch.setattr(limits, "NOTIFICATION_EMAIL_SECONDS", deadline)
    channels(cli, tmp_path, mail())
    pending(hub, "customer_update_credit_limit", CREDIT)
    inbox.pause = 0.6  # each of two recipients and the message: within a command's timeout, not the session's

    assert deliver(app).retrying == 1

    [row] = deliveries(sql)
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert row["error"] == f"no complete answer from 127.0.0.1:{inbox.port} within 1.5 s"
    [took] = attempt_seconds(sql)
    assert deadline <= took < deadline + 5
    assert inbox.envelopes == []
    inbox.pause = 0
    make_due(sql)
    assert deliver(app).delivered == 1 and len(inbox.envelopes) == 1


# ================================================================ what leaves the hub, and what it shows

URL_SECRETS = ("T0PATHSECRET", "B0PATHSECRET", "QUERYSECRET42")


def secret_url(base: str) -> str:
    """`base` (scheme, host and port) with a path and query holding a key, as chat services do."""
    return f"{base}/services/T0PATHSECRET/B0PATHSECRET?token=QUERYSECRET42"


def test_a_webhook_url_is_never_stored_shown_or_logged_beyond_its_origin(
        hub, cli, sql, app, server, receiver, secret, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="admin_app")
    monkeypatch.setattr(limits, "NOTIFICATION_WEBHOOK_SECONDS", 2)
    make_admin(cli, "approver-1", "approver")
    refused = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    here = receiver.url.removesuffix("/hooks/approvals")
    trickler = Trickler(pace=0.3, path="/")
    slow = trickler.url.removesuffix("/")
    # A receiver that names its own URL in its answer, as some error pages do.
    receiver.fail, receiver.status, receiver.reason = 2, 404, f"No hook at {secret_url(here)} (path {secret_url('')})"
    try:
        applied = channels(cli, tmp_path, {**webhook(receiver, "refused"), "url": secret_url(refused)},
                           {**webhook(receiver, "echoing"), "url": secret_url(here)},
                           {**webhook(receiver, "slow"), "url": secret_url(slow)})
        pending(hub, "customer_update_credit_limit", CREDIT)
        assert deliver(app).retrying == 3
        make_due(sql)
        code, out, err = cli("notifications", "deliver", "--once")
        assert code == 0 and out["retrying"] == 3, err
    finally:
        trickler.stop()
    # The receivers were reached at their paths: the secret is used, only never shown.
    assert receiver.requests[0]["path"] == "/services/T0PATHSECRET/B0PATHSECRET?token=QUERYSECRET42"
    errors = {d["channel"]: d["error"] for d in deliveries(sql)}
    assert errors == {"refused": f"ConnectionRefusedError: [Errno 111] Connection refused ({refused})",
                      "echoing": f"HTTP 404 No hook at {here}/… (path …)",
                      "slow": f"no complete answer from {slow} within 2 s"}
    stored = sql("SELECT d.last_error, a.error FROM bz_approval_deliveries d "
                 "JOIN bz_approval_delivery_attempts a ON a.delivery_id = d.id")
    # An error an older version recorded, with the whole URL in it, is shown redacted too.
    old = (f"ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: "
           f"{secret_url('')} (Caused by NewConnectionError('Failed to establish a new connection'))")
    sql("UPDATE bz_approval_deliveries SET last_error = %s WHERE channel = 'refused'", (old,))
    page = signed_in(server.url, "approver-1").get("/console/notifications/").text
    assert f"({refused})" not in page and "Max retries exceeded with url: …" in page
    for place, text in {"the records": json.dumps(stored), "the page": page, "the logs": caplog.text,
                        "the command": json.dumps([out, err]), "the configuration report": json.dumps(applied)}.items():
        for secret_part in URL_SECRETS:
            assert secret_part not in text, (place, secret_part)
        assert "/services" not in text, place
    assert here in page and slow in page


HIDDEN_IN_SUMMARY = "refund \u202egnp.exe\u200b\u200b done\x1b[2J\x07 \U000e0041"
MARKED_SUMMARY = "refund ⟨RLO⟩gnp.exe⟨ZWSP ×2⟩ done⟨ESC⟩[2J⟨U+0007⟩ ⟨TAG A⟩"  # noqa: RUF001 - the markers' sign
RAW_HIDDEN = ("\u202e", "\u200b", "\x1b", "\x07", "\U000e0041")


def test_hidden_characters_reach_no_mail_or_webhook_but_as_markers(hub, cli, sql, app, receiver, inbox, secret,
                                                                   tmp_path):
    channels(cli, tmp_path, webhook(receiver), mail())
    number = pending(hub, "customer_update_credit_limit", CREDIT)
    # What an agent's arguments could have put in the bounded summary, and on whose behalf.
    sql("UPDATE bz_tool_approvals SET summary = %s, on_behalf_of = %s WHERE number = %s",
        (HIDDEN_IN_SUMMARY, "tenant-7:\u202euser-42", number))

    assert deliver(app).delivered == 2

    [request] = receiver.requests
    raw = request["body"].decode()
    payload = json.loads(raw)["approval"]
    assert (payload["summary"], payload["on_behalf_of"]) == (MARKED_SUMMARY, "tenant-7:⟨RLO⟩user-42")
    assert not any(char in raw for char in RAW_HIDDEN)
    assert "\\u00" not in raw and "\\u20" not in raw  # nor escaped in the JSON
    [envelope] = inbox.envelopes
    [received] = inbox.messages()
    body = received.get_content()
    assert MARKED_SUMMARY in body and "On behalf of:  tenant-7:⟨RLO⟩user-42" in body
    assert not any(char in body or char in received["Subject"] for char in RAW_HIDDEN)
    assert b"\x1b" not in envelope.content and b"\x07" not in envelope.content


def test_hidden_characters_in_a_subject_are_marked():
    notice = _notice(tool="merge\u202eexe.txt", route="desk\u200b", risk="high\x1b[0m")
    assert message.subject(notice) == "Approval #7 waiting: merge⟨RLO⟩exe.txt on desk⟨ZWSP⟩ (high⟨ESC⟩[0m)"
    mail_message = message.email(notice, sender=SENDER, recipients=["a@example.com"], public_url=None,
                                 delivery_id=uuid.uuid4())
    parsed = email.message_from_bytes(mail_message.as_bytes(), policy=policy.default)
    assert parsed["Subject"] == message.subject(notice)


@pytest.mark.parametrize("text, shown", [
    # The channel's own URL, whole, in pieces, quoted or unquoted.
    ("at https://hooks.example.com/services/T0PATHSECRET/B0PATHSECRET?token=QUERYSECRET42 now",
     "at https://hooks.example.com/… now"),
    ("url: /services/T0PATHSECRET/B0PATHSECRET?token=QUERYSECRET42 (Caused by X)", "url: … (Caused by X)"),
    ("no T0PATHSECRET here, nor QUERYSECRET42", "no … here, nor …"),
    # Another URL (the channel's before it changed), and a path as urllib3 quoted it.
    ("Max retries exceeded with url: /hooks/OLDSECRET?k=1 (Caused by NewConnectionError)",
     "Max retries exceeded with url: … (Caused by NewConnectionError)"),
    ("moved to https://other.example.com:8443/OLDSECRET/x", "moved to https://other.example.com:8443/…"),
    # The origin is kept, and so is everything else.
    ("ConnectionRefusedError: [Errno 111] Connection refused (https://hooks.example.com)",
     "ConnectionRefusedError: [Errno 111] Connection refused (https://hooks.example.com)"),
])
def test_an_error_keeps_a_webhook_url_to_its_origin(text, shown):
    url = secret_url("https://hooks.example.com")
    assert redact.scrub(text, url) == shown
    assert redact.origin(url) == "https://hooks.example.com"


def test_a_url_quoted_otherwise_than_configured_is_kept_to_its_origin_too():
    quoted = "https://hooks.example.com/services/T0%50ATHSECRET"  # %50 is P
    assert redact.scrub("POST /services/T0PATHSECRET failed", quoted) == "POST … failed"
    assert redact.scrub("POST /services/T0%50ATHSECRET failed", quoted) == "POST … failed"


# ================================================================ configuration

def test_channels_are_stored_reported_and_left_alone_by_files_without_them(governed, cli, sql, receiver, tmp_path):
    first = channels(cli, tmp_path, webhook(receiver, routes=[ROUTE], tools=["customer_merge"]), mail())
    assert first["created"]["approval_notifications"] == ["ops-hook", "approvers"]
    stored = sql("SELECT name, kind, url, secret_env, recipients, routes, tools, enabled FROM bz_approval_channels "
                 "ORDER BY name")
    assert stored == [
        ("approvers", "email", None, None, ["approvers@example.com", "duty@example.com"], [], [], True),
        ("ops-hook", "webhook", receiver.url, SECRET_ENV, [], [ROUTE], ["customer_merge"], True)]
    assert SECRET not in json.dumps(stored)

    again = channels(cli, tmp_path, webhook(receiver, routes=[ROUTE], tools=["customer_merge"]),
                     mail(enabled=False))
    assert again["unchanged"]["approval_notifications"] == ["ops-hook"]
    assert again["changed"]["approval_notifications"] == ["approvers (enabled)"]
    # A file without the section (or naming other channels) changes no channel it does not name.
    other = apply_config(cli, tmp_path, {"routes": [], "client_apps": []})
    assert "approval_notifications" not in other["created"]
    channels(cli, tmp_path, webhook(receiver, "third"))
    assert [r[0] for r in sql("SELECT name FROM bz_approval_channels ORDER BY name")] == [
        "approvers", "ops-hook", "third"]


def test_check_reports_channels_and_writes_nothing(governed, cli, sql, receiver, tmp_path):
    path = tmp_path / "check.json"
    path.write_text(json.dumps({"approval_notifications": [webhook(receiver)]}))
    code, out, err = cli("config", "apply", str(path), "--check")
    assert code == 0, err
    assert out["checked"] is True and out["created"]["approval_notifications"] == ["ops-hook"]
    assert row_counts(sql, *CHANNEL_TABLES) == dict.fromkeys(CHANNEL_TABLES, 0)


def _bad(receiver_url: str, field: str, value, kind: str = "webhook") -> dict:
    good = ({"name": "ops-hook", "kind": "webhook", "url": receiver_url, "secret_env": SECRET_ENV}
            if kind == "webhook" else {"name": "approvers", "kind": "email", "to": ["a@example.com"]})
    return {**good, field: value}


DELETE = object()


@pytest.mark.parametrize("kind, field, value, path, says", [
    ("webhook", "name", "Ops Hook", "approval_notifications[0].name", "must match"),
    ("webhook", "name", DELETE, "approval_notifications[0].name", "is required"),
    ("webhook", "kind", "sms", "approval_notifications[0].kind", "must be 'webhook' or 'email'"),
    ("webhook", "url", "http://hooks.example.com/approvals", "approval_notifications[0].url", "must be https"),
    ("webhook", "url", "https://user:pw@hooks.example.com/", "approval_notifications[0].url", "credentials"),
    ("webhook", "url", "ftp://hooks.example.com/", "approval_notifications[0].url", "http(s) URL"),
    ("webhook", "url", DELETE, "approval_notifications[0].url", "is required"),
    ("webhook", "secret_env", "ops-hook-secret", "approval_notifications[0].secret_env", "environment variable"),
    ("webhook", "secret_env", DELETE, "approval_notifications[0].secret_env", "is required"),
    ("webhook", "to", ["a@example.com"], "approval_notifications[0].to", "is not a known field"),
    ("webhook", "headers", {"X": "1"}, "approval_notifications[0].headers", "is not a known field"),
    ("webhook", "routes", ["nowhere"], "approval_notifications[0].routes[0]", "no route named 'nowhere'"),
    ("webhook", "routes", "desk", "approval_notifications[0].routes", "must be a list"),
    ("webhook", "tools", ["no_such_tool"], "approval_notifications[0].tools[0]", "not a tool of any"),
    ("webhook", "tools", ["bad name"], "approval_notifications[0].tools[0]", "must match"),
    ("webhook", "enabled", "yes", "approval_notifications[0].enabled", "must be true or false"),
    ("email", "to", [], "approval_notifications[0].to", "1 to 20"),
    ("email", "to", [f"a{i}@example.com" for i in range(21)], "approval_notifications[0].to", "at most 20"),
    ("email", "to", ["not-an-address"], "approval_notifications[0].to[0]", "plain e-mail address"),
    ("email", "to", ["a@example.com\r\nBcc: b@example.com"], "approval_notifications[0].to[0]", "e-mail address"),
    ("email", "to", ["Ann <a@example.com>"], "approval_notifications[0].to[0]", "e-mail address"),
    ("email", "to", ["a@example.com", "a@example.com"], "approval_notifications[0].to[1]", "listed twice"),
    ("email", "to", DELETE, "approval_notifications[0].to", "is required"),
    ("email", "url", "https://hooks.example.com/", "approval_notifications[0].url", "is not a known field"),
    ("email", "secret_env", "X", "approval_notifications[0].secret_env", "is not a known field"),
])
def test_each_bad_channel_field_is_refused_by_its_path_and_nothing_is_written(
        governed, cli, sql, receiver, tmp_path, kind, field, value, path, says):
    channel = _bad(receiver.url, field, value, kind)
    if value is DELETE:
        del channel[field]
    before = row_counts(sql, *CHANNEL_TABLES, "bz_routes", "bz_tool_providers")
    file = tmp_path / "bad.json"
    # A valid route in the same file is not written either.
    file.write_text(json.dumps({"routes": [{"route_key": "back-office", "name": "Back office"}],
                                "approval_notifications": [channel]}))

    code, out, err = cli("config", "apply", str(file))

    assert code == 1 and out == ""
    assert err["error"] == "invalid_request"
    problems = {p["path"]: p["message"] for p in err["problems"]}
    assert path in problems and says in problems[path], problems
    assert row_counts(sql, *CHANNEL_TABLES, "bz_routes", "bz_tool_providers") == before


def test_duplicate_names_and_a_section_that_is_not_a_list_are_refused(governed, cli, sql, receiver, tmp_path):
    file = tmp_path / "dup.json"
    file.write_text(json.dumps({"approval_notifications": [webhook(receiver), mail("ops-hook")]}))
    code, _, err = cli("config", "apply", str(file))
    assert code == 1
    assert [(p["path"], p["message"]) for p in err["problems"]] == [
        ("approval_notifications[1].name", "'ops-hook' is defined twice (also at approval_notifications[0])")]
    file.write_text(json.dumps({"approval_notifications": {"ops-hook": webhook(receiver)}}))
    code, _, err = cli("config", "apply", str(file))
    assert code == 1
    assert [p["path"] for p in err["problems"]] == ["approval_notifications"]
    assert row_counts(sql, *CHANNEL_TABLES) == dict.fromkeys(CHANNEL_TABLES, 0)


# ================================================================ the console's list

def test_the_deliveries_page_needs_approvals_read_and_shows_errors_escaped(
        hub, cli, sql, app, server, hub_app, receiver, secret, tmp_path):
    make_admin(cli, "approver-1", "approver")
    make_admin(cli, "support-1", "support")
    channels(cli, tmp_path, webhook(receiver))
    receiver.fail, receiver.reason = 1, "<b>Down</b> & out"
    number = pending(hub, "customer_update_credit_limit", CREDIT)
    deliver(app)
    approver = signed_in(server.url, "approver-1")

    assert signed_in(server.url, "support-1").get("/console/notifications/").status_code == 403
    assert approver.get("/console/notifications/?status=lost").status_code == 400
    assert approver.get("/console/notifications/?cursor=junk").status_code == 400
    page = approver.get("/console/notifications/")
    assert page.status_code == 200
    assert f"#{number} customer_update_credit_limit" in page.text
    assert "HTTP 500 &lt;b&gt;Down&lt;/b&gt; &amp; out" in page.text and "<b>Down</b>" not in page.text
    assert "BAILING_PUBLIC_URL is not set" not in page.text
    assert "customer_update_credit_limit" in approver.get("/console/notifications/?status=pending").text
    assert "No notification is delivered." in approver.get("/console/notifications/?status=delivered").text
    # A hub without BAILING_PUBLIC_URL says that its notifications carry no link.
    bare = hub_app()
    assert "BAILING_PUBLIC_URL is not set" in signed_in(bare.url, "approver-1").get("/console/notifications/").text


def test_the_deliveries_list_pages_by_keyset(hub, cli, sql, app, server, receiver, secret, tmp_path, monkeypatch):
    from admin_app.console import notifications as view

    monkeypatch.setattr(view, "PAGE", 2)
    make_admin(cli, "approver-1", "approver")
    channels(cli, tmp_path, webhook(receiver))
    numbers = [pending(hub, "customer_update_credit_limit", {**CREDIT, "credit_limit": 20000 + n})
               for n in range(5)]
    approver = signed_in(server.url, "approver-1")
    seen: list[int] = []
    page = approver.get("/console/notifications/").text
    for _ in range(5):
        seen += [int(n) for n in re.findall(r">#(\d+) customer_update_credit_limit<", page)]
        more = re.search(r'<tr class="more" hx-get="([^"]+)"', page)
        if more is None:
            break
        page = approver.get(unescape(more.group(1)), headers={"HX-Request": "true"}).text
        assert "<html" not in page and "<h1>" not in page and page.lstrip().startswith("<tr")  # the rows alone
    assert seen == sorted(numbers, reverse=True)


# ================================================================ settings

@pytest.mark.parametrize("name, value, says", [
    ("BAILING_PUBLIC_URL", "ftp://hub.example.com", "http(s) URL"),
    ("BAILING_PUBLIC_URL", "https://user:pw@hub.example.com", "credentials"),
    ("BAILING_PUBLIC_URL", "https://hub.example.com/?a=1", "query"),
    ("BAILING_PUBLIC_URL", "https://hub.example.com:port", "not a valid URL"),
    ("BAILING_NOTIFICATIONS", "maybe", "on or off"),
    ("BAILING_SMTP_FROM", "hub@example.com\r\nBcc: x@example.com", "line breaks"),
    ("BAILING_NOTIFICATION_MAX_ATTEMPTS", "0", "at least 1"),
])
def test_bad_notification_settings_stop_the_process_with_their_name(monkeypatch, name, value, says):
    from admin_app.config import Settings

    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        Settings.from_env()
    assert name in str(stopped.value) and says in str(stopped.value)


def test_notification_settings_are_read_from_the_environment(monkeypatch):
    from admin_app.config import Settings

    for name, value in {"BAILING_PUBLIC_URL": "https://hub.example.com/", "BAILING_NOTIFICATIONS": "off",
                        "BAILING_SMTP_STARTTLS": "off", "BAILING_SMTP_PORT": "2525"}.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert (settings.public_url, settings.notifications, settings.smtp_starttls, settings.smtp_port) == (
        "https://hub.example.com", False, False, 2525)
