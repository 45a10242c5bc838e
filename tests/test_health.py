"""Liveness, readiness before and after `db upgrade`, and with the database gone."""
from __future__ import annotations

from importlib.metadata import version

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


# ------------------------------------------------------------------ GET /health, as upstream Core

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"
JSON_UTF8 = "application/json; charset=utf-8"


def test_health_answers_ok_without_authentication_and_without_a_database(tmp_path):
    app = create_app({"database_url": UNREACHABLE, "data_dir": tmp_path, "secret_key": "k" * 40})
    live = serve(app)
    try:
        expected = {"status": "ok", "paused": False,
                    "app": {"name": "bailing-hub", "version": version("bailing-hub")}}
        plain = live.get("/health")
        # A connector's bearer (n8n sends one, any token) changes nothing.
        with_token = live.get("/health", headers={"Authorization": "Bearer not-a-token-at-all"})
        for response in (plain, with_token):
            assert response.status_code == 200
            assert response.json() == expected
            assert response.headers["Content-Type"] == JSON_UTF8
            assert response.headers["Cache-Control"] == "no-store"

        head = live.request("HEAD", "/health")
        assert head.status_code == 200
        assert head.content == b""
        assert head.headers["Content-Type"] == JSON_UTF8
        assert head.headers["Cache-Control"] == "no-store"
    finally:
        live.stop()


def test_health_starts_no_embedded_server(tmp_path):
    """Liveness-like: with no BAILING_DATABASE_URL, readiness would start the embedded server;
    /health does not even look for it."""
    data_dir = tmp_path / "var"
    app = create_app({"database_url": None, "data_dir": data_dir, "secret_key": "k" * 40})
    client = app.test_client()
    assert client.get("/health").status_code == 200
    assert client.head("/health").status_code == 200
    assert not data_dir.exists()


def test_a_method_health_does_not_take_is_answered_as_on_the_other_probes(tmp_path):
    app = create_app({"database_url": UNREACHABLE, "data_dir": tmp_path, "secret_key": "k" * 40})
    live = serve(app)
    try:
        for method in ("POST", "PUT", "DELETE"):
            refused = live.request(method, "/health", json={"status": "paused"})
            other_probe = live.request(method, "/health/live", json={"status": "paused"})
            assert refused.status_code == other_probe.status_code == 405
            assert set(refused.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}
            assert refused.headers["Content-Type"] == other_probe.headers["Content-Type"]
        assert live.get("/health").json()["paused"] is False  # nothing was changed by them
    finally:
        live.stop()
