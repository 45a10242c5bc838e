"""What a configuration change changed (issue 33, deliverable 4): config apply records one row per
object created or changed, with the SHA-256 of the object's allowlisted settings before and after
and a bounded diff; pause and resume, admin roles and token issues are recorded too, never with
token material; GET /admin/api/config-audit adds these as extra keys; the console page lists them
escaped, for holders of audit:read only."""
from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC
from html import unescape

import pytest

from admin_app import limits
from admin_app.canonical import canonical_json, sha256_json
from admin_app.config_audit.changes import FIELDS, diff, leaf_data
from admin_app.identity.tokens import hash_token
from tests.conftest import EXAMPLES
from tests.helpers import admin_token, apply_config, bearer, cli_ok, make_admin, row_counts
from tests.test_console_server import signed_in

COLUMNS = "event, actor, method, path, object_kind, object_key, before_hash, after_hash, diff"


def rows(sql, where: str = "TRUE") -> list[dict]:
    names = [c.strip() for c in COLUMNS.split(",")]
    return [dict(zip(names, r)) for r in sql(f"SELECT {COLUMNS} FROM bz_config_audit WHERE {where} ORDER BY id")]


def hub_doc() -> dict:
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    doc["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    return doc


def route_hash(sql, route_key: str) -> str:
    """The route's stored settings as the log hashes them, recomputed from the stored row: the
    fields a route of examples/hub.json sets (all but `approvals`, which it leaves out), as
    canonical JSON."""
    [(stored,)] = sql("SELECT to_jsonb(r) FROM bz_routes r WHERE route_key = %s", (route_key,))
    fields = ("route_key", "name", "description", "enabled", "audience", "target_config", "agent_client",
              "tools", "permission", "target", "job_settings")
    assert set(fields) == set(FIELDS["route"]) - {"approvals"}
    return hashlib.sha256(json.dumps({f: stored[f] for f in fields}, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def test_a_changed_route_is_one_row_with_its_hashes_and_diff_and_an_unchanged_apply_none(cli, sql, tmp_path):
    doc = hub_doc()
    apply_config(cli, tmp_path, doc)
    created = rows(sql, "object_kind = 'route'")
    assert [(r["object_key"], r["before_hash"], r["method"], r["path"]) for r in created] == [
        ("customers", None, "APPLY", "config")]
    first = route_hash(sql, "customers")
    assert created[0]["after_hash"] == first
    count = len(rows(sql))
    apply_config(cli, tmp_path, doc)  # nothing changed: nothing recorded
    assert len(rows(sql)) == count

    doc["routes"][0]["description"] = "Answers <b>customers</b>"
    doc["routes"][0]["target_config"]["system_prompt"] = "Be kind."
    report = apply_config(cli, tmp_path, doc)
    assert report["changed"]["routes"] == ["customers (description, target_config)"]
    new = rows(sql)[count:]
    assert len(new) == 1
    [row] = new
    assert (row["object_kind"], row["object_key"], row["actor"][:4]) == ("route", "customers", "cli:")
    assert row["before_hash"] == first and row["after_hash"] == route_hash(sql, "customers") != first
    assert row["diff"] == [
        {"path": "description", "before": "", "after": "Answers <b>customers</b>"},
        {"path": "target_config.system_prompt", "before": "You help the customer desk.", "after": "Be kind."}]


def test_diff_values_and_entries_are_bounded():
    most = limits.CONFIG_AUDIT_DIFF_VALUE_MAX
    [entry] = diff({"description": "a"}, {"description": "x" * (most * 5)})
    assert entry["after"] == "x" * most + "…" and entry["before"] == "a"
    [entry] = diff({"tools": []}, {"tools": list(range(1000))})
    assert len(entry["after"]) == most + 1 and entry["after"].startswith("[0,1,2")
    many = diff(None, {f"f{i}": i for i in range(200)})
    assert len(many) == limits.CONFIG_AUDIT_DIFF_ITEMS_MAX
    assert many[-1]["after"] == f"{200 - limits.CONFIG_AUDIT_DIFF_ITEMS_MAX + 1} more fields changed"


def test_pause_and_resume_are_recorded_as_changes_of_state(cli, sql):
    cli_ok(cli("pause", "--reason", "maintenance"))
    cli_ok(cli("pause", "--reason", "again"))  # no change of state: nothing more
    cli_ok(cli("resume"))
    found = rows(sql)
    assert [(r["event"], r["method"], r["path"], r["object_kind"]) for r in found] == [
        ("hub_paused", "POST", "pause", "hub_pause"), ("hub_resumed", "POST", "resume", "hub_pause")]
    assert found[0]["diff"] == [{"path": "paused", "before": False, "after": True},
                                {"path": "reason", "before": None, "after": "maintenance"}]
    assert found[0]["after_hash"] == sha256_json({"paused": True, "reason": "maintenance"}) == found[1]["before_hash"]


def test_an_admin_role_change_and_disable_are_recorded_without_the_password_hash(cli, sql):
    make_admin(cli, "bob", "support")
    cli_ok(cli("admins", "set-role", "bob", "auditor"))
    cli_ok(cli("admins", "set-role", "bob", "auditor"))  # the same role: nothing
    cli_ok(cli("admins", "disable", "bob"))
    found = rows(sql)
    assert [(r["method"], r["path"], r["object_key"], r["diff"]) for r in found] == [
        ("CREATE", "admins/bob", "bob", [{"path": "username", "before": None, "after": "bob"},
                                         {"path": "role", "before": None, "after": "support"},
                                         {"path": "disabled", "before": None, "after": False}]),
        ("ROLE", "admins/bob", "bob", [{"path": "role", "before": "support", "after": "auditor"}]),
        ("DISABLE", "admins/bob", "bob", [{"path": "disabled", "before": False, "after": True}])]
    assert found[0]["before_hash"] is None and found[0]["after_hash"] == found[1]["before_hash"]
    assert found[1]["after_hash"] == sha256_json({"username": "bob", "role": "auditor", "disabled": False})
    [(password_hash,)] = sql("SELECT password_hash FROM bz_admins WHERE username = 'bob'")
    assert password_hash not in json.dumps(sql("SELECT * FROM bz_config_audit"), default=str)


def test_token_issues_are_recorded_without_any_token_material(cli, sql, tmp_path, server):
    apply_config(cli, tmp_path, hub_doc())
    start = len(rows(sql))
    issued = cli_ok(cli("executors", "token", "issue", "night-runner", "--targets", "*"))["token"]
    rotated = cli_ok(cli("executors", "token", "rotate", "night-runner"))["token"]
    client = cli_ok(cli("clients", "token", "crm-demo"))["client_token"]
    client2 = cli_ok(cli("clients", "token", "crm-demo"))["client_token"]
    cli_ok(cli("clients", "revoke-token", "crm-demo"))
    admin = bearer(admin_token(cli, "ada", "admin"))
    api = server.post("/admin/api/executor-tokens", headers=admin,
                      json={"name": "day-runner", "allowed_targets": ["desk"], "rotate_token": False})
    assert api.status_code == 200, api.text
    api_token = api.json()["token"]
    found = rows(sql)[start:]
    assert [(r["method"], r["path"], r["object_kind"], r["before_hash"] is None, r["after_hash"] is None)
            for r in found] == [
        ("ISSUE", "executor-tokens/night-runner", "executor_token", True, False),
        ("ROTATE", "executor-tokens/night-runner", "executor_token", False, False),
        ("ISSUE", "clients/crm-demo/token", "client_token", True, False),
        ("ROTATE", "clients/crm-demo/token", "client_token", False, False),
        ("REVOKE", "clients/crm-demo/token", "client_token", False, True),
        ("CREATE", "admins/ada", "admin", True, False),
        ("POST", "executor-tokens", "executor_token", True, False)]
    assert [d["path"] for d in found[1]["diff"]] == ["token_issued_at"]
    everything = json.dumps(sql("SELECT * FROM bz_config_audit"), default=str)
    for token in (issued, rotated, client, client2, api_token):
        assert token not in everything and hash_token(token) not in everything
    for (stored,) in sql("SELECT token_hash FROM bz_executor_tokens"):
        assert stored not in everything


def test_the_listing_adds_what_changed_as_extra_keys(cli, sql, server):
    admin = bearer(admin_token(cli, "ada", "admin"))
    cli_ok(cli("pause", "--reason", "maintenance"))
    sql("INSERT INTO bz_config_audit (event, actor, method, path) VALUES ('config_change', 'ada', 'PUT', 'x')")
    items = server.get("/admin/api/config-audit", headers=admin).json()
    plain, paused, created = items
    assert (created["object_kind"], created["method"]) == ("admin", "CREATE")  # the admin's account
    assert plain == {"ts": plain["ts"], "by": "ada", "method": "PUT", "path": "x"}  # Core's shape
    assert set(paused) == {"ts", "by", "method", "path", "event", "object_kind", "object_key",
                           "after_hash", "before_hash", "diff"}
    assert (paused["event"], paused["object_kind"], paused["path"]) == ("hub_paused", "hub_pause", "pause")


def test_leaf_data_is_canonical_json_of_the_row(cli, sql):
    cli_ok(cli("pause", "--reason", "maintenance"))
    [(row,)] = sql("SELECT to_jsonb(c) FROM bz_config_audit c")
    [(ts,)] = sql("SELECT ts FROM bz_config_audit")
    data = json.loads(leaf_data({**row, "ts": ts}))
    assert data == {"ts": ts.astimezone(UTC).isoformat(timespec="microseconds"),
                    "event": "hub_paused", "actor": row["actor"], "method": "POST", "path": "pause",
                    "object_kind": "hub_pause", "object_key": "hub", "before_hash": row["before_hash"],
                    "after_hash": row["after_hash"], "diff_hash": sha256_json(row["diff"])}
    assert leaf_data({**row, "ts": ts}) == canonical_json(data).encode("utf-8")


@pytest.fixture
def hostile(cli, sql, tmp_path):
    doc = hub_doc()
    apply_config(cli, tmp_path, doc)
    doc["routes"][0]["description"] = "<script>alert(1)</script>"
    doc["routes"][0]["name"] = "<img src=x onerror=alert(2)>"
    apply_config(cli, tmp_path, doc)
    return doc


def test_the_console_page_lists_changes_escaped(hostile, server, cli, sql):
    make_admin(cli, "aud", "auditor")
    page = signed_in(server.url, "aud").get("/console/config-changes/")
    assert page.status_code == 200
    html = page.text
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert html.count('id="config-change-') == len(rows(sql))
    assert "Configuration changes</a>" in html  # in the navigation


def test_the_console_page_is_forbidden_without_audit_read(server, cli, sql):
    make_admin(cli, "sue", "support")
    before = row_counts(sql, "bz_config_audit")
    page = signed_in(server.url, "sue").get("/console/config-changes/")
    assert page.status_code == 403
    assert "Configuration changes</a>" not in page.text
    assert row_counts(sql, "bz_config_audit") == before


def test_the_console_page_pages_newest_first(server, cli, sql):
    make_admin(cli, "aud", "auditor")
    sql("UPDATE bz_config_audit SET ts = ts - interval '1 day'")  # the account's creation: last
    sql("INSERT INTO bz_config_audit (ts, event, actor, method, path) SELECT now() - i * interval '1 second', "
        "'config_change', 'ada', 'PUT', 'item/' || i FROM generate_series(1, 60) i")
    browser = signed_in(server.url, "aud")
    first = browser.get("/console/config-changes/").text
    shown = re.findall(r"<code>item/(\d+)</code>", first)
    assert shown == [str(i) for i in range(1, 51)]
    more = unescape(re.search(r'<tr class="more" hx-get="([^"]+)"', first).group(1))
    rest = browser.get(more, headers={"HX-Request": "true"})
    assert re.findall(r"<code>item/(\d+)</code>", rest.text) == [str(i) for i in range(51, 61)]
    assert "<html" not in rest.text and 'class="more"' not in rest.text
    assert browser.get("/console/config-changes/?cursor=bogus").status_code == 400


def test_webhook_and_callback_urls_are_kept_by_their_origin_and_hash_only(cli, sql, tmp_path):
    """A webhook's or a callback's path and query may be its receiver's secret: the log keeps the
    origin and the SHA-256 of the whole URL, so a change still shows and the secret never does."""
    secret_path, callback_path = "/hooks/s3cr3t-path", "/done/abc?token=c4llb4ck"
    doc = hub_doc()
    doc["executor_targets"] = [{"name": "desk-worker"}]
    doc["routes"][0].update(target="desk-worker", default_callback_url="https://cb.example.com" + callback_path)
    doc["approval_notifications"] = [{"name": "ops-hook", "kind": "webhook", "url": "https://hooks.example.com"
                                      + secret_path, "secret_env": "OPS_HOOK_SECRET"}]
    apply_config(cli, tmp_path, doc)
    doc["approval_notifications"][0]["url"] = "https://hooks.example.com/hooks/other-s3cr3t"
    apply_config(cli, tmp_path, doc)
    stored = json.dumps(rows(sql), default=str)
    for secret in ("s3cr3t", "c4llb4ck", "/done/abc"):
        assert secret not in stored
    channel = rows(sql, "object_kind = 'approval_channel'")
    assert len(channel) == 2 and channel[0]["after_hash"] != channel[1]["after_hash"]
    [change] = [e for e in channel[1]["diff"] if e["path"] == "url"]
    assert change["before"].startswith("https://hooks.example.com/… (sha256:")
    assert change["before"] != change["after"]
