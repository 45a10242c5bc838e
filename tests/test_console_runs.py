"""Issue 19, support triage, server side: the runs list's filters and lookups by ID prefix, the
unresolved calls, the trace's timeline, and every refusal (roles, bad filters), over real HTTP on
a live server with data made through the real agent APIs."""
from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from html import unescape

import pytest
import requests
from sqlalchemy import event, text

from admin_app.console import runs as runs_view
from admin_app.conversation_audit.availability import probe
from admin_app.reads import runs as run_reads
from admin_app.reads.traces import run_timeline
from tests.helpers import make_admin
from tests.test_console_server import signed_in

HTMX = {"HX-Request": "true"}
NOT_A_TIME = "must be a date such as 2026-12-01 or a date and time such as 2026-12-01T09:30."


@pytest.fixture
def support(server, cli):
    make_admin(cli, "sue", "support")
    return signed_in(server.url, "sue")


def run_rows(html: str) -> list[str]:
    return re.findall(r'<tr data-href="/console/runs/([0-9a-f-]{36})">', html)


def matched(html: str) -> list[str]:
    return [unescape(m) for m in re.findall(r'<td class="matched"[^>]*>([^<]*)</td>', html)]


def call_rows(html: str) -> list[tuple[str, str]]:
    """(tool, status) of each unresolved call listed."""
    return re.findall(r'<td class="mono">([^<]*)</td>\s*<td><span class="badge [a-z_]+">([a-z_]+)</span>', html)


def alert(html: str) -> str:
    found = re.findall(r'<p class="flash error" role="alert">([^<]*)</p>', html)
    assert len(found) == 1, html[:3000]
    return unescape(found[0])


def access_rows(sql) -> int:
    return sql("SELECT count(*) FROM bz_access_log")[0][0]


# ================================================================ the runs list

def test_the_runs_list_filters_by_status_app_route_and_creation_time(hub, support, sql, monkeypatch):
    old = hub.turn("conv-old", "turn-1", "from last year")["run_id"]
    done = hub.turn("conv-done", "turn-1", "finished")["run_id"]
    hub.complete(done, "Done.")
    open_run = hub.turn("conv-open", "turn-1", "still open")["run_id"]
    sql("UPDATE bz_runs SET created_at = '2025-03-04T10:00:00Z' WHERE id = %s", (old,))

    def listed(**params) -> list[str]:
        page = support.get("/console/runs/", params=params)
        assert page.status_code == 200, page.text[:2000]
        return run_rows(page.text)

    assert listed() == [open_run, done, old]  # newest first
    assert listed(status="completed") == [done]
    assert listed(status="prepared") == [open_run, old]
    assert listed(app="ops-app", route="desk") == [open_run, done, old]
    assert listed(app="another-app") == [] and listed(route="elsewhere") == []
    assert listed(**{"from": "2025-03-04", "to": "2025-03-04"}) == [old]  # a date is the whole day
    assert listed(**{"from": "2025-03-04T10:00:01"}) == [open_run, done]
    assert listed(to="2025-03-04T09:59:59+00:00") == []
    # The filters stay in the page's form and in its "load more" link.
    monkeypatch.setattr(runs_view, "PAGE", 1)
    page = support.get("/console/runs/", params={"status": "prepared", "route": "desk"})
    assert run_rows(page.text) == [open_run]
    assert '<option value="prepared" selected>' in page.text and 'name="route" value="desk"' in page.text
    more = unescape(re.search(r'hx-get="([^"]+)"', page.text).group(1))
    assert "status=prepared" in more and "route=desk" in more
    rest = support.get(more, headers=HTMX)
    assert rest.status_code == 200 and run_rows(rest.text) == [old]


@pytest.mark.parametrize("params, message", [
    ({"q": "abc"}, "Look up needs at least 4 and at most 191 characters of an ID (this one has 3)."),
    ({"q": "x" * 192}, "Look up needs at least 4 and at most 191 characters of an ID (this one has 192)."),
    ({"status": "exploded"}, "Status is one of: prepared, completed, failed, cancelled."),
    ({"from": "yesterday"}, "Created from " + NOT_A_TIME),
    ({"to": "2026-13-01"}, "Created to " + NOT_A_TIME),
    ({"from": "2026-02-01", "to": "2026-01-01"}, "Created from must come before created to."),
    ({"app": "a" * 192}, "App is at most 191 characters."),
])
def test_a_filter_the_runs_list_cannot_use_is_400_with_a_clear_message(hub, support, sql, params, message):
    hub.turn("conv-x", "turn-1", "hello")
    before = access_rows(sql)
    page = support.get("/console/runs/", params=params)
    assert page.status_code == 400
    assert alert(page.text) == message
    assert run_rows(page.text) == []  # nothing was read
    assert access_rows(sql) == before  # nothing written
    # A "load more" request with the same filter gets the bare 400, not rows.
    rows = support.get("/console/runs/", params={**params, "cursor": "x"}, headers=HTMX)
    assert rows.status_code == 400 and "<tr" not in rows.text


def test_a_run_is_found_by_a_prefix_of_any_id_it_is_known_by(hub, support):
    turn = hub.turn("conv-prefix-hunt", "turn-prefix-7", "find me")
    run_id = turn["run_id"]
    other = hub.turn("conv-other", "turn-1", "not me")["run_id"]
    call = hub.invoke("customer_get", {"customer_id": "C-100234"}, run_id)
    [(job_id, invocation_id, session_id)] = hub.sql(
        "SELECT id::text, invocation_id, session_id::text FROM bz_tool_invocations WHERE run_id = %s", (run_id,))
    assert call["invocation_id"] == invocation_id and len(invocation_id) == 64

    def lookup(q: str) -> tuple[list[str], list[str]]:
        page = support.get("/console/runs/", params={"q": q})
        assert page.status_code == 200, page.text[:2000]
        return run_rows(page.text), matched(page.text)

    assert lookup(run_id[:8]) == ([run_id], ["run ID"])
    assert lookup(run_id.upper()[:6]) == ([run_id], ["run ID"])  # UUIDs in any case
    assert lookup(run_id) == ([run_id], ["run ID"])  # the full value too
    assert lookup(job_id[:10]) == ([run_id], ["job ID"])
    assert lookup(invocation_id[:12]) == ([run_id], ["invocation ID"])
    assert lookup(invocation_id) == ([run_id], ["invocation ID"])
    assert lookup("conv-prefix") == ([run_id], ["conversation ID"])
    assert lookup("turn-prefix-7") == ([run_id], ["turn ID"])
    assert lookup("turn") == ([other, run_id], ["turn ID", "turn ID"])
    # Both runs share the agent session: one lookup, two runs, what matched said once each.
    assert lookup(session_id[:8]) == ([other, run_id], ["session ID", "session ID"])
    # A lookup combines with the filters.
    page = support.get("/console/runs/", params={"q": "turn", "status": "completed"})
    assert run_rows(page.text) == [] and "No run matches." in page.text
    # LIKE's wildcards are taken literally.
    assert lookup("conv%") == ([], []) and lookup("____") == ([], [])
    # The exact lookups other pages link with still work.
    page = support.get("/console/runs/", params={"conversation": "conv-other"})
    assert run_rows(page.text) == [other] and 'name="conversation" value="conv-other"' in page.text


def plan_of_last_statement(app, read) -> str:
    """EXPLAIN of the last statement `read(db)` really sends, with sequential scans priced out
    (the test tables are tiny, so the planner would scan them)."""
    with app.extensions["bailing"].db.session() as db:
        statements: list[tuple[str, object]] = []
        engine = db.get_bind()
        listener = lambda conn, cursor, statement, params, context, many: statements.append((statement, params))  # noqa: E731
        event.listen(engine, "before_cursor_execute", listener)
        try:
            db.execute(text("SET LOCAL enable_seqscan = off"))
            read(db)
        finally:
            event.remove(engine, "before_cursor_execute", listener)
        statement, params = statements[-1]
        return "\n".join(row[0] for row in db.connection().exec_driver_sql("EXPLAIN " + statement, params))


def test_each_lookup_branch_reads_its_prefix_index(app, hub):
    """EXPLAIN of the statement the lookup really sends, with sequential scans priced out (the
    test tables are tiny): every branch is an index read (a primary key, or sql/067's index)."""
    hub.turn("conv-explain", "turn-1", "explain me")
    plan = plan_of_last_statement(app, lambda db: run_reads.recent_runs(db, run_reads.RunFilters(q="abcd1234"),
                                                                         None, 50))
    for index in ("bz_runs_pkey", "bz_runs_session", "bz_runs_conversation_prefix",
                  "bz_runs_turn_prefix", "bz_tool_invocations_invocation_prefix",
                  "bz_tool_invocations_pkey"):
        assert index in plan, plan


# ================================================================ unresolved calls

def test_the_unresolved_calls_are_listed_newest_first_and_filtered(hub, support, business, server, cli):
    run_id = hub.turn("conv-broken", "turn-1", "check and raise")["run_id"]
    assert hub.invoke("customer_get", {"customer_id": "C-100234"}, run_id)["status"] == "executed"
    business.fault("customer_get", "drop_response", 1)
    lost = hub.invoke("customer_get", {"customer_id": "C-100235"}, run_id)
    assert lost["status"] == "reconciliation_required"
    approval = hub.approval("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 20000},
                            run_id)

    page = support.get("/console/runs/unresolved")
    assert page.status_code == 200, page.text[:2000]
    # Newest first; the executed call is resolved and absent.
    assert call_rows(page.text) == [("customer_update_credit_limit", "awaiting_approval"),
                                    ("customer_get", "reconciliation_required")]
    assert "transport_failure" in page.text
    assert f'href="/console/runs/{run_id}#call-' in page.text
    # Support may not open approvals: the approval is named, and linked for those who may.
    assert f'href="/console/approvals/{approval["id"]}"' not in page.text and "approval #" in page.text
    make_admin(cli, "ada", "admin")
    assert f'href="/console/approvals/{approval["id"]}"' in signed_in(server.url, "ada").get(
        "/console/runs/unresolved").text
    assert call_rows(support.get("/console/runs/unresolved", params={"state": "reconciliation_required"}).text) \
        == [("customer_get", "reconciliation_required")]
    assert call_rows(support.get("/console/runs/unresolved", params={"tool": "customer_get"}).text) \
        == [("customer_get", "reconciliation_required")]
    assert len(call_rows(support.get("/console/runs/unresolved", params={"app": "ops-app", "route": "desk"}).text)) == 2
    assert call_rows(support.get("/console/runs/unresolved", params={"route": "elsewhere"}).text) == []
    # The runs page links to it.
    assert 'href="/console/runs/unresolved"' in support.get("/console/runs/").text


@pytest.mark.parametrize("params, message", [
    ({"state": "executed"}, ("State is one of: reconciliation_required, business_rejected, "
                             "rejected_before_dispatch, in_progress, awaiting_approval.")),
    ({"tool": "t" * 192}, "Tool is at most 191 characters."),
])
def test_a_filter_the_unresolved_list_cannot_use_is_400(support, sql, params, message):
    before = access_rows(sql)
    page = support.get("/console/runs/unresolved", params=params)
    assert page.status_code == 400 and alert(page.text) == message
    assert access_rows(sql) == before


def test_a_cursor_of_the_runs_list_is_refused_by_the_unresolved_list(support):
    cursor = runs_view.RUNS.encode((datetime.now(UTC), uuid.uuid4()))
    assert support.get("/console/runs/unresolved", params={"cursor": cursor}).status_code == 400


@pytest.mark.parametrize("role", ["approver"])
def test_roles_without_runs_read_are_refused_the_triage_pages(hub, server, cli, role):
    run_id = hub.turn("conv-secret", "turn-1", "secret question")["run_id"]
    make_admin(cli, "nope", role)
    browser = signed_in(server.url, "nope")
    for path in ("/console/runs/", f"/console/runs/?q={run_id[:8]}", "/console/runs/unresolved",
                 f"/console/runs/{run_id}"):
        page = browser.get(path)
        assert page.status_code == 403, path
        assert run_id not in page.text and "conv-secret" not in page.text


def test_an_auditor_may_read_the_triage_pages(hub, server, cli):
    run_id = hub.turn("conv-audited", "turn-1", "audited")["run_id"]
    make_admin(cli, "aud", "auditor")
    browser = signed_in(server.url, "aud")
    assert run_rows(browser.get("/console/runs/").text) == [run_id]
    assert browser.get("/console/runs/unresolved").status_code == 200


def test_a_signed_out_visitor_is_sent_to_sign_in(server):
    for path in ("/console/runs/", "/console/runs/unresolved"):
        response = requests.get(server.url + path, allow_redirects=False, timeout=30)
        assert response.status_code in (302, 303) and "/console/login" in response.headers["Location"]


# ================================================================ the trace's timeline

def test_the_timeline_is_in_true_order_with_milliseconds_and_durations(app, hub, sql, business):
    run_id = hub.turn("conv-order", "turn-1", "question first")["run_id"]
    hub.invoke("customer_get", {"customer_id": "C-100234"}, run_id)
    business.fault("customer_get", "drop_response", 1)
    hub.invoke("customer_get", {"customer_id": "C-100235"}, run_id)
    hub.complete(run_id, "the answer")
    # Push the user message after the first call and the answer between the two calls, at
    # millisecond distances, as the example has it.
    [(start,)] = sql("SELECT created_at FROM bz_runs WHERE id = %s", (run_id,))
    jobs = [r[0] for r in sql("SELECT id FROM bz_tool_invocations WHERE run_id = %s ORDER BY created_at", (run_id,))]
    sql("UPDATE bz_messages SET created_at = %s + interval '89 milliseconds' WHERE run_id = %s AND role = 'user'",
        (start, run_id))
    sql("UPDATE bz_tool_invocations SET created_at = %s + interval '106 milliseconds' WHERE id = %s", (start, jobs[0]))
    sql("UPDATE bz_messages SET created_at = %s + interval '149 milliseconds' WHERE run_id = %s AND role = 'assistant'",
        (start, run_id))
    sql("UPDATE bz_tool_invocations SET created_at = %s + interval '150 milliseconds' WHERE id = %s", (start, jobs[1]))
    sql("UPDATE bz_runs SET completed_at = %s + interval '2 seconds' WHERE id = %s", (start, run_id))
    with app.extensions["bailing"].db.session() as db:
        view = run_timeline(db, uuid.UUID(run_id), probe(db))
    kinds = [(e["kind"], e.get("role") or (e["job"]["status"] if e["kind"] == "call" else None))
             for e in view["timeline"]]
    assert kinds == [("run_created", None), ("message", "user"), ("call", "executed"),
                     ("message", "assistant"), ("call", "reconciliation_required"), ("run_completed", None)]
    assert [e["offset_ms"] for e in view["timeline"]] == [0, 89, 106, 149, 150, 2000]
    lost = view["timeline"][4]
    assert lost["job"]["reason"] == "transport_failure" and lost["idempotency_key"]
    # The call's own milestones, in time order (its creation was moved later above, so the
    # journal's real times may come before it).
    assert "created" in [m["label"] for m in lost["milestones"]]
    assert [m["at"] for m in lost["milestones"]] == sorted(m["at"] for m in lost["milestones"])
    assert any(m["label"].startswith("journal finished: uncertain") for m in lost["milestones"])


def test_the_trace_page_shows_reasons_explanations_and_links(hub, support, business, server, cli):
    archive_id, run_id = hub.traced_conversation(conversation="conv-trace-page")
    business.fault("customer_get", "drop_response", 1)
    assert hub.invoke("customer_get", {"customer_id": "C-100235"}, run_id)["status"] == "reconciliation_required"
    [(approval_id,)] = hub.sql("SELECT a.id::text FROM bz_tool_approvals a "
                               "JOIN bz_tool_invocations i ON i.id = a.job_id WHERE i.run_id = %s", (run_id,))
    page = support.get(f"/console/runs/{run_id}")
    assert page.status_code == 200
    html = page.text
    assert "transport_failure" in html and "does not know whether the business system applied it" in html
    assert "Check in the business system" in html and "X-Bailing-Idempotency-Key" in html
    assert f'href="/console/approvals/{approval_id}"' not in html  # support may not open approvals
    make_admin(cli, "ada", "admin")
    as_admin = signed_in(server.url, "ada").get(f"/console/runs/{run_id}").text
    assert f'href="/console/approvals/{approval_id}"' in as_admin
    # The archive opens at the run's turn (its turn_start is event #1 of the archive).
    assert f'href="/console/conversations/{archive_id}?at=1#seq-1"' in html
    assert re.search(r'<time datetime="[^"]+" data-precise>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC</time>', html)
    assert "took " in html


def test_message_content_in_the_trace_is_escaped_and_hidden_characters_shown(hub, support):
    run_id = hub.turn("conv-hostile-trace", "turn-1", "pay <script>alert(1)</script> \u202eevil")["run_id"]
    html = support.get(f"/console/runs/{run_id}").text
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\u202e" not in html and "RLO" in html
