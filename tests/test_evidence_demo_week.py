"""A consistency proof between a signed head from before and one from after a week of the demo's
traffic (issue 33, "Must show"): each simulated day runs the demo's credit-review story through
the real APIs (an agent turn with a read call and a credit raise waiting for an approver, the
transcript archived, one raise approved and one denied, the transcript read in the console and
through the admin API, a configuration change applied); the proof from the admin API verifies
offline with only the public key, and a leaf of that week changed in SQL makes `evidence check`
fail naming it.

Simulated time: the days run one after the other in real time; after each, the time columns that
no leaf commits to (the leaves' own created_at, the day's events' created_at) are moved back to
that day, so the log reads as a week. Times a leaf does commit to (a read's `at`, a decision's
`decided_at`, a change's time) are left as written: moving them would be tampering."""
from __future__ import annotations

import json

import requests

from tests.conftest import governed_config
from tests.helpers import PASSWORD, admin_token, assert_ok, bearer, make_admin

API = "/admin/api/evidence"
DAYS = 7
RAISE = {"customer_id": "C-100235", "credit_limit": 80000}


def console_reader(server, cli) -> requests.Session:
    make_admin(cli, "support-week", "support")
    reader = requests.Session()
    page = reader.get(server.url + "/console/login", timeout=60).text
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    reader.post(server.url + "/console/login", timeout=60, allow_redirects=False,
                data={"username": "support-week", "password": PASSWORD, "csrf_token": token})
    return reader


def one_day(day: int, hub, server, business, apply, admin: dict, approver: dict, reader: requests.Session) -> None:
    archive_id, run_id = hub.traced_conversation(conversation=f"credit-review-day-{day}")
    hub.approval("customer_update_credit_limit", RAISE, run_id)  # a second raise: denied below
    pending = server.get("/admin/api/tool-approvals", params={"status": "pending"}, headers=approver).json()["items"]
    assert len(pending) == 2
    for approval, decision in zip(pending, ("approve", "deny")):
        decided = server.post(f"/admin/api/tool-approvals/{approval['approval_id']}/{decision}", headers=approver,
                              json={"args_hash": approval["args_hash"], "reason": f"day {day}"})
        assert decided.status_code == 200, decided.text
    assert reader.get(f"{server.url}/console/conversations/{archive_id}", timeout=60).status_code == 200
    assert_ok(server.get(f"/admin/api/conversation-audits/{archive_id}", headers=admin))
    apply(governed_config(business.url, name=f"Operations desk, week plan day {day + 1}"))


def back_to_day(sql, first_leaf: int, days_ago: int) -> None:
    sql("UPDATE bz_evidence_leaves SET created_at = created_at - make_interval(days => %s) WHERE idx >= %s",
        (days_ago, first_leaf))
    sql("UPDATE bz_agent_conversation_events e SET created_at = e.created_at - make_interval(days => %s) "
        "FROM bz_evidence_leaves l WHERE l.idx >= %s AND l.kind = 'conversation_event' "
        "AND l.ref = 'event:' || e.archive_id || ':' || e.sequence", (days_ago, first_leaf))


def test_a_week_of_demo_traffic_is_proven_consistent_with_the_head_before_it(
        hub, server, cli, sql, business, apply, tmp_path):
    admin = bearer(admin_token(cli, "week-admin", "admin"))
    approver = bearer(admin_token(cli, "week-approver", "approver"))
    reader = console_reader(server, cli)
    before = assert_ok(server.post(f"{API}/heads", headers=admin))

    for day in range(DAYS):
        start = sql("SELECT coalesce(max(idx) + 1, 0) FROM bz_evidence_leaves")[0][0]
        one_day(day, hub, server, business, apply, admin, approver, reader)
        back_to_day(sql, start, DAYS - 1 - day)

    after = assert_ok(server.post(f"{API}/heads", headers=admin))
    week = after["tree_size"] - before["tree_size"]
    kinds = dict(sql("SELECT kind, count(*) FROM bz_evidence_leaves WHERE idx >= %s GROUP BY kind",
                     (before["tree_size"],)))
    # Each day: 9 events, 2 decisions, 2 reads, its configuration change(s).
    assert kinds["conversation_event"] == 9 * DAYS and kinds["approval_decision"] == 2 * DAYS
    assert kinds["access_read"] == 2 * DAYS and kinds["config_change"] >= DAYS, kinds
    assert week == sum(kinds.values())
    days = sql("SELECT count(DISTINCT created_at::date) FROM bz_evidence_leaves WHERE idx >= %s",
               (before["tree_size"],))[0][0]
    assert days == DAYS

    proof = assert_ok(server.get(f"{API}/proof/consistency", headers=admin,
                                 params={"first": before["tree_size"], "second": after["tree_size"]}))
    key = next(k for k in assert_ok(server.get(f"{API}/keys", headers=admin)) if not k["retired_at"])
    bundle = tmp_path / "week.json"
    bundle.write_text(json.dumps(proof))
    code, out, _ = cli("evidence", "verify-proof", str(bundle), "--public-key", key["public_key"])
    assert code == 0 and out["ok"] is True, out
    # The bundle is the week's: a proof from the first head to any other size does not verify.
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**proof, "proof": proof["proof"][1:]}))
    code, out, _ = cli("evidence", "verify-proof", str(forged), "--public-key", key["public_key"])
    assert code == 1 and out["ok"] is False

    code, report, _ = cli("evidence", "check")
    assert code == 0 and report["ok"], report
    tampered = before["tree_size"] + week // 2
    sql("UPDATE bz_evidence_leaves SET leaf_hash = sha256('forged') WHERE idx = %s", (tampered,))
    code, report, _ = cli("evidence", "check")
    assert code == 1 and report["ok"] is False and report["first_bad_leaf"] == tampered, report
