"""With no BAILING_DATABASE_URL the hub starts its own PostgreSQL, shared by every process and
kept running until `db stop`."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli_process


def _postmaster_pid(data_dir) -> int:
    return int((data_dir / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


@pytest.mark.own_servers
def test_embedded_server_starts_on_first_use_is_shared_and_stops_on_request(tmp_path):
    data_dir = tmp_path / "var"
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
def test_processes_starting_together_on_a_new_data_folder_share_one_server(tmp_path):
    """As gunicorn workers or test workers do on a first start: one initialises the folder while
    the others wait, and all of them end up on the same server."""
    import subprocess
    import sys

    import time

    data_dir = tmp_path / "var"
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
