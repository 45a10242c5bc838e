"""The configuration-change audit (BUSINESS_SIDE.md § G): successful admin API writes and
changing `config apply` runs recorded as {by, method, path} in the write's own transaction (never
a body; refusals, errors and reads record nothing), GET /admin/api/config-audit with Core's
lenient paging, and BAILING_AUDIT_RETENTION_DAYS purging this log alone."""
from __future__ import annotations

import json
import re
import time

import pytest
from flask import Blueprint, g, jsonify
from sqlalchemy import text

from admin_app.api.auth import admin_permission_required
from admin_app.api.config_changes import recorded_path
from admin_app.config_audit.retention import RetentionWorker, days_from
from admin_app.errors import ApiError
from tests.conftest import EXAMPLES
from tests.helpers import admin_token, apply_config, assert_error, assert_ok, bearer, cli_ok, cli_refused, row_counts

LIST = "/admin/api/config-audit"
SECRET = "s3cret-body-value"
# What the log must never touch, and what a refusal must leave as it was.
OTHER_TRAILS = ("bz_admin_events", "bz_access_log", "bz_tool_approvals", "bz_tool_invocations", "bz_tool_journal")


def log_rows(sql) -> list[tuple]:
    return sql("SELECT event, actor, method, path, detail FROM bz_config_audit ORDER BY id")


def forget_accounts(sql) -> None:
    """These tests are about other rows: an admin account's creation is a configuration change of
    its own (test_config_audit_changes), taken out of their way."""
    sql("DELETE FROM bz_config_audit WHERE object_kind = 'admin' AND method = 'CREATE'")


def _test_settings(app) -> None:
    """A configuration write under the admin API prefix, as future ones will be: it writes in the
    request's transaction, then succeeds or is refused as asked."""
    bp = Blueprint("test_settings", __name__, url_prefix="/admin/api/test-settings")

    @bp.route("/<name>", methods=["GET", "POST", "PUT", "DELETE"])
    @admin_permission_required("config:write")
    def change(name: str):
        g.db.execute(text("CREATE TEMP TABLE IF NOT EXISTS t_written (n text)"))  # a write of the request
        if name == "refused":
            raise ApiError("invalid_request", "refused after writing")
        if name == "missing":
            raise ApiError("not_found")
        if name == "conflict":  # an answer, not an exception: its transaction commits
            return jsonify({"error": "conflict", "message": "answered, not raised"}), 409
        if name == "broken":
            raise RuntimeError("a failure after the write")
        return jsonify({"saved": name})

    app.register_blueprint(bp)


@pytest.fixture
def hub(hub_app):
    return hub_app(_test_settings)


def test_a_successful_write_is_recorded_without_its_body(hub, cli, sql):
    admin = bearer(admin_token(cli, "ada", "admin"))
    forget_accounts(sql)
    assert_ok(hub.post("/admin/api/test-settings/crm?x=1", json={"password": SECRET}, headers=admin))
    assert_ok(hub.request("DELETE", "/admin/api/test-settings/erp", headers=admin))
    assert log_rows(sql) == [("config_change", "ada", "POST", "test-settings/crm", None),
                             ("config_change", "ada", "DELETE", "test-settings/erp", None)]
    assert SECRET not in json.dumps(sql("SELECT row_to_json(c) FROM bz_config_audit c"), default=str)
    items = assert_ok(hub.get(LIST, headers=admin))
    assert [(i["by"], i["method"], i["path"]) for i in items] == [("ada", "DELETE", "test-settings/erp"),
                                                                  ("ada", "POST", "test-settings/crm")]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", i["ts"]) for i in items)
    assert all(set(i) == {"ts", "by", "method", "path"} for i in items)


def test_refusals_errors_and_reads_record_nothing(hub, cli, sql):
    admin = bearer(admin_token(cli, "ada", "admin"))
    auditor = bearer(admin_token(cli, "aud", "auditor"))
    before = row_counts(sql, "bz_config_audit", *OTHER_TRAILS)
    assert_error(hub.post("/admin/api/test-settings/crm", json={}, headers=auditor), 403, "forbidden")
    assert_error(hub.post("/admin/api/test-settings/crm", json={}), 401, "unauthorized")
    assert_error(hub.post("/admin/api/test-settings/refused", json={}, headers=admin), 400, "invalid_request")
    assert_error(hub.post("/admin/api/test-settings/missing", json={}, headers=admin), 404, "not_found")
    assert_error(hub.post("/admin/api/test-settings/conflict", json={}, headers=admin), 409, "conflict")
    assert_error(hub.post("/admin/api/test-settings/broken", json={}, headers=admin), 500, "internal_error")
    assert_ok(hub.get("/admin/api/test-settings/crm", headers=admin))  # a read
    assert_ok(hub.get(LIST, headers=admin))
    # The excluded areas: approval decisions and tasks (this hub's runs), refused or not.
    assert_error(hub.post("/admin/api/agent-tasks", json={}, headers=admin), 400, "TASK_INVALID_INPUT")
    hub.post("/admin/api/tool-approvals/nope/approve", json={}, headers=admin)
    assert row_counts(sql, "bz_config_audit", *OTHER_TRAILS) == before


@pytest.mark.parametrize(("path", "kept"), [
    ("/admin/api/clients/crm", "clients/crm"),
    ("/admin/api/tool-approvals/12/approve", None),
    ("/admin/api/agent-tasks", None),
    ("/admin/api/agent-tasks/t-1/control", None),
    ("/admin/api/runs/j-1/cancel", None),
    ("/admin/api/knowledge/hittest", None),
    ("/admin/api/datasources/test", None),
    ("/admin/api/datasources/3/sync", None),
    ("/admin/api/providers/crm/refresh", None),
    ("/admin/api/providers/crm/probe", None),
    ("/admin/api-other/x", None),
    ("/admin/pause", None),
])
def test_which_paths_are_configuration_changes(path, kept):
    assert recorded_path(path) == kept


def test_the_listing_pages_as_core_newest_first_and_needs_audit_read(server, cli, sql):
    sql("INSERT INTO bz_config_audit (ts, event, actor, method, path) "
        "SELECT now() - n * interval '1 second', 'config_change', 'ada', 'POST', 'item/' || n "
        "FROM generate_series(1, 600) n")
    auditor = bearer(admin_token(cli, "aud", "auditor"))
    admin = bearer(admin_token(cli, "ada", "admin"))
    others = {role: bearer(admin_token(cli, f"x-{role}", role)) for role in ("approver", "support")}
    forget_accounts(sql)

    def page(query: str, headers=auditor) -> list[int]:
        return [int(i["path"].split("/")[1]) for i in assert_ok(server.get(LIST + query, headers=headers))]

    assert page("") == list(range(1, 101))  # newest first, 100 by default
    for query, expected in [("?limit=abc", range(1, 101)), ("?limit=0", range(1, 101)), ("?limit=", range(1, 101)),
                            ("?limit=1000", range(1, 501)), ("?limit=-5", range(1, 2)), ("?limit=2.7", range(1, 3)),
                            ("?limit=3&limit=4", range(1, 101)), ("?limit=1e1", range(1, 11)),
                            ("?limit=5&offset=10", range(11, 16)), ("?limit=5&offset=-3", range(1, 6)),
                            ("?limit=5&offset=2.9", range(3, 8)), ("?limit=5&offset=abc", range(1, 6)),
                            ("?limit=5&offset=599", range(600, 601)), ("?offset=9999999999999999999", []),
                            ("?limit=2&unknown=1", range(1, 3))]:
        assert page(query) == list(expected), query
    assert page("?limit=3", admin) == [1, 2, 3]
    before = row_counts(sql, "bz_config_audit", "bz_access_log")
    for other in others.values():
        body = assert_error(server.get(LIST, headers=other), 403, "forbidden")
        assert "audit:read" in body["message"]
    assert_error(server.get(LIST), 401, "unauthorized")
    assert row_counts(sql, "bz_config_audit", "bz_access_log") == before


def test_config_apply_is_recorded_when_it_changes_something(cli, sql, tmp_path):
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    doc["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")  # the file is written elsewhere
    created = apply_config(cli, tmp_path, doc)["created"]
    rows = log_rows(sql)
    # One row per object created (issue 33: what changed, config_audit/changes.py).
    assert len(rows) == sum(len(names) for names in created.values()) == 3
    for event, by, method, path, detail in rows:
        assert (event, method, path, detail) == ("config_change", "APPLY", "config", None)
        assert by.startswith("cli:")
    apply_config(cli, tmp_path, doc)  # the same again: nothing changed, nothing recorded
    assert len(log_rows(sql)) == 3
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**doc, "routes": [{"route_key": "Not A Key"}]}))
    cli_refused(cli("config", "apply", str(broken)), "invalid_request")
    cli_ok(cli("config", "apply", "--check", str(EXAMPLES / "hub.json")))
    assert len(log_rows(sql)) == 3
    doc["client_apps"][0]["name"] = "Renamed CRM"
    report = apply_config(cli, tmp_path, doc)
    assert report["changed"]["client_apps"], report
    assert [r[2:4] for r in log_rows(sql)] == [("APPLY", "config")] * 4


def _aged_rows(sql, cli) -> dict[str, int]:
    admin_token(cli, "ada", "admin")  # rows of the admins' trail, made old too: never purged
    forget_accounts(sql)
    sql("UPDATE bz_admin_events SET at = now() - interval '40 days'")
    sql("INSERT INTO bz_config_audit (ts, event, actor, method, path) VALUES "
        "(now() - interval '40 days', 'config_change', 'ada', 'POST', 'old/1'), "
        "(now() - interval '31 days', 'config_change', 'ada', 'POST', 'old/2'), "
        "(now() - interval '29 days', 'config_change', 'ada', 'POST', 'new/1'), "
        "(now(), 'config_change', 'ada', 'POST', 'new/2')")
    return row_counts(sql, *OTHER_TRAILS)


def test_prune_deletes_only_older_rows_of_this_log_and_records_itself(cli, sql, monkeypatch):
    others = _aged_rows(sql, cli)
    monkeypatch.setenv("BAILING_AUDIT_RETENTION_DAYS", "30")
    report = cli_ok(cli("config-audit", "prune"))
    assert (report["retention_days"], report["deleted"]) == (30, 2)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", report["cutoff"])
    rows = log_rows(sql)
    assert [r[3] for r in rows] == ["new/1", "new/2", "config-audit"]
    assert rows[-1][:4] == ("audit_retention_pruned", "retention", "PRUNE", "config-audit")
    assert rows[-1][4] == report
    assert row_counts(sql, *OTHER_TRAILS) == others
    again = cli_ok(cli("config-audit", "prune"))  # idempotent: nothing more to delete, nothing recorded
    assert again["deleted"] == 0 and len(log_rows(sql)) == 3


@pytest.mark.parametrize("setting", ["0", "", "abc", "-5", "nan", "inf"])
def test_zero_or_invalid_retention_keeps_everything(cli, sql, monkeypatch, setting):
    _aged_rows(sql, cli)
    monkeypatch.setenv("BAILING_AUDIT_RETENTION_DAYS", setting)
    assert cli_ok(cli("config-audit", "prune")) == {"retention_days": 0, "cutoff": None, "deleted": 0}
    assert len(log_rows(sql)) == 4


def test_the_setting_is_read_as_core_reads_it():
    assert [days_from(v) for v in (None, "", " 7 ", "0.5", "30.0", "-1", "x", "1e400", "NaN")] == \
        [0, 0, 7, 0.5, 30, 0, 0, 0, 0]


def test_the_background_pass_purges_after_its_first_wait(app, cli, sql):
    _aged_rows(sql, cli)
    worker = RetentionWorker(app.extensions["bailing"].db, 30, first_pass_seconds=0.05)
    worker.ensure_started()
    try:
        deadline = time.monotonic() + 5
        while len(log_rows(sql)) != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert [r[3] for r in log_rows(sql)] == ["new/1", "new/2", "config-audit"]


def test_before_migration_080_changes_go_unrecorded_rather_than_fail(cli, sql, tmp_path):
    sql("DROP TABLE bz_config_audit")
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    doc["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    assert apply_config(cli, tmp_path, doc)["created"]["routes"] == ["customers"]
    assert sql("SELECT count(*) FROM bz_routes")[0][0] == 1
