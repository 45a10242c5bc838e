"""Issue 17, deliverable 4: request ids and the request log.

One line per request on stderr (logger `bailing.request`), read from a real gunicorn process's
stderr and from in-process servers' (capsys): its fields, its request id equal to the
X-Request-Id header, incoming ids kept only when well formed, a 500 logged too, and no token,
query string or body value in any line.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import requests

from admin_app.config import Settings
from tests.gunicorn_hub import GunicornHub

FIELDS = {"timestamp", "level", "logger", "message", "request_id", "method", "route", "status",
          "duration_ms", "remote_addr"}
NEW_ID = re.compile(r"[0-9a-f]{32}")
BEARER_MARK = "bearer-marker-5f1e0c7a"
QUERY_MARK = "query-marker-77ad1b3e"
BODY_MARK = "body-marker-0c9b4e21"
HEADER_MARK = "header-marker-3a6f9d10"


def request_lines(text: str) -> list[dict]:
    """The request log's lines in `text` (other output, gunicorn's own included, is skipped)."""
    lines = []
    for raw in text.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("logger") == "bailing.request":
            lines.append(record)
    return lines


def line_of(lines: list[dict], response) -> dict:
    rid = response.headers["X-Request-Id"]
    found = [line for line in lines if line["request_id"] == rid]
    assert len(found) == 1, (rid, lines)
    return found[0]


# ----------------------------------------------------------------------------- gunicorn

@pytest.mark.any_server  # a gunicorn worker's log lines
def test_gunicorn_writes_one_json_line_per_request_and_no_secret(db_url, tmp_path, configured):
    with GunicornHub(db_url, workers=1, data_dir=tmp_path / "var") as hub:
        http = requests.Session()
        kept = http.get(hub.url + "/health/live", headers={"X-Request-Id": "client-7.trace:A_b-9"})
        too_long = http.get(hub.url + "/health/live", headers={"X-Request-Id": "a" * 129})
        bad_chars = http.get(hub.url + "/health/live", headers={"X-Request-Id": "a b/c"})
        secret = http.post(
            hub.url + f"/agent-api/v1/tool-invocations?access_token={QUERY_MARK}&x=1",
            headers={"Authorization": f"Bearer {BEARER_MARK}", "X-Client-Note": HEADER_MARK},
            json={"invocation_id": "0" * 64, "arguments": {"password": BODY_MARK}})
        form = http.post(hub.url + f"/console/login?next={QUERY_MARK}",
                         data={"username": "nobody", "password": BODY_MARK})
        missing = http.get(hub.url + f"/no/such/{QUERY_MARK}")
        responses = [kept, too_long, bad_chars, secret, form, missing]
        http.close()
    text = hub.log()  # gunicorn has stopped: every line is written
    lines = request_lines(text)
    # One line per request: each id once; besides ours, only the readiness probes' lines (their
    # last line may land after the probe has its answer, so they are not counted beforehand).
    ids = [line["request_id"] for line in lines]
    assert len(ids) == len(set(ids))
    ours = {r.headers["X-Request-Id"] for r in responses}
    assert len(ours) == len(responses) and ours <= set(ids)
    assert all(line["route"] == "/health/live" and line["method"] == "GET"
               for line in lines if line["request_id"] not in ours)

    assert [r.status_code for r in responses] == [200, 200, 200, 401, 400, 404]
    for response in responses:
        line = line_of(lines, response)
        assert set(line) == FIELDS, line
        assert line["level"] == "INFO" and line["status"] == response.status_code
        assert isinstance(line["duration_ms"], (int, float)) and line["duration_ms"] >= 0
        assert line["remote_addr"] == "127.0.0.1"
    assert kept.headers["X-Request-Id"] == "client-7.trace:A_b-9"
    for replaced in (too_long, bad_chars):
        assert NEW_ID.fullmatch(replaced.headers["X-Request-Id"])
    assert [line_of(lines, r)["route"] for r in responses] == [
        "/health/live", "/health/live", "/health/live", "/agent-api/v1/tool-invocations",
        "/console/login", "(unmatched)"]
    assert line_of(lines, secret)["method"] == "POST"

    # Anywhere on stderr: no token, query value, header value or body value, nor the raw path.
    for mark in (BEARER_MARK, QUERY_MARK, BODY_MARK, HEADER_MARK, "a b/c", "a" * 129):
        assert mark not in text, mark


# ----------------------------------------------------------------------------- request ids

@pytest.mark.parametrize("incoming, kept", [
    ("abc", True), ("A" * 128, True), ("x.y_z:1-2", True),
    ("A" * 129, False), ("", False), ("a\r\nX-Injected: 1", False), ("a\nb", False), ("abc\n", False),
    ("a b", False), ("é", False), ("a/b", False), ("a;b", False),
], ids=["short", "128", "punctuation", "129", "empty", "crlf", "lf", "trailing-lf", "space",
        "non-ascii", "slash", "semicolon"])
def test_an_incoming_request_id_is_kept_only_when_well_formed(app, capsys, incoming, kept):
    client = app.test_client()
    # The WSGI environ directly: HTTP clients refuse to send CR or LF in a header.
    response = client.get("/health/live", environ_overrides={"HTTP_X_REQUEST_ID": incoming})
    rid = response.headers["X-Request-Id"]
    if kept:
        assert rid == incoming
    else:
        assert NEW_ID.fullmatch(rid) and rid != incoming
    line = line_of(request_lines(capsys.readouterr().err), response)
    assert line["request_id"] == rid


def test_every_response_carries_a_new_id_without_one(server, capsys):
    ids = {server.get("/health/live").headers["X-Request-Id"] for _ in range(3)}
    assert len(ids) == 3 and all(NEW_ID.fullmatch(i) for i in ids)
    assert {line["request_id"] for line in request_lines(capsys.readouterr().err)} >= ids


# ----------------------------------------------------------------------------- errors

def _boom(application):
    @application.get("/test-only/boom")
    def boom():
        raise RuntimeError(f"failed near {BODY_MARK}")


def test_a_500_and_a_refused_console_request_get_their_line_and_header(hub_app, capsys):
    live = hub_app(setup=_boom)
    failed = live.get("/test-only/boom", headers={"X-Request-Id": "trace-500"})
    refused = live.get("/console/login?q=%01")  # control characters: refused before any view
    err = capsys.readouterr().err
    lines = request_lines(err)

    assert failed.status_code == 500 and failed.headers["X-Request-Id"] == "trace-500"
    line = line_of(lines, failed)
    assert (line["status"], line["route"]) == (500, "/test-only/boom")
    # The traceback's record carries the same id, so the two can be joined.
    errors = [json.loads(raw) for raw in err.splitlines()
              if raw.startswith("{") and '"admin_app.errors"' in raw]
    assert [e["request_id"] for e in errors] == ["trace-500"]

    assert refused.status_code == 400
    assert line_of(lines, refused)["status"] == 400


# ----------------------------------------------------------------------------- settings

def test_text_format_and_level(hub_app, capsys):
    live = hub_app(log_format="text")
    response = live.get("/health/live", headers={"X-Request-Id": "text-line-1"})
    err = capsys.readouterr().err
    text_lines = [raw for raw in err.splitlines() if " bailing.request " in raw]
    assert len(text_lines) == 1, err
    assert re.search(r" INFO bailing\.request GET /health/live 200 [0-9.]+ms request_id=text-line-1$",
                     text_lines[0])
    assert response.headers["X-Request-Id"] == "text-line-1"

    quiet = hub_app(log_level="WARNING")
    quiet.get("/health/live")
    err = capsys.readouterr().err
    assert request_lines(err) == [] and " bailing.request " not in err


@pytest.mark.parametrize("name, value, expected", [
    ("BAILING_LOG_FORMAT", "text", "text"), ("BAILING_LOG_FORMAT", "JSON", "json"),
    ("BAILING_LOG_LEVEL", "debug", "DEBUG"), ("BAILING_LOG_LEVEL", "warning", "WARNING"),
])
def test_log_settings_are_read_and_normalised(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert getattr(settings, name.removeprefix("BAILING_").lower()) == expected


def test_defaults(monkeypatch):
    for name in ("BAILING_LOG_FORMAT", "BAILING_LOG_LEVEL", "BAILING_METRICS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert (settings.log_format, settings.log_level, settings.metrics_token) == ("json", "INFO", None)


@pytest.mark.parametrize("name, value", [
    ("BAILING_LOG_FORMAT", "xml"), ("BAILING_LOG_LEVEL", "loud"), ("BAILING_LOG_LEVEL", "10"),
])
def test_a_bad_log_setting_stops_the_command_and_writes_nothing(tmp_path, name, value):
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    # Refused while the settings are read: no database is reached (this one does not exist).
    env.update({"BAILING_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
                "BAILING_DATA_DIR": str(data_dir), name: value})
    result = subprocess.run([sys.executable, "-m", "admin_app.cli", "db", "status"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"{name} must be one of" in result.stderr and repr(value) in result.stderr
    assert result.stdout == ""
    assert not data_dir.exists()
