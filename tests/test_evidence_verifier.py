"""The evidence verifier (issue 33): a pass recomputes the tree against the latest signed head and
every leaf's row as it stands, names the first bad leaf and records itself; the alert is a metric
and a banner on every console page; a transcript's Verify checks that transcript's leaves; the
configuration-change log's own retention purge is lawful, a row removed behind its back is not."""
from __future__ import annotations

from datetime import timedelta

import requests
from playwright.sync_api import expect

from admin_app.canonical import utc_now
from admin_app.config_audit.log import prune
from admin_app.evidence import leaves, verify
from admin_app.integrity import verifier
from admin_app.integrity.worker import VerifyWorker, seconds_from
from tests.conftest import governed_config
from tests.helpers import PASSWORD, admin_token, apply_config, assert_error, bearer, cli_ok, row_count
from tests.test_metrics import scrape

MISMATCH = "bailing_evidence_mismatch"
LATEST = "/admin/api/evidence/checks/latest"


def console(server, hub, role: str = "auditor") -> requests.Session:
    """A signed-in console session of a new staff member of `role`."""
    name = hub.admin(role, f"{role}-reader")
    session = requests.Session()
    page = session.get(server.url + "/console/login", timeout=60).text
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    signed = session.post(server.url + "/console/login", timeout=60, allow_redirects=False,
                          data={"username": name, "password": PASSWORD, "csrf_token": token})
    assert signed.status_code == 303, signed.text[:300]
    return session


def page(server, reader: requests.Session, path: str) -> str:
    response = reader.get(server.url + path, timeout=60)
    assert response.status_code == 200, response.text[:300]
    return response.text


def leaf_of(sql, ref: str) -> int:
    (index,), = sql("SELECT idx FROM bz_evidence_leaves WHERE ref = %s", (ref,))
    return index


def check(cli) -> tuple[int, dict]:
    code, out, _ = cli("evidence", "check")
    return code, out


def recorded(sql) -> tuple:
    (row,) = sql("SELECT ok, first_bad_leaf, first_bad_ref, problem, leaves_checked, finished_at IS NOT NULL "
                 "FROM bz_evidence_checks ORDER BY id DESC LIMIT 1")
    return row


def expect_bad(cli, sql, ref: str, problem: str, bad: int) -> dict:
    """A pass names `ref`'s leaf first, with `problem`, `bad` leaves in all, and records so."""
    code, report = check(cli)
    index = leaf_of(sql, ref)
    assert (code, report["ok"], report["first_bad_leaf"], report["ref"], report["bad_leaves"]) == \
        (1, False, index, ref, bad), report
    more = f" ({bad - 1} more leaves do not verify)" if bad > 1 else ""
    assert report["problem"] == f"{ref}: {problem}{more}"
    assert recorded(sql) == (False, index, ref, report["problem"], report["leaves_checked"], True)
    return report


def test_each_tampering_in_sql_is_named_by_its_first_bad_leaf_and_raises_the_alert(hub, cli, sql, server):
    a, b, c, d = (hub.archive(f"conv-{n}") for n in "abcd")
    for archive, n in ((a, "a"), (b, "b"), (c, "c"), (d, "d")):
        hub.append(archive, hub.exchange(archive, 1, "t1", f"question {n}", f"answer {n}"))
    reader = console(server, hub)
    page(server, reader, f"/console/conversations/{a}")  # a read: an access-log row and its leaf
    cli_ok(cli("evidence", "head"))
    code, report = check(cli)
    (total,), = sql("SELECT count(*) FROM bz_evidence_leaves")
    assert (code, report["ok"], report["bad_leaves"], report["leaves_checked"]) == (0, True, 0, total)
    assert recorded(sql) == (True, None, None, None, total, True)
    assert scrape(server).value(MISMATCH) == 0
    assert 'id="evidence-failed"' not in page(server, reader, "/console/conversations/")

    # Each tampering lands on an earlier leaf than the ones before it, so each pass names it.
    (access_id, target), = sql("SELECT id, target FROM bz_access_log ORDER BY id DESC LIMIT 1")
    sql("DELETE FROM bz_access_log WHERE id = %s", (access_id,))
    expect_bad(cli, sql, leaves.access_ref(access_id, target), "the row is gone", 1)
    # An archive's tail cut off: its last events deleted and its header lowered to match.
    sql("DELETE FROM bz_agent_conversation_events WHERE archive_id = %s AND sequence > 2", (d,))
    sql("UPDATE bz_agent_conversation_archives SET last_sequence = 2 WHERE id = %s", (d,))
    expect_bad(cli, sql, leaves.event_ref(d, 3), "the row is gone", 3)
    # Two events swapped (their sequence numbers exchanged).
    for old, new in ((2, 1000), (3, 2), (1000, 3)):
        sql("UPDATE bz_agent_conversation_events SET sequence = %s WHERE archive_id = %s AND sequence = %s",
            (new, c, old))
    expect_bad(cli, sql, leaves.event_ref(c, 2), "the row no longer matches its leaf", 5)
    sql("DELETE FROM bz_agent_conversation_events WHERE archive_id = %s AND sequence = 2", (b,))
    expect_bad(cli, sql, leaves.event_ref(b, 2), "the row is gone", 6)
    sql("UPDATE bz_agent_conversation_events SET content = 'forged' WHERE archive_id = %s AND sequence = 3", (a,))
    report = expect_bad(cli, sql, leaves.event_ref(a, 3), "the row no longer matches its leaf", 7)

    assert scrape(server).value(MISMATCH) == 1
    html = page(server, reader, "/console/conversations/")
    banner = html.split('id="evidence-failed"')[1].split("</div>")[0]
    assert f"at leaf {report['first_bad_leaf']}" in banner and leaves.event_ref(a, 3) in banner
    assert "the row no longer matches its leaf (6 more leaves do not verify)" in banner
    auditor = bearer(admin_token(cli, "auditor-api", "auditor"))
    latest = server.get(LATEST, headers=auditor).json()
    assert (latest["ok"], latest["first_bad_leaf"], latest["first_bad_ref"]) == \
        (False, report["first_bad_leaf"], leaves.event_ref(a, 3))

    # A ref changed in the log's own table is untrusted text: named, escaped wherever shown.
    hostile = '<b>x</b>:"&'
    index = leaf_of(sql, leaves.event_ref(a, 1))
    sql("UPDATE bz_evidence_leaves SET ref = %s WHERE idx = %s", (hostile, index))
    code, report = check(cli)
    assert (code, report["first_bad_leaf"], report["ref"]) == (1, index, hostile)
    assert report["problem"].startswith(f"{hostile}: the leaf's ref is malformed")
    html = page(server, reader, "/console/conversations/")
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;:&#34;&amp;" in html


def test_a_clean_hub_passes_and_a_transcript_verifies_on_its_page(hub, cli, sql, server):
    auditor = bearer(admin_token(cli, "auditor-api", "auditor"))
    support = bearer(admin_token(cli, "support-api", "support"))
    assert_error(server.get(LATEST, headers=auditor), 404, "evidence_not_found")
    assert_error(server.get(LATEST, headers=support), 403, "forbidden")
    assert row_count(sql, "bz_evidence_checks") == 0
    archive = hub.archive("conv-clean")
    hub.append(archive, hub.exchange(archive, 1, "t1", "question", "answer"))
    head = cli_ok(cli("evidence", "head"))
    code, report = check(cli)
    assert (code, report["ok"], report["first_bad_leaf"]) == (0, True, None)
    latest = server.get(LATEST, headers=auditor).json()
    assert (latest["ok"], latest["leaves_checked"], latest["id"]) == (True, report["leaves_checked"],
                                                                      report["check_id"])
    samples = scrape(server)
    assert (samples.value(MISMATCH), samples.value("bailing_evidence_leaves_checked")) == \
        (0, report["leaves_checked"])

    reader = console(server, hub)
    html = page(server, reader, f"/console/conversations/{archive}")
    assert 'id="evidence-failed"' not in html and "found every leaf verifying" in html
    verify = f"/console/conversations/{archive}/verify"
    shown = page(server, reader, verify)
    assert "Verified:</strong> 4 events match their leaves" in shown
    assert f"covered by the signed head of size {head['tree_size']}" in shown
    # Events after the latest head: verified, not yet covered.
    hub.append(archive, hub.exchange(archive, 5, "t2", "again", "yes"))
    shown = page(server, reader, verify)
    assert "8 events match" in shown and "not yet covered by a signed head" in shown
    sql("UPDATE bz_agent_conversation_events SET content = 'forged' WHERE archive_id = %s AND sequence = 6",
        (archive,))
    shown = page(server, reader, verify)
    ref = leaves.event_ref(archive, 6)
    assert f"Does not verify:</strong>\nfirst bad leaf {leaf_of(sql, ref)}" in shown and ref in shown
    assert reader.get(server.url + "/console/conversations/not-a-uuid/verify", timeout=60).status_code == 404


def test_the_config_audit_purge_is_lawful_and_a_row_removed_behind_it_is_not(app, cli, business, sql, tmp_path):
    apply_config(cli, tmp_path, governed_config(business.url))
    cli_ok(cli("evidence", "head"))
    with app.extensions["bailing"].db.session() as db:
        purged = prune(db, 1, now=utc_now() + timedelta(days=30))  # every row is older than the cutoff
    assert purged["deleted"] >= 3
    (entry,), = sql("SELECT id FROM bz_config_audit")  # the purge's own entry is all that is left
    (ranges,), = sql("SELECT ranges FROM bz_config_audit_removals WHERE purge_id = %s", (entry,))
    assert sum(hi - lo + 1 for lo, hi in ranges) == purged["deleted"]
    code, report = check(cli)
    assert (code, report["ok"]) == (0, True), report
    # The purge's entry deleted in SQL is in no range: tampering.
    sql("DELETE FROM bz_config_audit WHERE id = %s", (entry,))
    report = expect_bad(cli, sql, f"bz_config_audit:{entry}", "the row is gone", 1)
    # A removal record with no leaf of its own does not make it lawful...
    sql("INSERT INTO bz_config_audit_removals (purge_id, cutoff, ranges) VALUES (%s, now(), %s)",
        (entry + 100, f"[[{entry}, {entry}]]"))
    assert check(cli)[1]["first_bad_leaf"] == report["first_bad_leaf"]
    # ...nor does the genuine one widened: it no longer matches its leaf, so it vouches for nothing
    # (every row it covered is reported gone, and the record itself).
    sql("UPDATE bz_config_audit_removals SET ranges = ranges || %s::jsonb WHERE purge_id = %s",
        (f"[[{entry}, {entry}]]", entry))
    expect_bad(cli, sql, f"bz_config_audit:{ranges[0][0]}", "the row is gone", purged["deleted"] + 2)
    assert sql("SELECT ref FROM bz_evidence_leaves WHERE kind = 'config_removal'") == [(f"config_removal:{entry}",)]


def test_a_tree_that_does_not_verify_ends_the_pass_at_its_first_bad_leaf(app, cli, sql, monkeypatch):
    # Chunks of 2 leaves (the tree) and 3 (the rows), so a few leaves cross several of each.
    monkeypatch.setattr(verify, "CHUNK_LEVEL", 1)
    monkeypatch.setattr(verify, "CHUNK", 2)
    monkeypatch.setattr(verifier, "CHUNK", 3)
    for n in range(3):
        admin_token(cli, f"reader-{n}", "auditor")
    cli_ok(cli("evidence", "head"))
    (total,), = sql("SELECT count(*) FROM bz_evidence_leaves")
    assert total >= 7
    VerifyWorker(app.extensions["bailing"].db, 60).verify_once()  # the background worker's pass
    assert recorded(sql) == (True, None, None, None, total, True)
    (ref,), = sql("SELECT ref FROM bz_evidence_leaves WHERE idx = 5")
    sql("UPDATE bz_evidence_leaves SET leaf_hash = sha256('forged') WHERE idx = 5")
    code, report = check(cli)
    assert (code, report["first_bad_leaf"], report["ref"]) == (1, 5, ref)
    assert report["problem"] == "leaf 5's hash is not the one the signed head commits to"
    assert recorded(sql) == (False, 5, ref, report["problem"], total, True)
    sql("DELETE FROM bz_evidence_leaves WHERE idx = 3")
    code, report = check(cli)
    assert (code, report["first_bad_leaf"], report["leaves_checked"]) == (1, 3, 3)
    assert report["problem"] == "leaf 3 is missing (the next row is leaf 4)"


def test_the_verifier_setting_is_read_as_the_heads_one():
    assert [seconds_from(v) for v in (None, "", " 120 ", "0", "-5")] == [3600.0, 3600.0, 120.0, 0.0, 0.0]


def test_the_verify_button_shows_the_transcript_verified(hub, ui, cli):
    archive = hub.archive("conv-button")
    hub.append(archive, hub.exchange(archive, 1, "t1", "question", "answer"))
    head = cli_ok(cli("evidence", "head"))
    screen = ui()
    screen.sign_in(hub.admin("auditor", "auditor-ui"))
    screen.goto(f"/console/conversations/{archive}")
    screen.page.get_by_role("button", name="Verify this transcript").click()
    expect(screen.page.locator("#verify-result")).to_contain_text(
        f"Verified: 4 events match their leaves, covered by the signed head of size {head['tree_size']}")
    screen.watch.assert_clean()
