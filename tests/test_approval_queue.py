"""The approvals queue worked by several approvers: approval expiry (a route's `approvals`
time-to-live, per tool), the queue's filters in the URL, the live check of an open page, "decide
and open the next" in the same filtered order, and the context an approval page shows (the run's
user message, for those who may read runs).

Everything goes through the real agent APIs, admin API and console over HTTP on a real
PostgreSQL, with the demo business system recording what reaches it; SQL only puts an approval in
the past (expiry, age) or on another route, never by sleeping."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest

from admin_app.console import approvals as approvals_view
from tests.browser import CREDIT, MERGE, Hub
from tests.conftest import governed_config
from tests.helpers import admin_token, apply_config, assert_error, bearer, cli_ok, make_admin
from tests.test_config_apply import snapshot as config_rows
from tests.test_console_paging import HTMX, more_of, rows_of
from tests.test_console_server import csrf_of, desk_config, flashes, location, signed_in

NOTE = "customer_note_add"      # forced to approval on `desk`, risk low
APPROVALS = {"ttl_seconds": 3600, "tool_ttl_seconds": {NOTE: 600}}
DANA = {"principal": '{"id": "Principal-77", "tenant": "tenant-8"}', "on_behalf_of": "tenant-8:Dana_Ops%2"}
EXPIRED = "This approval expired; it can no longer be decided and nothing was changed."
NOTHING_ELSE = "Nothing else is waiting in this queue."
KEYS = re.compile(r'data-key="([^"]+)" data-approval-id="([0-9a-f-]{36})"')


def note(text: str) -> dict:
    return {"customer_id": "C-100234", "body": text}


def when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


# ---------------------------------------------------------------- the scene

@dataclass
class Queue:
    """Route `desk` with notes forced to approval and APPROVALS as its time-to-live; two
    requesters: `ops` (app ops-app, tenant-7:user-42) and `dana` (app ops-b, DANA)."""

    server: object
    cli: object
    sql: object
    business: object
    tmp_path: object
    ops: Hub
    dana: Hub

    def configure(self, approvals: dict | None) -> None:
        config = desk_config(self.business.url, self.tmp_path)
        if approvals is not None:
            config["routes"][0]["approvals"] = approvals
        config["client_apps"].append({"app_id": "ops-b", "name": "Operations B", "allowed_routes": ["desk"],
                                      "enabled": True})
        apply_config(self.cli, self.tmp_path, config)

    def ask(self, hub: Hub, tool: str, arguments: dict, run_id: str | None = None) -> dict:
        """A call waiting for approval: the agent's answer (invocation_id, approval)."""
        out = hub.invoke(tool, arguments, run_id)
        assert out["status"] == "awaiting_approval", out
        return out

    def resume(self, hub: Hub, out: dict) -> dict:
        response = self.server.post(f"/agent-api/v1/tool-invocations/{out['invocation_id']}/resume", json={},
                                    headers=hub.headers())
        assert response.status_code == 200, response.text
        return response.json()

    def row(self, approval_id: str) -> dict:
        """Every column of an approval (with its row version, so even an identical rewrite shows)."""
        [(xmin, data)] = self.sql("SELECT xmin::text, to_jsonb(a) FROM bz_tool_approvals a WHERE id = %s",
                                  (approval_id,))
        return {"xmin": xmin, **data}

    def invocation(self, out: dict) -> tuple:
        return self.sql("SELECT xmin::text, status, reason FROM bz_tool_invocations WHERE invocation_id = %s",
                        (out["invocation_id"],))[0]

    def expire(self, *approval_ids: str) -> None:
        self.sql("UPDATE bz_tool_approvals SET created_at = now() - interval '2 hours', "
                 "expires_at = now() - interval '1 hour' WHERE id = ANY(%s::uuid[])", (list(approval_ids),))

    def access_log(self) -> list[tuple]:
        return self.sql("SELECT username, action, target FROM bz_access_log ORDER BY id")


@pytest.fixture
def queue(governed, server, cli, sql, business, tmp_path) -> Queue:
    hub = Hub(server, cli, sql, governed)
    scene = Queue(server, cli, sql, business, tmp_path, hub, hub)
    scene.configure(APPROVALS)
    code, dana, err = cli("sessions", "issue", "--client", "ops-b", "--routes", "desk",
                          "--principal", DANA["principal"], "--on-behalf-of", DANA["on_behalf_of"])
    assert code == 0, err
    scene.dana = Hub(server, cli, sql, dana)
    return scene


@dataclass
class Filled:
    """Five pending approvals at known ages, oldest first A, C, B, D, E:
    A ops note (low, 5 h), C ops merge (high, 2 h), B ops credit (medium, 50 min),
    D dana note (low, 10 min), E dana note on route `annex` (low, 1 min)."""

    ids: dict[str, str]
    hashes: dict[str, str]

    def of(self, names: str) -> list[str]:
        return [self.ids[n] for n in names]


@pytest.fixture
def filled(queue) -> Filled:
    asked = {"A": queue.ask(queue.ops, NOTE, note("note A")),
             "B": queue.ask(queue.ops, "customer_update_credit_limit", CREDIT),
             "C": queue.ask(queue.ops, "customer_merge", MERGE),
             "D": queue.ask(queue.dana, NOTE, note("note D")),
             "E": queue.ask(queue.dana, NOTE, note("note E"))}
    ages = {"A": "5 hours", "C": "2 hours", "B": "50 minutes", "D": "10 minutes", "E": "1 minute"}
    for name, age in ages.items():
        queue.sql("UPDATE bz_tool_approvals SET created_at = now() - %s::interval WHERE id = %s",
                  (age, asked[name]["approval"]["id"]))
    queue.sql("UPDATE bz_tool_approvals SET route_key = 'annex' WHERE id = %s", (asked["E"]["approval"]["id"],))
    return Filled({n: out["approval"]["id"] for n, out in asked.items()},
                  {n: out["approval"]["args_hash"] for n, out in asked.items()})


def api(queue: Queue, role: str) -> dict:
    """The admin API headers of a new admin of `role`."""
    return bearer(admin_token(queue.cli, f"api-{role}-{uuid.uuid4().hex[:6]}", role))


def console(queue: Queue, role: str, name: str | None = None):
    """A console user of `role`, signed in."""
    return signed_in(queue.server.url, make_admin(queue.cli, name or f"{role}-{uuid.uuid4().hex[:6]}", role))


def approve_api(queue: Queue, headers: dict, approval_id: str, args_hash: str):
    return queue.server.post(f"/admin/api/tool-approvals/{approval_id}/approve", headers=headers,
                             json={"args_hash": args_hash, "reason": "checked"})


def listed(queue: Queue, headers: dict, status: str) -> list[str]:
    response = queue.server.get("/admin/api/tool-approvals", params={"status": status, "limit": 100},
                                headers=headers)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


# ================================================================ expiry

def test_route_and_tool_ttls_set_expires_at_the_tool_first_and_none_without(queue, sql):
    assert sql("SELECT approvals FROM bz_routes WHERE route_key = 'desk'") == [(APPROVALS,)]
    headers = api(queue, "approver")
    for tool, arguments, ttl in ((NOTE, note("ttl"), 600), ("customer_merge", MERGE, 3600)):
        out = queue.ask(queue.ops, tool, arguments)
        [(created, expires)] = sql("SELECT created_at, expires_at FROM bz_tool_approvals WHERE id = %s",
                                   (out["approval"]["id"],))
        # created_at is the transaction's start, expires_at the hub's clock a moment later.
        assert timedelta(seconds=ttl) <= expires - created < timedelta(seconds=ttl + 5), (tool, expires - created)
        item = queue.server.get(f"/admin/api/tool-approvals/{out['approval']['id']}", headers=headers).json()
        assert abs(when(item["expires_at"]) - expires) < timedelta(milliseconds=1)  # shown to the ms
        assert item["expired"] is False

    # A tool's own value without a route's: the other tools' approvals never expire.
    queue.configure({"tool_ttl_seconds": {NOTE: 120}})
    timed = queue.ask(queue.ops, NOTE, note("tool ttl only"))["approval"]["id"]
    untimed = queue.ask(queue.ops, "customer_merge", MERGE)["approval"]["id"]
    [(created, expires)] = sql("SELECT created_at, expires_at FROM bz_tool_approvals WHERE id = %s", (timed,))
    assert timedelta(seconds=120) <= expires - created < timedelta(seconds=125)
    assert sql("SELECT expires_at FROM bz_tool_approvals WHERE id = %s", (untimed,)) == [(None,)]

    # Left out of the file, a route keeps its settings; an empty object clears them.
    queue.configure(None)
    assert sql("SELECT approvals FROM bz_routes WHERE route_key = 'desk'") == [({"tool_ttl_seconds": {NOTE: 120}},)]
    queue.configure({})
    assert sql("SELECT approvals FROM bz_routes WHERE route_key = 'desk'") == [({},)]
    out = queue.ask(queue.ops, NOTE, note("no ttl"))
    assert sql("SELECT expires_at FROM bz_tool_approvals WHERE id = %s", (out["approval"]["id"],)) == [(None,)]
    item = queue.server.get(f"/admin/api/tool-approvals/{out['approval']['id']}", headers=headers).json()
    assert item["expires_at"] is None and item["expired"] is False


def test_an_expired_pending_approval_can_be_decided_nowhere_and_leaves_the_queue(queue, business):
    gone = queue.ask(queue.ops, NOTE, note("too late"))
    waiting = queue.ask(queue.ops, NOTE, note("in time"))
    gone_id, gone_hash = gone["approval"]["id"], gone["approval"]["args_hash"]
    queue.expire(gone_id)
    before, inv_before = queue.row(gone_id), queue.invocation(gone)
    headers = api(queue, "approver")

    assert_error(approve_api(queue, headers, gone_id, gone_hash), 409, "approval_expired")
    denied = queue.server.post(f"/admin/api/tool-approvals/{gone_id}/deny", headers=headers,
                               json={"args_hash": gone_hash, "reason": "no"})
    assert_error(denied, 409, "approval_expired")
    # By its number too, as agents name it.
    assert_error(approve_api(queue, headers, str(before["number"]), gone_hash), 409, "approval_expired")

    approver = console(queue, "approver")
    form = f'action="/console/approvals/{waiting["approval"]["id"]}/decide"'
    assert form in approver.get(f"/console/approvals/{waiting['approval']['id']}").text
    page = approver.get(f"/console/approvals/{gone_id}")
    assert page.status_code == 200
    assert 'action="/console/approvals/' not in page.text  # no decision form on an expired one
    assert "This approval expired" in page.text
    decided = approver.post(f"/console/approvals/{gone_id}/decide", data={
        "decision": "approve", "args_hash": gone_hash, "then": "next", "risk": "low",
        "csrf_token": csrf_of(approver.get("/console/approvals/").text)})
    assert decided.status_code == 303
    assert location(decided) == f"/console/approvals/{gone_id}?risk=low"
    assert EXPIRED in flashes(approver.get(location(decided)).text)
    assert queue.row(gone_id) == before and queue.invocation(gone) == inv_before

    assert listed(queue, headers, "pending") == [waiting["approval"]["id"]]
    assert listed(queue, headers, "expired") == [gone_id]
    assert gone_id in listed(queue, headers, "all") and gone_id not in listed(queue, headers, "decided")
    item = queue.server.get(f"/admin/api/tool-approvals/{gone_id}", headers=headers).json()
    assert item["expired"] is True and item["status"] == "pending"

    assert rows_of("approvals", approver.get("/console/approvals/").text) == [waiting["approval"]["id"]]
    assert rows_of("approvals", approver.get("/console/approvals/history").text) == [gone_id]
    assert approver.get("/console/approvals/count").text.count(">1<") == 1
    assert business.executions() == []


def test_resuming_an_expired_approval_ends_the_call_and_sends_nothing(queue, business):
    out = queue.ask(queue.ops, NOTE, note("expired before anyone looked"))
    queue.expire(out["approval"]["id"])

    resumed = queue.resume(queue.ops, out)
    assert resumed["status"] == "rejected_before_dispatch" and resumed["reason"] == "approval_expired"
    assert resumed["approval"]["state"] == "pending"
    again = queue.resume(queue.ops, out)  # the call is over: a second resume changes nothing
    assert again["status"] == "rejected_before_dispatch" and again["reason"] == "approval_expired"
    assert business.executions() == []
    assert queue.row(out["approval"]["id"])["consumed_at"] is None

    support = api(queue, "support")
    [(job_id,)] = queue.sql("SELECT id FROM bz_tool_invocations WHERE invocation_id = %s", (out["invocation_id"],))
    trace = queue.server.get(f"/admin/api/runs/{job_id}/trace", headers=support)
    assert trace.status_code == 200, trace.text
    events = [e["event"] for e in trace.json()["trace"]["events"]]
    assert "tool_approval_expired" in events and "tool_call" not in events
    job = queue.server.get(f"/admin/api/tool-jobs/{job_id}", headers=support).json()["job"]
    assert job["status"] == "rejected_before_dispatch" and job["reason"] == "approval_expired"
    assert job["journal"] is None


def test_an_approval_approved_then_expired_before_the_resume_is_not_dispatched(queue, business):
    out = queue.ask(queue.ops, NOTE, note("approved, then forgotten"))
    approved = approve_api(queue, api(queue, "approver"), out["approval"]["id"], out["approval"]["args_hash"])
    assert approved.status_code == 200, approved.text
    queue.expire(out["approval"]["id"])

    resumed = queue.resume(queue.ops, out)
    assert resumed["status"] == "rejected_before_dispatch" and resumed["reason"] == "approval_expired"
    row = queue.row(out["approval"]["id"])
    assert row["status"] == "approved" and row["consumed_at"] is None
    assert business.executions() == []
    assert listed(queue, api(queue, "admin"), "expired") == [out["approval"]["id"]]


def test_a_denied_approval_past_its_ttl_stays_denied_on_resume(queue, business):
    out = queue.ask(queue.ops, NOTE, note("denied in time"))
    headers = api(queue, "approver")
    denied = queue.server.post(f"/admin/api/tool-approvals/{out['approval']['id']}/deny", headers=headers,
                               json={"args_hash": out["approval"]["args_hash"], "reason": "wrong customer"})
    assert denied.status_code == 200, denied.text
    queue.expire(out["approval"]["id"])

    resumed = queue.resume(queue.ops, out)
    assert resumed["status"] == "denied" and resumed["reason"] == "approval_denied"
    assert queue.row(out["approval"]["id"])["status"] == "denied"
    assert business.executions() == []
    assert listed(queue, headers, "expired") == []
    item = queue.server.get(f"/admin/api/tool-approvals/{out['approval']['id']}", headers=headers).json()
    assert item["expired"] is False


def test_an_approval_not_yet_expired_is_decided_and_runs_as_before(queue, business):
    out = queue.ask(queue.ops, NOTE, note("in good time"))
    approval_id = out["approval"]["id"]
    queue.sql("UPDATE bz_tool_approvals SET created_at = now() - interval '9 minutes' WHERE id = %s",
              (approval_id,))  # a minute of its ten left
    approved = approve_api(queue, api(queue, "approver"), approval_id, out["approval"]["args_hash"])
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved" and approved.json()["expired"] is False

    resumed = queue.resume(queue.ops, out)
    assert resumed["status"] == "executed", resumed
    assert [e["operation"] for e in business.executions()] == [NOTE]
    assert queue.row(approval_id)["consumed_at"] is not None
    # Consumed, it never counts as expired, even once past its time.
    queue.expire(approval_id)
    assert listed(queue, api(queue, "admin"), "expired") == []


def test_the_stored_summary_reads_key_by_key_with_a_long_text_by_its_first_line(queue):
    body = "Call back on Monday\nabout the <b>invoice</b>\n" + "x" * 100
    asked = {"note": queue.ask(queue.ops, NOTE, note(body)),
             "merge": queue.ask(queue.ops, "customer_merge", MERGE),
             "credit": queue.ask(queue.ops, "customer_update_credit_limit", CREDIT)}
    expected = {
        "note": f"{NOTE}: body: Call back on Monday … (3 lines, {len(body)} characters) · customer_id: C-100234",
        "merge": "customer_merge: reason: " + MERGE["reason"]
                 + " · source_customer_id: C-100235 · target_customer_id: C-100234",
        "credit": "customer_update_credit_limit: credit_limit: 20000 · customer_id: C-100234",
    }
    headers = api(queue, "approver")
    for name, out in asked.items():
        item = queue.server.get(f"/admin/api/tool-approvals/{out['approval']['id']}", headers=headers).json()
        assert item["summary"] == expected[name], name
    cells = [unescape(c) for c in re.findall(r'<td class="summary"[^>]*>([^<]*)</td>',
                                             console(queue, "approver").get("/console/approvals/").text)]
    assert cells == list(expected.values())


# ================================================================ config refusals

TOO_SHORT, TOO_LONG = 59, 30 * 24 * 3600 + 1
BAD_APPROVALS = {
    "ttl-under": ({"ttl_seconds": TOO_SHORT}, "routes[0].approvals.ttl_seconds"),
    "ttl-over": ({"ttl_seconds": TOO_LONG}, "routes[0].approvals.ttl_seconds"),
    "ttl-zero": ({"ttl_seconds": 0}, "routes[0].approvals.ttl_seconds"),
    "ttl-text": ({"ttl_seconds": "600"}, "routes[0].approvals.ttl_seconds"),
    "ttl-float": ({"ttl_seconds": 600.0}, "routes[0].approvals.ttl_seconds"),
    "ttl-true": ({"ttl_seconds": True}, "routes[0].approvals.ttl_seconds"),
    "tool-ttl-under": ({"tool_ttl_seconds": {NOTE: TOO_SHORT}}, f"routes[0].approvals.tool_ttl_seconds.{NOTE}"),
    "tool-ttl-over": ({"tool_ttl_seconds": {NOTE: TOO_LONG}}, f"routes[0].approvals.tool_ttl_seconds.{NOTE}"),
    "tool-ttl-true": ({"tool_ttl_seconds": {NOTE: True}}, f"routes[0].approvals.tool_ttl_seconds.{NOTE}"),
    "tool-not-the-routes": ({"tool_ttl_seconds": {"customer_teleport": 600}},
                            "routes[0].approvals.tool_ttl_seconds.customer_teleport"),
    "tool-ttl-not-object": ({"tool_ttl_seconds": [600]}, "routes[0].approvals.tool_ttl_seconds"),
    "unknown-key": ({"ttl_seconds": 600, "ttl_minutes": 10}, "routes[0].approvals.ttl_minutes"),
    "not-object": (600, "routes[0].approvals"),
    "null": (None, "routes[0].approvals"),
}


def test_a_bad_approvals_setting_is_refused_by_its_path_and_nothing_is_written(governed, cli, sql, business,
                                                                                tmp_path):
    config = governed_config(business.url)
    config["routes"][0]["approvals"] = {"ttl_seconds": 900}
    apply_config(cli, tmp_path, config)
    before = config_rows(sql)

    for case, (approvals, path) in BAD_APPROVALS.items():
        config["routes"][0]["approvals"] = approvals
        config["routes"][0]["name"] = "Renamed desk"  # a change that would be written with it
        file = tmp_path / f"bad-{case}.json"
        file.write_text(json.dumps(config))
        for check in ([], ["--check"]):
            code, out, err = cli("config", "apply", str(file), *check)
            assert (code, out) == (1, ""), (case, check, out, err)
            assert err["error"] == "invalid_request", (case, err)
            assert path in [p["path"] for p in err["problems"]], (case, err)
            assert config_rows(sql) == before, (case, check)
    assert sql("SELECT name, approvals FROM bz_routes") == [("Operations desk", {"ttl_seconds": 900})]


def test_check_of_a_good_approvals_setting_writes_nothing_and_apply_then_does(governed, cli, sql, business,
                                                                                tmp_path):
    config = governed_config(business.url, approvals={"ttl_seconds": 60, "tool_ttl_seconds": {
        NOTE: 30 * 24 * 3600, "order_cancel": 120}})
    file = tmp_path / "good.json"
    file.write_text(json.dumps(config))
    before = config_rows(sql)
    planned = cli_ok(cli("config", "apply", str(file), "--check"))
    assert planned["checked"] is True and planned["changed"]["routes"], planned
    assert config_rows(sql) == before
    cli_ok(cli("config", "apply", str(file)))
    assert sql("SELECT approvals FROM bz_routes") == [(config["routes"][0]["approvals"],)]


# ================================================================ the queue's filters

FILTERED = {
    "everything": ({}, "ACBDE"),
    "risk-low": ({"risk": "low"}, "ADE"),
    "risk-medium": ({"risk": "medium"}, "B"),
    "risk-high": ({"risk": "high"}, "C"),
    "tool": ({"tool": NOTE}, "ADE"),
    "tool-merge": ({"tool": "customer_merge"}, "C"),
    "route-annex": ({"route": "annex"}, "E"),
    "route-desk": ({"route": "desk"}, "ACBD"),
    "app-b": ({"app": "ops-b"}, "DE"),
    "app-ops": ({"app": "ops-app"}, "ACB"),
    "requester-any-case": ({"requester": "dANA_oPS%2"}, "DE"),
    "requester-principal": ({"requester": "PRINCIPAL-7"}, "DE"),
    "requester-on-behalf": ({"requester": "user-42"}, "ACB"),
    "requester-underscore-literal": ({"requester": "user_42"}, ""),
    "requester-percent-literal": ({"requester": "t%8"}, ""),
    "requester-backslash": ({"requester": "\\"}, ""),
    "age-15m": ({"age": "15m"}, "ACB"),
    "age-1h": ({"age": "1h"}, "AC"),
    "age-4h": ({"age": "4h"}, "A"),
    "age-1d": ({"age": "1d"}, ""),
    "newest": ({"order": "newest"}, "EDBCA"),
    "oldest": ({"order": "oldest"}, "ACBDE"),
    "combined": ({"app": "ops-b", "risk": "low", "order": "newest", "route": "desk"}, "D"),
    "unknown-tool": ({"tool": "order_cancel"}, ""),
}


def test_each_filter_narrows_the_queue_and_its_count(filled, queue):
    approver = console(queue, "approver")
    for case, (params, expected) in FILTERED.items():
        page = approver.get("/console/approvals/", params=params)
        assert page.status_code == 200, (case, page.text[:2000])
        assert rows_of("approvals", page.text) == filled.of(expected), case
        count = re.search(r"<span data-queue-count>(\d+)</span>", page.text)
        assert count is not None and count.group(1) == str(len(expected)), case
        for href in re.findall(r'<tr data-href="([^"]+)"', page.text):
            assert {k: v[0] for k, v in query(unescape(href)).items()} == params, (case, href)
        live = approver.get("/console/approvals/live", params=params)
        assert live.status_code == 200, case
        assert live.json() == {"ids": [], "count": len(expected), "after_last": len(expected),
                               "before_first": 0}, case


def test_a_queue_row_names_the_principal_in_words_and_the_detail_keeps_it_whole(filled, queue):
    """Issue 34 §3: rows read "Principal-77 · tenant tenant-8", not raw JSON or hash fragments;
    the approval's own page keeps the whole principal and the full hash."""
    approver = console(queue, "approver")
    page = approver.get("/console/approvals/", params={"app": "ops-b"})
    assert page.status_code == 200
    rows = re.search(r"<tbody>(.*?)</tbody>", page.text, re.DOTALL).group(1)
    assert re.search(r'<span class="mono">Principal-77</span> · tenant <span class="mono">tenant-8</span>', rows)
    assert '"id"' not in rows and "\\u0022" not in rows and "&#34;" not in rows
    assert filled.hashes["D"][:12] not in rows
    detail = approver.get(f"/console/approvals/{filled.ids['D']}")
    assert detail.status_code == 200
    assert filled.hashes["D"] in detail.text and "Principal-77" in detail.text and "tenant-8" in detail.text


def test_load_more_and_row_links_keep_the_filter(filled, queue, monkeypatch):
    monkeypatch.setattr(approvals_view, "PAGE", 2)
    approver = console(queue, "approver")
    params = {"risk": "low", "requester": "a", "order": "newest"}
    page = approver.get("/console/approvals/", params=params)
    assert rows_of("approvals", page.text) == filled.of("ED")
    assert re.search(r"<span data-queue-count>(\d+)</span>", page.text).group(1) == "3"
    link = more_of(page.text)
    assert link is not None
    assert {k: v[0] for k, v in query(link).items() if k != "cursor"} == params
    rest = approver.get(link, headers=HTMX)
    assert rest.status_code == 200
    assert rows_of("approvals", rest.text) == filled.of("A") and more_of(rest.text) is None
    [href] = re.findall(r'<tr data-href="([^"]+)"', rest.text)
    detail = approver.get(unescape(href))
    assert detail.status_code == 200
    # The decision form carries the filters, for "decide and open the next".
    for key, value in params.items():
        assert f'<input type="hidden" name="{key}" value="{value}">' in detail.text
    assert f'href="/console/approvals/?{urlsplit(unescape(href)).query}"'.replace("&", "&amp;") in detail.text


BAD_FILTERS = {
    "risk": ("extreme", "Risk: “extreme”"),
    "tool": ("Bad Tool!", "Tool: “Bad Tool!”"),
    "route": ("-desk", "Route: “-desk”"),
    "app": ("A", "App: “A”"),
    "requester": ("x" * 192, "Requester: “" + "x" * 192 + "”"),
    "age": ("2h", "Waiting longer than: “2h”"),
    "order": ("sideways", "Order: “sideways”"),
}


def test_a_bad_filter_value_is_a_400_that_names_it_and_writes_nothing(filled, queue):
    approver = console(queue, "approver")
    token = csrf_of(approver.get("/console/approvals/").text)
    before, log = queue.row(filled.ids["A"]), queue.access_log()
    for key, (value, named) in BAD_FILTERS.items():
        params = {key: value} if key == "risk" else {key: value, "risk": "low"}
        page = approver.get("/console/approvals/", params=params)
        assert page.status_code == 400, key
        assert named in unescape(page.text), key
        assert rows_of("approvals", page.text) == [], key
        rows = approver.get("/console/approvals/", params=params, headers=HTMX)
        assert rows.status_code == 400 and rows_of("approvals", rows.text) == [], key
        live = approver.get("/console/approvals/live", params=params)
        assert live.status_code == 400 and any(named in e for e in live.json()["errors"]), (key, live.text)
        detail = approver.get(f"/console/approvals/{filled.ids['A']}", params=params)
        assert detail.status_code == 400 and named in unescape(detail.text), key
        decided = approver.post(f"/console/approvals/{filled.ids['A']}/decide", data={
            "decision": "approve", "args_hash": filled.hashes["A"], "then": "next", "csrf_token": token,
            **params})
        assert decided.status_code == 400, key
    assert queue.row(filled.ids["A"]) == before
    assert queue.access_log() == log


# ================================================================ live

def window_of(html: str) -> tuple[list[str], dict[str, str]]:
    """The row ids of a queue page and the cursors of its first and last rows."""
    keys = KEYS.findall(html)
    return [ident for _key, ident in keys], {"first": keys[0][0], "last": keys[-1][0]}


def test_live_drops_rows_decided_elsewhere_and_counts_arrivals_after_the_last(filled, queue):
    one = console(queue, "approver")
    params = {"risk": "low"}
    shown, window = window_of(one.get("/console/approvals/", params=params).text)
    assert shown == filled.of("ADE")
    assert one.get("/console/approvals/live", params={**params, **window}).json() == {
        "ids": filled.of("ADE"), "count": 3, "after_last": 0, "before_first": 0}

    other = api(queue, "approver")
    for name in "AD":
        assert approve_api(queue, other, filled.ids[name], filled.hashes[name]).status_code == 200
    arrival = queue.ask(queue.dana, NOTE, note("arrived later"))["approval"]["id"]
    queue.ask(queue.ops, "customer_merge", MERGE)  # outside the filter: never counted here

    live = one.get("/console/approvals/live", params={**params, **window})
    assert live.status_code == 200
    assert live.json() == {"ids": filled.of("E"), "count": 2, "after_last": 1, "before_first": 0}
    # The whole window, B and C lie inside it by time, but never match the filter.
    assert one.get("/console/approvals/live", params=window).json() == {
        "ids": filled.of("CBE"), "count": 5, "after_last": 2, "before_first": 0}
    assert arrival not in live.json()["ids"]
    # A row that expires leaves the live answer as a decided one does.
    queue.expire(filled.ids["C"])
    assert one.get("/console/approvals/live", params=window).json() == {
        "ids": filled.of("BE"), "count": 4, "after_last": 2, "before_first": 0}


def test_live_in_newest_order_and_cursors_of_another_list_are_400(filled, queue):
    one = console(queue, "approver")
    params = {"app": "ops-app", "order": "newest"}
    shown, window = window_of(one.get("/console/approvals/", params=params).text)
    assert shown == filled.of("BCA")
    assert one.get("/console/approvals/live", params={**params, **window}).json() == {
        "ids": filled.of("BCA"), "count": 3, "after_last": 0, "before_first": 0}
    # Newest first, an arrival comes before the first row shown: counted there, not in `ids`.
    queue.ask(queue.ops, "customer_merge", MERGE)
    assert one.get("/console/approvals/live", params={**params, **window}).json() == {
        "ids": filled.of("BCA"), "count": 4, "after_last": 0, "before_first": 1}
    _, oldest_window = window_of(one.get("/console/approvals/").text)
    history = approvals_view.HISTORY.encode((datetime.now().astimezone(), uuid.UUID(filled.ids["A"])))
    bad = {
        "oldest-order cursor in newest order": {**params, **oldest_window},
        "newest-order cursor in oldest order": {"app": "ops-app", **window},
        "history cursor": {"first": history, "last": history},
        "junk": {"first": "not-a-cursor", "last": window["last"]},
        "only first": {**params, "first": window["first"]},
        "empty last": {**params, "first": window["first"], "last": ""},
    }
    for name, query_params in bad.items():
        response = one.get("/console/approvals/live", params=query_params)
        assert response.status_code == 400, name
        assert response.json() == {"errors": ["first and last must be rows of this queue."]}, name


# ================================================================ decide and open the next

def decide(browser, approval_id: str, args_hash: str, filters: dict, then: bool = True, **extra):
    token = csrf_of(browser.get(f"/console/approvals/{approval_id}", params=filters).text)
    data = {"decision": "approve", "args_hash": args_hash, "csrf_token": token, **filters, **extra}
    if then:
        data["then"] = "next"
    return browser.post(f"/console/approvals/{approval_id}/decide", data=data)


def test_decide_and_open_the_next_keeps_to_the_filtered_order(filled, queue):
    approver = console(queue, "approver")
    low = {"risk": "low"}
    step = decide(approver, filled.ids["A"], filled.hashes["A"], low)
    assert step.status_code == 303
    assert location(step) == f"/console/approvals/{filled.ids['D']}?risk=low"  # past C and B, not low
    step = decide(approver, filled.ids["D"], filled.hashes["D"], low)
    assert location(step) == f"/console/approvals/{filled.ids['E']}?risk=low"
    step = decide(approver, filled.ids["E"], filled.hashes["E"], low)
    assert location(step) == "/console/approvals/?risk=low"
    assert NOTHING_ELSE in flashes(approver.get(location(step)).text)
    assert [queue.row(filled.ids[n])["status"] for n in "ACBDE"] == ["approved", "pending", "pending",
                                                                      "approved", "approved"]

    newest = {"app": "ops-app", "order": "newest"}
    step = decide(approver, filled.ids["B"], filled.hashes["B"], newest)
    assert location(step) == f"/console/approvals/{filled.ids['C']}?app=ops-app&order=newest"
    # Without `then`, back to the decided approval itself.
    step = decide(approver, filled.ids["C"], filled.hashes["C"], newest, then=False)
    assert location(step) == f"/console/approvals/{filled.ids['C']}?app=ops-app&order=newest"
    assert queue.row(filled.ids["C"])["status"] == "approved"


def test_decide_and_open_the_next_goes_back_to_an_older_one_left_undecided(filled, queue):
    approver = console(queue, "approver")
    step = decide(approver, filled.ids["E"], filled.hashes["E"], {"app": "ops-b"})
    assert location(step) == f"/console/approvals/{filled.ids['D']}?app=ops-b"


def test_a_refused_decision_with_then_next_stays_on_the_detail_and_writes_nothing(filled, queue, business):
    approver = console(queue, "approver")
    token = csrf_of(approver.get("/console/approvals/").text)
    queue.expire(filled.ids["A"])
    assert approve_api(queue, api(queue, "approver"), filled.ids["D"], filled.hashes["D"]).status_code == 200
    refusals = {  # the approval, the hash posted, the flash
        "expired": ("A", filled.hashes["A"], EXPIRED),
        "already decided": ("D", filled.hashes["D"], "This approval was already decided; nothing was changed."),
        "hash changed": ("E", "0" * 64, "The snapshot differs from the one shown; review it again."),
    }
    before = {n: queue.row(filled.ids[n]) for n in "ACBDE"}
    log = queue.access_log()
    for case, (name, args_hash, message) in refusals.items():
        target = filled.ids[name]
        response = approver.post(f"/console/approvals/{target}/decide", data={
            "decision": "approve", "args_hash": args_hash, "then": "next", "risk": "low", "csrf_token": token})
        assert response.status_code == 303, case
        assert location(response) == f"/console/approvals/{target}?risk=low", case
        assert message in flashes(approver.get(location(response)).text), case
    assert {n: queue.row(filled.ids[n]) for n in "ACBDE"} == before
    assert queue.access_log() == log
    assert business.executions() == []


# ================================================================ context

MESSAGE = "Add a note <script>alert(1)</script> for ACME CTX-MARKER"


def test_an_admin_sees_the_runs_user_message_escaped_and_the_read_is_logged(queue):
    run_id = queue.ops.turn("conv-ctx", "turn-1", MESSAGE)["run_id"]
    in_run = queue.ask(queue.ops, NOTE, note("in a run"), run_id)["approval"]["id"]
    outside = queue.ask(queue.ops, NOTE, note("outside any run"))["approval"]["id"]
    username = "context-admin"
    admin = console(queue, "admin", username)
    before = queue.access_log()

    page = admin.get(f"/console/approvals/{in_run}")
    assert page.status_code == 200
    assert "Add a note &lt;script&gt;alert(1)&lt;/script&gt; for ACME CTX-MARKER" in page.text
    assert "<script>alert(1)" not in page.text
    assert run_id in page.text and "conv-ctx" in page.text
    assert queue.access_log() == [*before, (username, "run_trace_view", run_id)]

    page = admin.get(f"/console/approvals/{outside}")
    assert page.status_code == 200 and "not made in a run" in page.text
    assert queue.access_log() == [*before, (username, "run_trace_view", run_id)]


def test_an_approver_sees_the_run_but_not_its_message_and_no_read_is_logged(queue):
    run_id = queue.ops.turn("conv-ctx", "turn-1", MESSAGE)["run_id"]
    in_run = queue.ask(queue.ops, NOTE, note("in a run"), run_id)["approval"]["id"]
    approver = console(queue, "approver")
    before = queue.access_log()
    page = approver.get(f"/console/approvals/{in_run}")
    assert page.status_code == 200
    assert run_id in page.text
    assert "CTX-MARKER" not in page.text and "conv-ctx" not in page.text
    assert "Shown to those who may read runs (runs:read)." in page.text
    assert f'href="/console/runs/{run_id}' not in page.text
    assert queue.access_log() == before
