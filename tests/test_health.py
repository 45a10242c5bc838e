"""Liveness, readiness before and after `db upgrade`, and with the database gone."""
from __future__ import annotations

from admin_app import create_app
from tests.conftest import run_cli_process, serve


def test_live_answers_without_a_database(tmp_path):
    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none", "data_dir": tmp_path})
    live = serve(app)
    try:
        response = live.get("/health/live")
        assert response.status_code == 200
        assert response.json() == {"status": "live"}
    finally:
        live.stop()


def test_ready_is_503_with_pending_files_before_upgrade_and_200_after(empty_db, tmp_path):
    app = create_app({"database_url": empty_db, "data_dir": tmp_path})
    live = serve(app)
    try:
        before = live.get("/health/ready")
        assert before.status_code == 503
        body = before.json()
        assert body["reason"] == "migrations_pending"
        assert "001_core_records.sql" in body["pending"]

        done = run_cli_process(["db", "upgrade"], empty_db)
        assert done.returncode == 0, done.stderr

        after = live.get("/health/ready")
        assert after.status_code == 200
        assert after.json()["status"] == "ready"
    finally:
        live.stop()


def test_ready_is_503_when_the_database_is_unreachable(tmp_path):
    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none", "data_dir": tmp_path})
    live = serve(app)
    try:
        response = live.get("/health/ready")
        assert response.status_code == 503
        assert response.json() == {"status": "not_ready", "reason": "database_unreachable"}
    finally:
        live.stop()
