"""Completion callbacks of Client API jobs and their dead-letter list (CLIENT_API_AND_EXECUTOR.md
§D.1, §D.3): a finished job's record posted signed to a REAL webhook receiver on loopback, which
checks the signature as Core's SDK `verify_callback` does (written here from the spec's words,
not from the hub's code); Core's schedule and its 4xx-final rule; the dead letters in the admin
API, the command line and the console; replay and resolve.

Finished jobs are made without the executor path: a job row inserted by SQL, then finished and
queued in one session (`callbacks.enqueue`, as the result handler calls it). Deliveries run in the
test's own thread (`deliver_one`), with the schedule shortened through the settings; a wait of
Core's schedule is never slept through: the tests move `next_at` in the database instead."""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

import pytest
import requests

from admin_app import create_app
from admin_app.canonical import utc_now
from admin_app.jobs import callback_worker, callbacks
from admin_app.jobs.models import Job
from admin_app.jobs.view import job_record
from tests.conftest import governed_config, serve
from tests.helpers import LoopbackServer, admin_token, apply_config, bearer, make_admin, row_counts
from tests.test_console_server import csrf_of, signed_in

# Secrets a receiver keeps in its URL: neither may be shown or logged by the hub.
HOOK_PATH = "/hooks/path-secret-7f3a9c"
HOOK_QUERY = "token=query-secret-91b2e4"
TABLES = ("bz_job_callbacks", "bz_job_callback_attempts", "bz_job_events")
FIVE_MINUTES_MS = 5 * 60 * 1000


# ================================================================ the receiver's side

def verify_callback(body: bytes, timestamp: str | None, signature: str | None, secret: str,
                    now_ms: int | None = None) -> bool:
    """Core's SDK check, from the spec (§D.1 "receiver check", SDK `verify_callback`): the
    timestamp is unix milliseconds within 5 minutes of now; the signature is `sha256=` and the hex
    HMAC-SHA256 under the secret of `<timestamp>.<raw body>`, compared in constant time."""
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if abs(now_ms - int(timestamp)) > FIVE_MINUTES_MS:
        return False
    expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


class Receiver:
    """A webhook receiver on loopback: records every request; `answers` scripts the next statuses
    (and reason phrases), then 204. `verify_with` names the secret each request is checked with."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: list[tuple[int, str | None, dict[str, str]]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                              "method": self.command})
                    status, reason, headers = receiver.answers.pop(0) if receiver.answers else (204, None, {})
                self.send_response(status, reason)
                for name, value in headers.items():
                    self.send_header(name, value)
                answer = b"x" * 100_000 if status == 200 else b""  # a large answer the hub never reads
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                try:
                    self.wfile.write(answer)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_port}"
        self.url = f"{self.origin}{HOOK_PATH}?{HOOK_QUERY}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def script(self, *statuses: int | tuple[int, str] | tuple[int, str, dict[str, str]]) -> None:
        for status in statuses:
            entry = status if isinstance(status, tuple) else (status, None)
            self.answers.append((entry[0], entry[1], entry[2] if len(entry) > 2 else {}))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    instance = Receiver()
    yield instance
    instance.stop()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ================================================================ the hub's side

@pytest.fixture
def app(db_url, tmp_path):
    """The suite's app (no worker thread); its schedule is Core's, and the tests pass their own."""
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "var"})
    yield application
    application.extensions["bailing"].db.dispose()


class World:
    """The demo configuration (app `ops-app`, route `desk`) with a sealed Client Token."""

    def __init__(self, app, server, cli, sql, business, tmp_path):
        self.app, self.server, self.cli, self.sql = app, server, cli, sql
        apply_config(cli, tmp_path, governed_config(business.url))
        self.token = self.issue_token()
        self.hub = app.extensions["bailing"]

    def issue_token(self) -> str:
        code, out, err = self.cli("clients", "token", "ops-app")
        assert code == 0, err
        return str(out["client_token"])

    def settings(self, *delays: float, timeout: float = 3.0):
        return self.hub.settings.replace(job_callback_retry_seconds=tuple(delays) if delays else (0.0, 0.0),
                                         job_callback_timeout_seconds=timeout)

    def finished_job(self, url: str | None, status: str = "done", result=None, error: str | None = None) -> str:
        """A job of ops-app, inserted queued, then finished and queued for its callback in one
        transaction (as the result handler does)."""
        job_id = uuid.uuid4()
        self.sql("INSERT INTO bz_jobs (id, request_id, client_app_id, route_key, target, status, input, metadata, "
                 "callback_url, session_id, thread_key) VALUES (%s, %s, 'ops-app', 'desk', 'desk-worker', 'queued', "
                 "%s, %s, %s, %s, %s)",
                 (job_id, f"req-{job_id}", "Look up customer C-1001 — ünïcode", json.dumps({"ticket": "T-7"}),
                  url, str(uuid.uuid4()), f"req:{job_id}"))
        self.finish(str(job_id), status, result, error)
        return str(job_id)

    def finish(self, job_id: str, status: str = "done", result=None, error: str | None = None) -> None:
        with self.hub.db.session() as db:
            job = db.get(Job, uuid.UUID(job_id))
            job.status = status
            job.result = {"text": "Customer C-1001: ACME — 42 €", "n": 1.0} if result is None else result
            job.error = error
            job.finished_at = job.updated_at = utc_now()
            callbacks.enqueue(db, job)

    def deliver(self, settings=None):
        return callback_worker.deliver_one(self.hub.db, settings or self.settings(), self.app.secret_key)

    def callback(self, job_id: str) -> dict:
        rows = self.sql("SELECT id, state, attempts, last_status, last_error, body, died_at, resolved_at, resolved_by, "
                        "replayed_by, url FROM bz_job_callbacks WHERE job_id = %s ORDER BY id DESC", (job_id,))
        assert rows, "no callback was queued"
        keys = ("id", "state", "attempts", "last_status", "last_error", "body", "died_at", "resolved_at",
                "resolved_by", "replayed_by", "url")
        return dict(zip(keys, rows[0]))

    def attempts(self, callback_id: int) -> list[tuple]:
        return self.sql("SELECT attempt, http_status, error, duration_ms FROM bz_job_callback_attempts "
                        "WHERE callback_id = %s ORDER BY attempt", (callback_id,))

    def events(self, job_id: str) -> list[tuple]:
        return self.sql("SELECT event, actor, detail FROM bz_job_events WHERE job_id = %s ORDER BY id", (job_id,))

    def make_due(self, callback_id: int) -> None:
        self.sql("UPDATE bz_job_callbacks SET next_at = now() WHERE id = %s", (callback_id,))

    def dead_job(self, receiver: Receiver) -> tuple[str, dict]:
        """A job whose callback the receiver refused (404): dead after one attempt."""
        receiver.script((404, "No Such Hook"))
        job_id = self.finished_job(receiver.url)
        assert self.deliver() == "dead"
        return job_id, self.callback(job_id)


@pytest.fixture
def world(app, server, cli, sql, business, tmp_path):
    return World(app, server, cli, sql, business, tmp_path)


def checked(receiver: Receiver, secret: str) -> list[dict]:
    """Every request the receiver got, each verified as Core's SDK verifies it."""
    for request in receiver.requests:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert request["method"] == "POST"
        assert headers["content-type"] == "application/json"
        assert verify_callback(request["body"], headers.get("x-bailing-timestamp"),
                               headers.get("x-bailing-signature"), secret), headers
    return receiver.requests


# ================================================================ the receiver's check itself

@pytest.mark.any_server
def test_the_receivers_check_refuses_a_wrong_secret_an_old_timestamp_and_a_changed_body():
    body, secret = b'{"job_id":"x"}', "client-token-0123456789abcdef"
    stamp = str(time.time_ns() // 1_000_000)
    good = callbacks.signature(secret, stamp, body)
    assert verify_callback(body, stamp, good, secret)
    assert not verify_callback(body, stamp, good, secret + "x")
    assert not verify_callback(body + b" ", stamp, good, secret)
    assert not verify_callback(body, stamp, good.replace("sha256=", "sha1="), secret)
    old = str(int(stamp) - FIVE_MINUTES_MS - 1)
    assert not verify_callback(body, old, callbacks.signature(secret, old, body), secret)
    seconds = str(int(stamp) // 1000)  # seconds, not milliseconds: five decades off
    assert not verify_callback(body, seconds, callbacks.signature(secret, seconds, body), secret)


# ================================================================ delivery

def test_a_finished_job_posts_its_record_once_signed_with_the_client_token(world, receiver, sql):
    job_id = world.finished_job(receiver.url)

    assert world.deliver() == "delivered"
    assert world.deliver() is None  # nothing more is due

    (request,) = checked(receiver, world.token)
    assert request["path"] == f"{HOOK_PATH}?{HOOK_QUERY}"  # the URL as the client gave it
    stored = world.callback(job_id)
    assert request["body"] == stored["body"].encode("utf-8")  # the exact bytes queued and signed
    sent = json.loads(request["body"])
    with world.hub.db.session() as db:
        assert sent == job_record(db.get(Job, uuid.UUID(job_id)))  # the final record, as GET /jobs shows it
    assert sent["status"] == "done" and sent["job_id"] == job_id and sent["callback_url"] == receiver.url
    assert b'"n":1,' in request["body"] and "ünïcode".encode() in request["body"]  # as JSON.stringify writes
    polled = requests.get(f"{world.server.url}/jobs/{job_id}", headers=bearer(world.token), timeout=30)
    assert polled.status_code == 200 and polled.json() == sent
    assert (stored["state"], stored["attempts"], stored["last_status"]) == ("delivered", 1, 204)
    assert stored["died_at"] is None
    ((attempt, status, error, duration),) = world.attempts(stored["id"])
    assert (attempt, status, error) == (1, 204, None) and duration in range(3000)
    events = [(e, d) for e, _, d in world.events(job_id)]
    assert events == [
        ("callback_queued", {"callback_id": stored["id"], "url": f"{receiver.origin}/…"}),
        ("callback", {"callback_id": stored["id"], "url": f"{receiver.origin}/…", "ok": True, "attempt": 1,
                      "status": 204}),
    ]


def test_an_error_is_posted_too_and_each_finish_posts_again(world, receiver):
    job_id = world.finished_job(receiver.url, status="error", result={}, error="the executor failed")
    world.finish(job_id, status="done")  # a rerun finished: a second record, a second post

    assert world.deliver() == "delivered"
    assert world.deliver() == "delivered"

    first, second = (json.loads(r["body"]) for r in checked(receiver, world.token))
    assert (first["status"], first["error"]) == ("error", "the executor failed")
    assert second["status"] == "done" and "error" not in second
    assert first["job_id"] == second["job_id"] == job_id  # receivers dedupe by job_id


def test_no_callback_is_queued_without_a_url_nor_for_a_job_that_did_not_finish(world, sql):
    before = row_counts(sql, "bz_job_callbacks")
    world.finished_job(None)
    world.finished_job("http://127.0.0.1:9/hook", status="rejected", error="budget exceeded")
    assert row_counts(sql, "bz_job_callbacks") == before
    assert world.deliver() is None


def test_a_500_then_a_200_is_two_attempts_on_cores_schedule(world, receiver, sql):
    receiver.script((500, "Internal Server Error"), 200)
    job_id = world.finished_job(receiver.url)
    core = world.settings(2.0, 10.0)

    assert world.deliver(core) == "retrying"
    callback = world.callback(job_id)
    assert (callback["state"], callback["attempts"], callback["last_status"]) == ("pending", 1, 500)
    (delay,) = sql("SELECT EXTRACT(EPOCH FROM next_at - updated_at) FROM bz_job_callbacks WHERE id = %s",
                   (callback["id"],))[0]
    assert abs(float(delay) - 2.0) <= 0.05  # the second attempt 2 s later
    assert world.deliver(core) is None  # not due yet
    world.make_due(callback["id"])
    assert world.deliver(core) == "delivered"

    assert len(checked(receiver, world.token)) == 2
    assert [(a, s) for a, s, _, _ in world.attempts(callback["id"])] == [(1, 500), (2, 200)]
    assert world.callback(job_id)["state"] == "delivered"


def test_the_third_attempt_comes_10_s_after_the_second_and_is_the_last(world, receiver, sql):
    receiver.script(503, 503, 503, 200)
    job_id = world.finished_job(receiver.url)
    core = world.settings(2.0, 10.0)
    assert world.deliver(core) == "retrying"
    callback_id = world.callback(job_id)["id"]
    world.make_due(callback_id)
    assert world.deliver(core) == "retrying"
    (delay,) = sql("SELECT EXTRACT(EPOCH FROM next_at - updated_at) FROM bz_job_callbacks WHERE id = %s",
                   (callback_id,))[0]
    assert 9.95 <= float(delay) <= 10.05
    world.make_due(callback_id)
    assert world.deliver(core) == "dead"
    assert len(receiver.requests) == 3  # never a fourth
    assert world.callback(job_id)["last_error"] == "HTTP 503 Service Unavailable"


def test_a_404_is_final_after_one_attempt_and_the_callback_is_dead(world, receiver):
    job_id, callback = world.dead_job(receiver)

    assert len(checked(receiver, world.token)) == 1
    assert (callback["state"], callback["attempts"], callback["last_status"]) == ("dead", 1, 404)
    assert callback["last_error"] == "HTTP 404 No Such Hook" and callback["died_at"] is not None
    names = [e for e, _, _ in world.events(job_id)]
    assert names == ["callback_queued", "callback", "callback_dead"]
    assert world.events(job_id)[1][2]["final"] is True


def test_a_429_is_retried(world, receiver):
    receiver.script(429, 429, 201)
    job_id = world.finished_job(receiver.url)
    assert [world.deliver() for _ in range(3)] == ["retrying", "retrying", "delivered"]
    assert [s for _, s, _, _ in world.attempts(world.callback(job_id)["id"])] == [429, 429, 201]


def test_a_redirect_is_not_followed_and_is_final(world, receiver):
    other = Receiver()
    try:
        receiver.script((302, "Found", {"Location": other.url}))
        job_id = world.finished_job(receiver.url)
        assert world.deliver() == "dead"
        assert len(receiver.requests) == 1 and other.requests == []
        assert "redirects are not followed" in world.callback(job_id)["last_error"]
    finally:
        other.stop()


def test_a_refused_connection_is_retried_then_dead(world):
    url = f"http://127.0.0.1:{closed_port()}{HOOK_PATH}?{HOOK_QUERY}"
    job_id = world.finished_job(url)
    assert [world.deliver() for _ in range(3)] == ["retrying", "retrying", "dead"]
    callback = world.callback(job_id)
    assert (callback["state"], callback["attempts"], callback["last_status"]) == ("dead", 3, None)
    attempts = world.attempts(callback["id"])
    assert [(a, s) for a, s, _, _ in attempts] == [(1, None), (2, None), (3, None)]
    for _, _, error, _ in attempts:
        assert "ConnectionRefusedError" in error and "path-secret" not in error and "query-secret" not in error


def test_a_receiver_that_does_not_answer_in_time_is_retried(world):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    try:
        job_id = world.finished_job(f"http://127.0.0.1:{silent.getsockname()[1]}{HOOK_PATH}")
        started = time.monotonic()
        assert world.deliver(world.settings(timeout=0.5)) == "retrying"
        assert time.monotonic() - started < 3
        assert "within 0.5 s" in world.callback(job_id)["last_error"]
    finally:
        silent.close()


def test_without_a_sealed_token_nothing_is_sent_and_the_callback_dies_saying_why(world, receiver, cli):
    code, _, err = cli("clients", "revoke-token", "ops-app")
    assert code == 0, err
    job_id = world.finished_job(receiver.url)

    assert [world.deliver() for _ in range(3)] == ["retrying", "retrying", "dead"]
    assert receiver.requests == []  # never unsigned
    callback = world.callback(job_id)
    assert callback["last_error"].startswith("the client token must be reissued")

    token = world.issue_token()  # reissued: a replay signs with the new token
    code, out, err = cli("jobs", "callback-replay", str(callback["id"]))
    assert code == 0, (out, err)
    assert out["ok"] is True
    checked(receiver, token)
    assert len(receiver.requests) == 1


def test_an_attempt_whose_lease_ran_out_is_recorded_as_lost_and_its_late_outcome_dropped(world, receiver, sql,
                                                                                        caplog):
    job_id = world.finished_job(receiver.url)
    policy = callback_worker.Policy.of(world.settings())
    with world.hub.db.session() as db:
        lost = callback_worker.claim(db, policy, world.app.secret_key, callback_worker.Report())
    assert lost is not None and lost.attempt == 1
    sql("UPDATE bz_job_callbacks SET next_at = now() - interval '1 second', "
        "leased_until = leased_until WHERE id = %s", (lost.callback_id,))  # the lease's time is up
    assert world.deliver() == "delivered"  # attempt 2, by another worker
    with world.hub.db.session() as db:  # the first worker's answer comes late
        late = callback_worker.record(db, lost, callback_worker.Outcome(False, 500, "HTTP 500"), 10, policy)
    assert late is None and "the outcome is dropped" in caplog.text
    callback = world.callback(job_id)
    assert (callback["state"], callback["attempts"]) == ("delivered", 2)
    assert [(a, s, e) for a, s, e, _ in world.attempts(callback["id"])] == [
        (1, None, callback_worker.INTERRUPTED), (2, 204, None)]


def test_the_background_worker_posts_when_a_job_finishes(db_url, tmp_path, cli, receiver, business, sql):
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "var", "job_callbacks": True,
                              "job_callback_poll_seconds": 30.0})
    live = serve(application)
    try:
        world = World(application, live, cli, sql, business, tmp_path)
        live.get("/health")  # the first request starts the thread
        world.finished_job(receiver.url)  # the bell wakes it; the poll would take 30 s
        deadline = time.monotonic() + 10
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        checked(receiver, world.token)
        assert len(receiver.requests) == 1
    finally:
        application.extensions["bailing.job_callbacks"].stop()
        live.stop()
        application.extensions["bailing"].db.dispose()


def test_the_command_delivers_what_is_due_where_no_thread_runs(world, receiver, cli):
    receiver.script(500)
    world.finished_job(receiver.url)
    world.finished_job(receiver.url)
    code, out, err = cli("jobs", "deliver-callbacks", "--once")
    assert code == 0, err
    # Core's schedule: the failed one waits 2 s for its next attempt, after this pass.
    assert out == {"delivered": 1, "retrying": 1, "dead": 0, "interrupted": 0, "lease_lost": 0}
    assert len(checked(receiver, world.token)) == 2


@pytest.mark.any_server
def test_the_switch_is_read_from_the_environment(monkeypatch):
    from admin_app.config import Settings

    monkeypatch.delenv("BAILING_JOB_CALLBACKS", raising=False)
    assert Settings.from_env().job_callbacks is True
    monkeypatch.setenv("BAILING_JOB_CALLBACKS", "off")
    assert Settings.from_env().job_callbacks is False
    monkeypatch.setenv("BAILING_JOB_CALLBACKS", "maybe")
    with pytest.raises(SystemExit, match="BAILING_JOB_CALLBACKS must be on or off"):
        Settings.from_env()


# ================================================================ the dead-letter list

DLQ = "/admin/api/delivery-dlq"


def test_a_dead_letter_is_listed_replayed_and_then_resolved_by_the_replay(world, receiver, cli, server):
    job_id, dead = world.dead_job(receiver)
    token = admin_token(cli, "ops-admin", "admin")

    listed = server.get(DLQ, headers=bearer(token))
    assert listed.status_code == 200 and listed.headers["Cache-Control"] == "no-store"
    (item,) = listed.json()["items"]
    assert {k: item[k] for k in ("id", "parent_job_id", "channel", "recipient", "error", "resolved", "resolved_at")} \
        == {"id": dead["id"], "parent_job_id": job_id, "channel": "callback", "recipient": f"{receiver.origin}/…",
            "error": "HTTP 404 No Such Hook", "resolved": False, "resolved_at": None}
    assert item["content_preview"].startswith('{"job_id":"' + job_id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", item["created_at"])

    code, out, err = cli("jobs", "callbacks", "--dead")
    assert code == 0, err
    assert [i["id"] for i in out["items"]] == [dead["id"]]

    resent = server.post(f"{DLQ}/{dead['id']}/resend", headers=bearer(token))  # the receiver takes it now
    assert (resent.status_code, resent.json()) == (200, {"ok": True})
    assert len(checked(receiver, world.token)) == 2
    assert receiver.requests[1]["body"] == receiver.requests[0]["body"]  # the same record again
    after = world.callback(job_id)
    assert (after["state"], after["resolved_by"], after["replayed_by"]) == ("delivered", "ops-admin", "ops-admin")
    assert server.get(DLQ, headers=bearer(token)).json() == {"items": []}
    (kept,) = server.get(f"{DLQ}?all=1", headers=bearer(token)).json()["items"]
    assert kept["resolved"] is True and kept["resolved_at"] is not None and kept["state"] == "delivered"
    again = server.post(f"{DLQ}/{dead['id']}/resend", headers=bearer(token))
    assert (again.status_code, again.json()) == (200, {"ok": True, "note": "already resolved"})
    assert len(receiver.requests) == 2
    names = [(e, a) for e, a, _ in world.events(job_id)]
    assert ("callback_replayed", "ops-admin") in names


def test_a_replay_that_fails_answers_502_and_the_worker_carries_on(world, receiver, cli, server):
    job_id, dead = world.dead_job(receiver)
    token = admin_token(cli, "ops-admin", "admin")
    receiver.script((500, "Still Broken"))

    resent = server.post(f"{DLQ}/{dead['id']}/resend", headers=bearer(token))
    assert resent.status_code == 502
    assert resent.json() == {"ok": False, "error": "HTTP 500 Still Broken", "state": "pending"}
    callback = world.callback(job_id)
    assert (callback["state"], callback["attempts"]) == ("pending", 1)  # a new cycle's first attempt
    busy = server.post(f"{DLQ}/{dead['id']}/resend", headers=bearer(token))
    assert busy.status_code == 409 and busy.json()["ok"] is False
    world.make_due(callback["id"])
    assert world.deliver() == "delivered"
    assert [a for a, _, _, _ in world.attempts(callback["id"])] == [1, 2, 3]  # numbered over its life
    assert world.callback(job_id)["resolved_by"] == "ops-admin"


def test_resolve_takes_a_dead_letter_off_the_list_without_sending(world, receiver, cli, server, sql):
    _, dead = world.dead_job(receiver)
    token = admin_token(cli, "ops-admin", "admin")

    done = server.post(f"{DLQ}/{dead['id']}/resolve", headers=bearer(token))
    assert (done.status_code, done.json()) == (200, {"ok": True})
    assert server.get(DLQ, headers=bearer(token)).json() == {"items": []}
    (item,) = server.get(f"{DLQ}?all=1&limit=5", headers=bearer(token)).json()["items"]
    assert item["resolved"] is True and item["state"] == "dead" and item["resolved_by"] == "ops-admin"
    assert server.post(f"{DLQ}/{dead['id']}/resend", headers=bearer(token)).json() == \
        {"ok": True, "note": "already resolved"}
    assert server.post(f"{DLQ}/{dead['id']}/resolve", headers=bearer(token)).json() == \
        {"ok": True, "note": "already resolved"}
    assert len(receiver.requests) == 1  # nothing sent by either
    # Recorded as Core records every admin write that answered 200 (the second one too).
    assert sql("SELECT count(*) FROM bz_config_audit WHERE path = %s", (f"delivery-dlq/{dead['id']}/resolve",)) \
        == [(2,)]


def test_the_command_line_lists_replays_and_resolves(world, receiver, cli):
    job_id, dead = world.dead_job(receiver)
    receiver.script((500, "Nope"))
    code, out, err = cli("jobs", "callback-replay", str(dead["id"]))
    assert code == 1 and out["ok"] is False and out["error"] == "HTTP 500 Nope"
    code, out, err = cli("jobs", "callbacks", "--job", job_id)
    assert code == 0, err
    (callback,) = out["callbacks"]
    assert callback["state"] == "pending" and callback["url"] == f"{receiver.origin}/…"
    assert [a["http_status"] for a in callback["attempt_log"]] == [404, 500]
    world.make_due(dead["id"])
    receiver.script(404)
    assert world.deliver() == "dead"
    code, out, err = cli("jobs", "callback-resolve", str(dead["id"]))
    assert (code, out["ok"], out["status"]) == (0, True, "resolved")
    code, out, err = cli("jobs", "callbacks", "--dead")
    assert out == {"items": []}
    code, out, err = cli("jobs", "callbacks")
    assert [c["id"] for c in out["callbacks"]] == [dead["id"]]
    code, out, err = cli("jobs", "callback-replay", "999999")
    assert code == 1 and err["error"] == "not_found"


def test_the_dead_letter_endpoints_refuse_and_write_nothing(world, receiver, cli, server, sql):
    _, dead = world.dead_job(receiver)
    support = admin_token(cli, "support-1", "support")
    admin = admin_token(cli, "ops-admin", "admin")
    before = row_counts(sql, *TABLES)

    assert server.get(DLQ).status_code == 401
    assert server.post(f"{DLQ}/{dead['id']}/resend").status_code == 401
    assert server.get(DLQ, headers=bearer(support)).status_code == 200  # runs:read
    for action in ("resend", "resolve"):
        refused = server.post(f"{DLQ}/{dead['id']}/{action}", headers=bearer(support))
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    for bad in ("999999", "abc", "0", "-1", "99999999999999999999"):
        for action in ("resend", "resolve"):
            missing = server.post(f"{DLQ}/{bad}/{action}", headers=bearer(admin))
            assert (missing.status_code, missing.json()) == (404, {"error": "not found"}), bad
    assert row_counts(sql, *TABLES) == before
    assert len(receiver.requests) == 1
    assert sql("SELECT count(*) FROM bz_config_audit WHERE path LIKE 'delivery-dlq%%'") == [(0,)]


def test_a_callback_that_is_not_dead_cannot_be_resolved(world, receiver, cli, server, sql):
    receiver.script(500)
    job_id = world.finished_job(receiver.url)
    assert world.deliver() == "retrying"
    callback = world.callback(job_id)
    admin = admin_token(cli, "ops-admin", "admin")
    before = row_counts(sql, *TABLES)
    refused = server.post(f"{DLQ}/{callback['id']}/resolve", headers=bearer(admin))
    assert refused.status_code == 409 and refused.json()["ok"] is False
    assert row_counts(sql, *TABLES) == before and world.callback(job_id)["resolved_at"] is None


def test_the_list_limit_is_cores(world, receiver, cli, server):
    for _ in range(3):
        world.dead_job(receiver)
    token = admin_token(cli, "ops-admin", "admin")
    ids = [i["id"] for i in server.get(DLQ, headers=bearer(token)).json()["items"]]
    assert len(ids) == 3 and ids == sorted(ids, reverse=True)  # newest first
    for limit, count in (("2", 2), ("0", 3), ("x", 3), ("-4", 3), ("9999", 3)):
        assert len(server.get(f"{DLQ}?limit={limit}", headers=bearer(token)).json()["items"]) == count, limit


def test_every_callback_of_a_job_with_its_attempts(world, receiver, cli, server):
    receiver.script(500)
    job_id = world.finished_job(receiver.url)
    assert world.deliver() == "retrying"
    assert world.deliver() == "delivered"
    token = admin_token(cli, "support-1", "support")

    answer = server.get(f"/admin/api/jobs/{job_id}/callbacks", headers=bearer(token))
    assert answer.status_code == 200
    (callback,) = answer.json()["callbacks"]
    assert callback["state"] == "delivered" and callback["url"] == f"{receiver.origin}/…"
    assert [(a["attempt"], a["http_status"]) for a in callback["attempt_log"]] == [(1, 500), (2, 204)]
    assert callback["bytes"] == len(receiver.requests[0]["body"])
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        missing = server.get(f"/admin/api/jobs/{unknown}/callbacks", headers=bearer(token))
        assert (missing.status_code, missing.json()) == (404, {"error": "not found"})


# ================================================================ secrets stay secret

def test_neither_the_token_nor_the_urls_path_is_logged_or_shown(world, receiver, cli, server, caplog):
    caplog.set_level(logging.DEBUG)
    receiver.script(500, 500, (500, f"Broken {HOOK_PATH}"))
    job_id = world.finished_job(receiver.url, result={"text": f"see {receiver.url}"})
    assert [world.deliver() for _ in range(3)] == ["retrying", "retrying", "dead"]
    token = admin_token(cli, "ops-admin", "admin")
    make_admin(cli, "viewer", "support")

    dlq = server.get(f"{DLQ}?all=1", headers=bearer(token)).text
    per_job = server.get(f"/admin/api/jobs/{job_id}/callbacks", headers=bearer(token)).text
    _, listed, _ = cli("jobs", "callbacks", "--dead")
    page = signed_in(server.url, "viewer").get("/console/dead-letters/").text
    assert "callback #" in page
    for place, text in {"the list": dlq, "the job's callbacks": per_job, "the command": json.dumps(listed),
                        "the console": page, "the logs": caplog.text}.items():
        assert "path-secret" not in text and "query-secret" not in text, place
    assert world.token not in caplog.text
    assert "is dead after attempt 3" in caplog.text  # the log says what happened, by origin
    assert receiver.origin in caplog.text


# ================================================================ the console

def test_the_console_lists_escapes_replays_and_resolves(world, receiver, cli, server, sql):
    receiver.script((404, "<script>alert(1)</script>"))
    job_id = world.finished_job(receiver.url)
    assert world.deliver() == "dead"
    _, second = world.dead_job(receiver)
    first = world.callback(job_id)
    make_admin(cli, "ops-admin", "admin")
    make_admin(cli, "viewer", "support")

    viewer = signed_in(server.url, "viewer")
    page = viewer.get("/console/dead-letters/")
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert f"callback #{first['id']}" in page.text and f"callback #{second['id']}" in page.text
    assert "Replay" not in page.text  # runs:read only: no actions offered...
    refused = viewer.post(f"/console/dead-letters/{first['id']}/replay", data={"csrf_token": csrf_of(page.text)})
    assert refused.status_code == 403 and len(receiver.requests) == 2  # ...nor taken

    browser = signed_in(server.url, "ops-admin")
    page = browser.get("/console/dead-letters/")
    assert 'href="/console/dead-letters/"' in page.text  # in the nav
    before = row_counts(sql, *TABLES)
    forged = browser.post(f"/console/dead-letters/{first['id']}/replay", data={})
    assert forged.status_code == 400 and row_counts(sql, *TABLES) == before and len(receiver.requests) == 2

    row = browser.post(f"/console/dead-letters/{first['id']}/replay", data={"csrf_token": csrf_of(page.text)},
                       headers={"HX-Request": "true"})
    assert row.status_code == 200
    assert row.text.lstrip().startswith(f'<tr id="dead-letter-{first["id"]}"')
    assert "Delivered: the dead letter is resolved." in row.text and "<html" not in row.text
    assert world.callback(job_id)["resolved_by"] == "ops-admin"

    done = browser.post(f"/console/dead-letters/{second['id']}/resolve", data={"csrf_token": csrf_of(page.text)})
    assert done.status_code == 303
    after = browser.get("/console/dead-letters/")
    assert "Resolved: nothing more is sent for it." in after.text
    assert "No dead letter waits" in after.text
    token = csrf_of(after.text)
    for unknown in ("999999", "99999999999999999999"):
        assert browser.post(f"/console/dead-letters/{unknown}/resolve", data={"csrf_token": token}).status_code == 404
    every = browser.get("/console/dead-letters/?all=1").text
    assert f"callback #{first['id']}" in every and f"callback #{second['id']}" in every
    assert len(receiver.requests) == 3


# ================================================================ end to end

def test_a_job_run_claimed_and_reported_posts_its_record(server, cli, business, tmp_path, receiver, app):
    from tests.jobs_world import JobsWorld

    jobs = JobsWorld(server, cli, business, tmp_path)
    submitted = jobs.submit(callback_url=receiver.url)
    assert submitted.status_code == 202, submitted.text
    claimed = jobs.claim()
    assert claimed.status_code == 200, claimed.text
    reported = jobs.report(claimed.json()["job"], output={"text": "C-1001 is ACME"})
    assert reported.status_code == 200, reported.text

    assert callback_worker.deliver_one(app.extensions["bailing"].db, app.extensions["bailing"].settings,
                                       app.secret_key) == "delivered"
    (request,) = checked(receiver, jobs.client_token)
    sent = json.loads(request["body"])
    assert sent == jobs.job(submitted.json()["job_id"]).json()
    assert (sent["status"], sent["result"]) == ("done", {"text": "C-1001 is ACME"})
    assert "claim_token" not in sent and "lease_until" not in sent
