"""Retention, legal holds and erasure (issue 33): a purge redacts the expired messages of the
routes a policy covers and skips held archives; an erasure removes one principal's messages
across archives, refused while a hold applies; every transcript's leaves verify afterwards; every
change is in the configuration-change log; the CLI, the admin API and the console agree.

Archives and events go through the real agent API; SQL only ages events (created_at) and checks
what was (not) written."""
from __future__ import annotations

import re
import uuid

import pytest
import requests

from admin_app.integrity.covered import mismatches
from tests.helpers import (PASSWORD, admin_token, apply_config, assert_error, assert_ok, bearer, cli_ok,
                           cli_refused, row_counts, session_bearer)

AUDITS = "/agent-api/v1/conversation-audits"
API = "/admin/api"
CONFIG = {
    "routes": [{"route_key": "customers", "name": "Customer desk", "enabled": True},
               {"route_key": "billing", "name": "Billing desk", "enabled": True}],
    "client_apps": [{"app_id": "crm-demo", "name": "CRM", "allowed_routes": ["customers", "billing"],
                     "enabled": True}],
}
WRITTEN = ("bz_retention_policies", "bz_legal_holds", "bz_erasure_requests", "bz_retention_runs",
           "bz_evidence_redactions", "bz_config_audit", "bz_evidence_leaves")


@pytest.fixture
def world(cli, server, tmp_path):
    apply_config(cli, tmp_path, CONFIG)

    def session(principal: str, tenant: str) -> dict:
        return cli_ok(cli("sessions", "issue", "--client", "crm-demo", "--routes", "customers,billing",
                          "--principal", f'{{"id": "{principal}", "tenant": "{tenant}"}}'))

    return {"ada": session("ada", "t-1"), "bob": session("bob", "t-2"),
            "admin": bearer(admin_token(cli, "root", "admin")), "auditor": bearer(admin_token(cli, "alice", "auditor"))}


def archive(server, creator: dict, route: str, *others: dict) -> str:
    body = {"client_archive_id": str(uuid.uuid4()), "client_conversation_id": f"conv-{uuid.uuid4().hex[:8]}",
            "route": route, "member_session_ids": [creator["session_id"], *(o["session_id"] for o in others)]}
    archive_id = assert_ok(server.post(AUDITS, headers=session_bearer(creator), json=body))["conversation"][
        "conversation_id"]
    for other in others:
        assert_ok(server.post(f"{AUDITS}/{archive_id}/confirm", headers=session_bearer(other), json={}))
    return archive_id


def talk(server, writer: dict, archive_id: str, turns: int, first: int = 1, tag: str = "t") -> None:
    """`turns` turns (start, question, answer, end) from sequence `first`."""
    events = []
    for t in range(turns):
        turn = f"{tag}{first + t * 4}"
        for offset, (kind, extra) in enumerate((("turn_start", {}), ("user_message", {"content": f"question {turn}"}),
                                                ("assistant_message", {"content": f"answer {turn}"}),
                                                ("turn_end", {"status": "completed"}))):
            sequence = first + t * 4 + offset
            events.append({"event_id": f"e{sequence}", "sequence": sequence, "client_turn_id": turn, "kind": kind,
                           **extra})
    assert_ok(server.post(f"{AUDITS}/{archive_id}/events", headers=session_bearer(writer), json={"events": events}))


def texts(sql, archive_id: str) -> list[str | None]:
    return [c for (c,) in sql("SELECT content FROM bz_agent_conversation_events WHERE archive_id = %s "
                              "AND kind IN ('user_message', 'assistant_message') ORDER BY sequence", (archive_id,))]


def age(sql, archive_id: str, days: int) -> None:
    sql("UPDATE bz_agent_conversation_events SET created_at = now() - make_interval(days => %s) "
        "WHERE archive_id = %s", (days, archive_id))


def every_leaf_verifies(app, sql) -> list:
    rows = [(i, k, r, bytes(h)) for i, k, r, h in
            sql("SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves ORDER BY idx")]
    assert rows
    with app.extensions["bailing"].db.session() as db:
        return mismatches(db, rows)


def exports_verify(server, cli, tmp_path, auditor: dict, *archive_ids: str) -> list[tuple]:
    """Each transcript exported from the console and checked by `audit verify` with only the
    public key: (exit code, answer) of each, and each export's redacted messages."""
    reader, found = _console(server, "alice"), []
    for archive_id in archive_ids:
        export = reader.get(f"{server.url}/console/conversations/{archive_id}/export.json", timeout=60)
        assert export.status_code == 200, export.text[:500]
        path = tmp_path / f"export-{archive_id}.json"
        path.write_text(export.text)
        # The key after the export: its signed head may be the first, made with a new key.
        (key,) = [k["public_key"] for k in assert_ok(server.get(f"{API}/evidence/keys", headers=auditor))
                  if k["retired_at"] is None]
        code, out, _ = cli("audit", "verify", str(path), "--public-key", key)
        redacted = [e["redaction"]["basis"] for e in export.json()["events"] if "redaction" in e]
        found.append((code, out.get("ok") if isinstance(out, dict) else out, redacted))
    return found


def audited(sql, kind: str) -> list[tuple]:
    return sql("SELECT actor, method, path, object_key, before_hash IS NULL, after_hash IS NULL, diff "
               "FROM bz_config_audit WHERE object_kind = %s ORDER BY id", (kind,))


# ----------------------------------------------------------------------------- the purge

def test_a_retention_run_redacts_expired_messages_of_one_route_skips_a_held_archive_and_every_leaf_verifies(
        world, server, sql, app, cli, tmp_path):
    ada, bob, admin = world["ada"], world["bob"], world["admin"]
    old_customers = archive(server, ada, "customers")
    held = archive(server, bob, "customers")
    billing = archive(server, ada, "billing")
    for archive_id in (old_customers, held, billing):
        talk(server, ada if archive_id != held else bob, archive_id, 2)
        age(sql, archive_id, 40)
    talk(server, ada, old_customers, 1, first=9)  # recent: not expired
    # Every route of the app 30 days; billing's own policy keeps (it wins over the app's *).
    every = assert_ok(server.request("PUT", f"{API}/retention/policies", headers=admin,
                                     json={"client_app_id": "crm-demo", "keep_days": 30}))
    assert (every["route_key"], every["keep_days"]) == ("*", 30)
    assert_ok(server.request("PUT", f"{API}/retention/policies", headers=admin,
                             json={"client_app_id": "crm-demo", "route_key": "billing", "keep_days": None}))
    hold = assert_ok(server.post(f"{API}/legal-holds", headers=admin,
                                 json={"scope": "archive", "value": held.upper(), "reason": "Case 2026-17"}))
    assert (hold["value"], hold["active"]) == (held, True)  # the id as stored, lower-cased

    run = assert_ok(server.post(f"{API}/retention/runs", headers=admin))
    assert (run["actor"], run["redacted"], run["archives"], run["held"]) == ("root", 4, 1, 1)
    assert run["finished_at"] is not None
    assert {(p["route_key"], p["redacted"]) for p in run["detail"]["policies"]} == {("*", 4)}
    assert texts(sql, old_customers) == [None, None, None, None, "question t9", "answer t9"]
    assert texts(sql, held) == ["question t1", "answer t1", "question t5", "answer t5"]
    assert texts(sql, billing) == ["question t1", "answer t1", "question t5", "answer t5"]
    assert sql("SELECT DISTINCT basis, basis_ref, actor FROM bz_evidence_redactions") == [
        ("retention", f"run:{run['id']}/policy:{every['id']}", "root")]
    assert every_leaf_verifies(app, sql) == []
    # The transcript says what removed each message.
    detail = assert_ok(server.get(f"{API}/conversation-audits/{old_customers}", headers=world["auditor"]))
    message = next(e for e in detail["events"] if e["sequence"] == 2)
    assert message["content"] is None
    assert (message["redaction"]["basis"], message["redaction"]["actor"]) == ("retention", "root")
    assert "redaction" not in next(e for e in detail["events"] if e["sequence"] == 10)
    # Idempotent: nothing is left to redact; the run is recorded all the same.
    again = assert_ok(server.post(f"{API}/retention/runs", headers=admin, json={}))
    assert (again["redacted"], again["held"]) == (0, 1)
    assert [r["id"] for r in assert_ok(server.get(f"{API}/retention/runs", headers=world["auditor"]))] == [
        again["id"], run["id"]]
    # Released, the held archive goes on the next run.
    assert_ok(server.post(f"{API}/legal-holds/{hold['id']}/release", headers=admin, json={"reason": "Case closed"}))
    assert assert_ok(server.post(f"{API}/retention/runs", headers=admin))["redacted"] == 4
    assert texts(sql, held) == [None] * 4
    assert every_leaf_verifies(app, sql) == []
    # Every export verifies offline, the redacted messages with their redaction.
    assert exports_verify(server, cli, tmp_path, world["auditor"], old_customers, held, billing) == [
        (0, True, ["retention"] * 4), (0, True, ["retention"] * 4), (0, True, [])]
    # Each change is in the configuration-change log, with what changed.
    policies = audited(sql, "retention_policy")
    assert [(a, m, p, k, b, f) for a, m, p, k, b, f, _ in policies] == [
        ("root", "PUT", "retention/policies", "crm-demo/*", True, False),
        ("root", "PUT", "retention/policies", "crm-demo/billing", True, False)]
    assert {"path": "keep_days", "before": None, "after": 30} in policies[0][6]
    holds = audited(sql, "legal_hold")
    assert [(m, p, k, b, f) for _, m, p, k, b, f, _ in holds] == [
        ("POST", "legal-holds", str(hold["id"]), True, False),
        ("POST", f"legal-holds/{hold['id']}/release", str(hold["id"]), False, False)]
    assert {"path": "released", "before": False, "after": True} in holds[1][6]


def test_two_purges_at_once_redact_each_message_once(world, server, sql, app):
    from concurrent.futures import ThreadPoolExecutor

    from admin_app.errors import ApiError
    from admin_app.retention import purge

    ada = world["ada"]
    archives = [archive(server, ada, "customers") for _ in range(3)]
    for archive_id in archives:
        talk(server, ada, archive_id, 3)
        age(sql, archive_id, 10)
    assert_ok(server.request("PUT", f"{API}/retention/policies", headers=world["admin"],
                             json={"client_app_id": "crm-demo", "keep_days": 5}))
    database = app.extensions["bailing"].db

    def one(_):
        try:
            return purge.run(database, "t", batch=4)
        except ApiError as err:  # the other run holds the lock: told so, nothing written
            return err.code

    results = list(ThreadPoolExecutor(2).map(one, range(2)))
    redacted = sum(r["redacted"] for r in results if isinstance(r, dict))
    assert all(isinstance(r, dict) or r == "retention_run_busy" for r in results), results
    assert redacted == 18 == sql("SELECT count(*) FROM bz_evidence_redactions")[0][0]
    assert every_leaf_verifies(app, sql) == []


def test_the_scheduled_purge_runs_after_its_first_wait_and_records_nothing_without_a_policy(world, server, sql, app):
    import time

    from admin_app.retention.worker import PurgeWorker, seconds_from

    assert [seconds_from(v) for v in (None, "", "60", "0", "-1")] == [21600.0, 21600.0, 60.0, 0.0, 0.0]
    with pytest.raises(SystemExit):
        seconds_from("soon")
    ada = world["ada"]
    archive_id = archive(server, ada, "customers")
    talk(server, ada, archive_id, 1)
    age(sql, archive_id, 9)
    worker = PurgeWorker(app.extensions["bailing"].db, seconds=3600, first_pass_seconds=0.05)
    worker.purge_once()  # no policy: nothing to do, nothing recorded
    assert sql("SELECT count(*) FROM bz_retention_runs") == [(0,)]
    assert_ok(server.request("PUT", f"{API}/retention/policies", headers=world["admin"],
                             json={"client_app_id": "crm-demo", "route_key": "customers", "keep_days": 7}))
    worker.ensure_started()
    try:
        deadline = time.monotonic() + 10
        while not sql("SELECT finished_at FROM bz_retention_runs WHERE finished_at IS NOT NULL") \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert sql("SELECT actor, redacted, archives FROM bz_retention_runs") == [("scheduler", 2, 1)]
    assert texts(sql, archive_id) == [None, None]


# ----------------------------------------------------------------------------- erasure

def test_an_erasure_of_one_principal_across_three_archives_refused_under_a_hold_then_done(world, server, sql, app,
                                                                                          cli, tmp_path):
    ada, bob, admin = world["ada"], world["bob"], world["admin"]
    mine = [archive(server, ada, route) for route in ("customers", "billing", "customers")]
    for archive_id in mine:
        talk(server, ada, archive_id, 2)
    others = archive(server, bob, "customers")
    talk(server, bob, others, 1)
    # Ada is a member of bob's group archive too; its turns (no run link) are bob's, the writer's.
    group = archive(server, bob, "customers", ada)
    talk(server, bob, group, 1)
    hold = assert_ok(server.post(f"{API}/legal-holds", headers=admin,
                                 json={"scope": "tenant", "value": "t-1", "reason": "Regulator's inquiry"}))
    before = row_counts(sql, *WRITTEN)
    refused = assert_error(server.post(f"{API}/erasure-requests", headers=admin,
                                       json={"principal_id": "ada", "reason": "Art. 17 request #88"}),
                           409, "legal_hold_applies")
    assert refused["holds"] == [hold["id"]] and len(refused["archives"]) == 4
    assert row_counts(sql, *WRITTEN) == before  # nothing erased, nothing recorded
    assert texts(sql, mine[0]) == ["question t1", "answer t1", "question t5", "answer t5"]
    # A hold on the principal itself refuses too, once the tenant's is released.
    assert_ok(server.post(f"{API}/legal-holds/{hold['id']}/release", headers=admin, json={"reason": "Closed"}))
    by_name = assert_ok(server.post(f"{API}/legal-holds", headers=admin,
                                    json={"scope": "principal", "value": "ada", "reason": "Litigation"}))
    assert_error(server.post(f"{API}/erasure-requests", headers=admin,
                             json={"principal_id": "ada", "reason": "Art. 17 request #88"}), 409, "legal_hold_applies")
    assert_ok(server.post(f"{API}/legal-holds/{by_name['id']}/release", headers=admin, json={"reason": "Settled"}))

    done = assert_ok(server.post(f"{API}/erasure-requests", headers=admin,
                                 json={"principal_id": "ada", "reason": "Art. 17 request #88"}))
    assert (done["state"], done["redacted"], done["archives"], done["requested_by"]) == ("done", 12, 3, "root")
    for archive_id in mine:
        assert texts(sql, archive_id) == [None] * 4
    assert texts(sql, others) == ["question t1", "answer t1"]
    assert texts(sql, group) == ["question t1", "answer t1"]
    assert sql("SELECT DISTINCT basis, basis_ref FROM bz_evidence_redactions") == [("erasure", str(done["id"]))]
    assert every_leaf_verifies(app, sql) == []
    assert exports_verify(server, cli, tmp_path, world["auditor"], *mine, group) == [
        (0, True, ["erasure"] * 4)] * 3 + [(0, True, [])]
    assert assert_ok(server.get(f"{API}/erasure-requests", headers=world["auditor"])) == [done]
    (row,) = audited(sql, "erasure_request")
    assert row[:6] == ("root", "POST", "erasure-requests", str(done["id"]), True, False)
    assert {"path": "principal_id", "before": None, "after": "ada"} in row[6]


def test_in_a_group_archive_an_erasure_takes_the_turns_linked_to_the_principal_s_member(world, server, sql):
    ada, bob = world["ada"], world["bob"]
    group = archive(server, bob, "customers", ada)
    talk(server, bob, group, 2)  # turns t1 (2-3) and t5 (6-7), written by bob
    # Turn t5's run is ada's: its run link names her member (set in SQL, as a linked run of hers would).
    sql("INSERT INTO bz_agent_conversation_events (archive_id, sequence, event_id, client_turn_id, kind, run_id, "
        "member_session_id, body_sha256) VALUES (%s, 9, 'e9', 't5', 'run_link', %s, %s, repeat('0', 64))",
        (group, str(uuid.uuid4()), ada["session_id"]))
    done = assert_ok(server.post(f"{API}/erasure-requests", headers=world["admin"],
                                 json={"principal_id": "ada", "reason": "Request 12"}))
    assert (done["redacted"], done["archives"]) == (2, 1)
    assert texts(sql, group) == ["question t1", "answer t1", None, None]
    # Bob's erasure takes his own turn (no run link: the writer's) and leaves ada's.
    assert assert_ok(server.post(f"{API}/erasure-requests", headers=world["admin"],
                                 json={"principal_id": "bob", "reason": "Request 13"}))["redacted"] == 2
    assert texts(sql, group) == [None] * 4


# ----------------------------------------------------------------------------- the command line

def test_the_commands_set_policies_place_and_release_holds_run_and_erase(world, server, cli, sql):
    ada = world["ada"]
    archive_id = archive(server, ada, "customers")
    talk(server, ada, archive_id, 1)
    age(sql, archive_id, 3)
    policy = cli_ok(cli("retention", "policy", "set", "--app", "crm-demo", "--route", "customers", "--keep-days", "2"))
    assert (policy["route_key"], policy["keep_days"]) == ("customers", 2)
    cli_refused(cli("retention", "policy", "set", "--app", "crm-demo", "--keep-days", "2", "--keep"), "invalid_request")
    cli_refused(cli("retention", "policy", "set", "--app", "crm-demo", "--keep-days", "0"), "invalid_request")
    assert [p["id"] for p in cli_ok(cli("retention", "policy", "list"))["policies"]] == [policy["id"]]
    hold = cli_ok(cli("holds", "place", "--archive", archive_id, "--reason", "Audit"))
    cli_refused(cli("holds", "place", "--archive", archive_id, "--tenant", "t-1", "--reason", "x"), "invalid_request")
    assert cli_ok(cli("retention", "run"))["redacted"] == 0
    cli_refused(cli("erasure", "request", "--principal", "ada", "--reason", "Request 9"), "legal_hold_applies")
    assert cli_ok(cli("holds", "list"))["holds"][0]["active"] is True
    cli_ok(cli("holds", "release", str(hold["id"]), "--reason", "Done"))
    cli_refused(cli("holds", "release", str(hold["id"]), "--reason", "Again"), "legal_hold_released")
    cli_refused(cli("holds", "release", "nope", "--reason", "x"), "legal_hold_not_found")
    run = cli_ok(cli("retention", "run"))
    assert (run["redacted"], run["actor"].startswith("cli:")) == (2, True)
    assert cli_ok(cli("erasure", "request", "--principal", "ada", "--reason", "Request 9"))["redacted"] == 0
    cli_ok(cli("retention", "policy", "remove", "--app", "crm-demo", "--route", "customers"))
    cli_refused(cli("retention", "policy", "remove", "--app", "crm-demo"), "retention_policy_not_found")
    rows = sql("SELECT object_kind, method, actor LIKE 'cli:%%' FROM bz_config_audit "
               "WHERE object_kind IN ('retention_policy', 'legal_hold', 'erasure_request') ORDER BY id")
    assert rows == [("retention_policy", "SET", True), ("legal_hold", "PLACE", True),
                    ("legal_hold", "RELEASE", True), ("erasure_request", "ERASE", True),
                    ("retention_policy", "REMOVE", True)]


def test_creating_an_admin_is_a_configuration_change(cli, sql):
    cli_ok(cli("admins", "create", "newcomer", "--role", "auditor", "--password-stdin", input=PASSWORD + "\n"))
    (row,) = sql("SELECT method, path, object_kind, before_hash IS NULL, diff FROM bz_config_audit "
                 "WHERE object_key = 'newcomer'")
    assert row[:4] == ("CREATE", "admins/newcomer", "admin", True)
    assert {"path": "role", "before": None, "after": "auditor"} in row[4]


# ----------------------------------------------------------------------------- API refusals

REFUSALS = [
    ("PUT", "/retention/policies", {"client_app_id": "crm-demo", "keep_days": 30, "extra": 1}, 400, "invalid_request"),
    ("PUT", "/retention/policies", {"client_app_id": "crm-demo", "keep_days": 0}, 400, "invalid_request"),
    ("PUT", "/retention/policies", {"client_app_id": "crm-demo", "keep_days": 36501}, 400, "invalid_request"),
    ("PUT", "/retention/policies", {"client_app_id": "crm-demo", "route_key": "no such", "keep_days": 3},
     400, "invalid_request"),
    ("PUT", "/retention/policies", {"client_app_id": "crm-demo"}, 400, "invalid_request"),
    ("DELETE", "/retention/policies/999", None, 404, "retention_policy_not_found"),
    ("DELETE", "/retention/policies/x", None, 404, "retention_policy_not_found"),
    ("POST", "/retention/runs", {"now": "later"}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "planet", "value": "x", "reason": "r"}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "principal", "value": "ada", "reason": "r" * 2001}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "principal", "value": "ada", "reason": "   "}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "tenant", "value": "a\nb", "reason": "r"}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "archive", "value": "not-a-uuid", "reason": "r"}, 400, "invalid_request"),
    ("POST", "/legal-holds", {"scope": "archive", "value": str(uuid.UUID(int=7)), "reason": "r"},
     404, "conversation_audit_not_found"),
    ("POST", "/legal-holds/42/release", {"reason": "r"}, 404, "legal_hold_not_found"),
    ("POST", "/erasure-requests", {"principal_id": "ada"}, 400, "invalid_request"),
    ("POST", "/erasure-requests", {"principal_id": "x" * 257, "reason": "r"}, 400, "invalid_request"),
]


def test_admin_api_refusals_write_nothing(world, server, sql):
    # One world for every case (an admin's password hash is slow to make); each case on its own.
    before = row_counts(sql, *WRITTEN)
    for method, path, body, status, code in REFUSALS:
        assert_error(server.request(method, API + path, headers=world["admin"], json=body), status, code)
        assert row_counts(sql, *WRITTEN) == before, (method, path, body)


def test_auditors_read_and_only_admins_change(world, server, sql):
    auditor = world["auditor"]
    for path in ("/retention/policies", "/retention/runs", "/legal-holds", "/erasure-requests"):
        assert assert_ok(server.get(API + path, headers=auditor, params={"limit": "junk"})) == []
    before = row_counts(sql, *WRITTEN)
    for method, path, body in (("PUT", "/retention/policies", {"client_app_id": "crm-demo", "keep_days": 3}),
                               ("POST", "/retention/runs", None),
                               ("POST", "/legal-holds", {"scope": "tenant", "value": "t-1", "reason": "r"}),
                               ("POST", "/erasure-requests", {"principal_id": "ada", "reason": "r"})):
        assert_error(server.request(method, API + path, headers=auditor, json=body), 403, "forbidden")
        assert_error(server.request(method, API + path, json=body), 401, "unauthorized")
    assert row_counts(sql, *WRITTEN) == before
    hold = assert_ok(server.post(f"{API}/legal-holds", headers=world["admin"],
                                 json={"scope": "tenant", "value": "t-1", "reason": "r"}))
    assert_ok(server.post(f"{API}/legal-holds/{hold['id']}/release", headers=world["admin"], json={"reason": "r"}))
    before = row_counts(sql, *WRITTEN)
    assert_error(server.post(f"{API}/legal-holds/{hold['id']}/release", headers=world["admin"], json={"reason": "r"}),
                 409, "legal_hold_released")
    assert row_counts(sql, *WRITTEN) == before


# ----------------------------------------------------------------------------- the console

def _console(server, username: str) -> requests.Session:
    browser = requests.Session()
    page = browser.get(server.url + "/console/login", timeout=60).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    signed = browser.post(server.url + "/console/login", timeout=60, allow_redirects=False,
                          data={"username": username, "password": PASSWORD, "csrf_token": token})
    assert signed.status_code in (302, 303), signed.text[:500]
    return browser


def test_the_records_page_lists_escapes_and_changes_and_a_transcript_says_what_redacted(world, server, sql):
    ada = world["ada"]
    archive_id = archive(server, ada, "customers")
    talk(server, ada, archive_id, 1)
    hostile = '<script>alert("hold")</script>'
    assert_ok(server.post(f"{API}/legal-holds", headers=world["admin"],
                          json={"scope": "principal", "value": "bob", "reason": hostile}))
    root = _console(server, "root")
    page = root.get(server.url + "/console/records/", timeout=60)
    assert page.status_code == 200
    assert hostile not in page.text and "&lt;script&gt;" in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    # An admin erases ada's messages from the page; the transcript then says so.
    done = root.post(server.url + "/console/records/erasures", timeout=60,
                     data={"csrf_token": token, "principal_id": "ada", "reason": "Request by e-mail"})
    assert done.status_code == 200 and "Erasure request #" in done.text
    (request_id,) = sql("SELECT id FROM bz_erasure_requests")[0]
    transcript = root.get(f"{server.url}/console/conversations/{archive_id}", timeout=60).text
    assert f"under erasure request #{request_id}, by root" in transcript
    assert "question t1" not in transcript
    # Refused without the form's token; an auditor sees the page but no form, and cannot post.
    assert root.post(server.url + "/console/records/holds", timeout=60,
                     data={"scope": "tenant", "value": "t-9", "reason": "r"}).status_code in (400, 403)
    auditor = _console(server, "alice")
    seen = auditor.get(server.url + "/console/records/", timeout=60)
    assert seen.status_code == 200 and 'id="hold-form"' not in seen.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', seen.text).group(1)
    assert auditor.post(server.url + "/console/records/holds", timeout=60,
                        data={"csrf_token": token, "scope": "tenant", "value": "t-9", "reason": "r"}).status_code == 403
    assert sql("SELECT count(*) FROM bz_legal_holds")[0][0] == 1
