"""Client API jobs in the console, server side (CLIENT_API_AND_EXECUTOR.md §F): the Jobs tab of the
runs list with the runs list's filters and ID-prefix lookups, a job's page (its values escaped and
bounded, one timeline in true order, the rerun for runs:write holders on finished jobs), and the
Executors page with its token actions; every refusal (roles, bad filters, CSRF, a rerun in flight).
Jobs are written by SQL (tests/jobs_world.py), over real HTTP on a live server."""
from __future__ import annotations

import re
import uuid
from html import unescape

import pytest

from admin_app.console import jobs as jobs_view
from admin_app.reads import jobs as job_reads
from tests.helpers import make_admin, row_counts
from tests.jobs_world import seed_call, seed_callback, seed_client, seed_event, seed_job
from tests.test_console_runs import alert, matched, plan_of_last_statement
from tests.test_console_server import csrf_of, flashes, location, signed_in

HTMX = {"HX-Request": "true"}
HOSTILE = '<script>alert("job")</script><img src=x onerror=alert(2)> \u202eevil'
ESCAPED = "&lt;script&gt;alert(&#34;job&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
RERUN = '<button type="submit">Rerun</button>'
WRITES = ("bz_jobs", "bz_job_events", "bz_executor_tokens", "bz_access_log")


@pytest.fixture
def support(server, cli):
    make_admin(cli, "sue", "support")
    return signed_in(server.url, "sue")


@pytest.fixture
def admin(server, cli):
    make_admin(cli, "ada", "admin")
    return signed_in(server.url, "ada")


def job_rows(html: str) -> list[str]:
    return re.findall(r'<tr data-href="/console/jobs/([0-9a-f-]{36})">', html)



# ================================================================ the Jobs tab of the runs list


def test_the_jobs_list_filters_as_the_runs_list_does(support, sql, monkeypatch):
    old = seed_job(sql, status="done", created_at="2025-03-04T10:00:00Z")
    failed = seed_job(sql, status="error", app="crm-app", route="sales", created_at="2026-01-01T10:00:00Z")
    queued = seed_job(sql, status="queued", created_at="2026-01-02T10:00:00Z")

    def listed(**params) -> list[str]:
        page = support.get("/console/runs/jobs", params=params)
        assert page.status_code == 200, page.text[:2000]
        return job_rows(page.text)

    assert listed() == [queued, failed, old]  # newest first
    assert listed(status="error") == [failed]
    assert listed(app="ops-app") == [queued, old] and listed(route="sales") == [failed]
    assert listed(app="nobody") == []
    assert listed(**{"from": "2025-03-04", "to": "2025-03-04"}) == [old]  # a date is the whole day
    assert listed(**{"from": "2026-01-01T10:00:01"}) == [queued]
    # The filters stay in the form and in the "load more" link, which htmx fetches as rows.
    monkeypatch.setattr(jobs_view, "PAGE", 1)
    page = support.get("/console/runs/jobs", params={"app": "ops-app"})
    assert job_rows(page.text) == [queued] and 'name="app" value="ops-app"' in page.text
    more = unescape(re.search(r'hx-get="([^"]+)"', page.text).group(1))
    assert "app=ops-app" in more
    rest = support.get(more, headers=HTMX)
    assert rest.status_code == 200 and job_rows(rest.text) == [old] and "<html" not in rest.text
    # The two tabs carry the shared filters across (not the status: each list has its own).
    runs = support.get("/console/runs/", params={"app": "ops-app", "status": "completed"}).text
    assert 'href="/console/runs/jobs?app=ops-app"' in runs
    assert 'href="/console/runs/?app=ops-app"' in page.text


@pytest.mark.parametrize("params, message", [
    ({"q": "abc"}, "Look up needs at least 4 and at most 191 characters of an ID (this one has 3)."),
    ({"status": "completed"}, "Status is one of: queued, running, dispatched, done, error, rejected."),
    ({"from": "yesterday"}, ("Created from must be a date such as 2026-12-01 or a date and time such as "
                             "2026-12-01T09:30.")),
    ({"from": "2026-02-01", "to": "2026-01-01"}, "Created from must come before created to."),
    ({"route": "r" * 192}, "Route is at most 191 characters."),
])
def test_a_filter_the_jobs_list_cannot_use_is_400_with_a_clear_message(support, sql, params, message):
    seed_job(sql)
    before = row_counts(sql, *WRITES)
    page = support.get("/console/runs/jobs", params=params)
    assert page.status_code == 400
    assert alert(page.text) == message and job_rows(page.text) == []
    assert row_counts(sql, *WRITES) == before
    rows = support.get("/console/runs/jobs", params={**params, "cursor": "x"}, headers=HTMX)
    assert rows.status_code == 400 and "<tr" not in rows.text


def test_a_job_is_found_by_a_prefix_of_any_id_it_is_known_by(support, sql):
    job_id = seed_job(sql, status="dispatched", request_id="order-2026-0042", session_id="sess-abc-123",
                      executor_id="runner-east-1", thread_key="desk:conv-9")
    other = seed_job(sql, request_id="order-2026-0043", session_id="sess-abc-999")
    call = seed_call(sql, job_id)

    def lookup(q: str) -> tuple[list[str], list[str]]:
        page = support.get("/console/runs/jobs", params={"q": q})
        assert page.status_code == 200, page.text[:2000]
        return job_rows(page.text), matched(page.text)

    assert lookup(job_id[:8]) == ([job_id], ["job ID"])
    assert lookup(job_id.upper()[:6]) == ([job_id], ["job ID"])
    assert lookup("order-2026-0042") == ([job_id], ["request ID"])
    assert lookup("order-2026") == ([other, job_id], ["request ID", "request ID"])
    assert lookup("sess-abc-1") == ([job_id], ["session ID"])
    assert lookup("runner-east") == ([job_id], ["executor ID"])
    assert lookup(call["invocation_id"][:12]) == ([job_id], ["invocation ID"])
    assert lookup(call["call_id"][:10]) == ([job_id], ["tool job ID"])
    assert lookup("order%") == ([], []) and lookup("____") == ([], [])  # wildcards taken literally
    # A lookup combines with the filters; the exact lookups a job's page links with work too.
    assert job_rows(support.get("/console/runs/jobs", params={"q": "order-2026", "status": "queued"}).text) == [other]
    assert job_rows(support.get("/console/runs/jobs", params={"thread": "desk:conv-9"}).text) == [job_id]
    assert job_rows(support.get("/console/runs/jobs", params={"executor": "runner-east-1"}).text) == [job_id]
    assert job_rows(support.get("/console/runs/jobs", params={"job_id": "not-a-uuid"}).text) == []


def test_each_job_lookup_branch_reads_an_index(app, sql):
    seed_job(sql)
    plan = plan_of_last_statement(app, lambda db: job_reads.recent_jobs(db, job_reads.JobFilters(q="abcd1234"),
                                                                         None, 50))
    for index in ("bz_jobs_pkey", "bz_jobs_request_prefix", "bz_jobs_session_prefix", "bz_jobs_executor_prefix",
                  "bz_tool_invocations_invocation_prefix", "bz_tool_invocations_pkey"):
        assert index in plan, plan


# ================================================================ a job's page


def test_a_job_page_shows_its_facts_and_one_timeline_in_true_order(support, admin, sql):
    job_id = seed_job(sql, status="done", created_at="2026-02-01T09:00:00Z", executor_id="runner-1",
                      result={"text": "Customer C-1001 found"}, usage={"duration_ms": 4200},
                      callback_url="https://receiver.example/hook?secret=s3cr3t")
    seed_event(sql, job_id, "received", at="2026-02-01T09:00:00Z")
    seed_event(sql, job_id, "dispatched", "runner-1", {"executor_id": "runner-1"}, at="2026-02-01T09:00:01Z")
    call = seed_call(sql, job_id, "customer_update_credit_limit", "awaiting_approval", approval="pending",
                     at="2026-02-01T09:00:02Z")
    seed_event(sql, job_id, "tool_approval_pending", "tool-proxy",
               {"tool": "customer_update_credit_limit", "approval_id": call["approval_number"]},
               at="2026-02-01T09:00:02Z")
    seed_event(sql, job_id, "tool_lookup", "tool-proxy", {"asked": 1, "found": ["customer_get"]},
               at="2026-02-01T09:00:03Z")
    seed_event(sql, job_id, "finished", "runner-1", {"status": "done", "attempts": 0}, at="2026-02-01T09:00:05Z")
    callback = seed_callback(sql, job_id, state="delivered", attempts=((503, "HTTP 503"), (200, None)),
                             at="2026-02-01T09:00:06Z")
    seed_event(sql, job_id, "callback", detail={"callback_id": callback, "ok": True, "attempt": 2},
               at="2026-02-01T09:00:08Z")

    page = support.get(f"/console/jobs/{job_id}")
    assert page.status_code == 200, page.text[:2000]
    html = page.text
    assert f"Job <code>{job_id}</code>" in html and '<span class="badge done">done</span>' in html
    assert "runner-1" in html and "desk-runner" in html and "Customer C-1001 found" in html
    # The callback URL's path and query may hold the receiver's secret: only its origin is shown.
    assert "s3cr3t" not in html and "https://receiver.example/" in html
    timeline = html[html.index('<ol class="timeline">'):]
    order = [timeline.index(mark) for mark in ("<code class=\"small\">received</code>",
                                               "<code class=\"small\">dispatched</code>",
                                               'id="call-', "<code class=\"small\">finished</code>",
                                               f'id="callback-{callback}"')]
    assert order == sorted(order)
    # Events that repeat a call's or a callback's own rows are folded into them; others stay.
    assert "tool_approval_pending" not in timeline and "<code class=\"small\">callback</code>" not in timeline
    assert "<code class=\"small\">tool_lookup</code>" in timeline
    assert "attempt 1: HTTP 503" in timeline and "attempt 2: HTTP 200" in timeline
    # Support may not open approvals: named, not linked; an admin gets the link to the queue's page.
    approval_link = f'href="/console/approvals/{call["approval_id"]}"'
    assert approval_link not in html and f'approval #{call["approval_number"]}' in html
    assert approval_link in admin.get(f"/console/jobs/{job_id}").text
    # No rerun for support; the read is recorded.
    assert RERUN not in html
    assert sql("SELECT count(*) FROM bz_access_log WHERE action = 'job_trace_view' AND target = %s",
               (job_id,))[0][0] == 2
    assert f'<a href="/console/jobs/{job_id}">Client API job</a>' in admin.get("/console/access-log").text


def test_untrusted_job_text_is_escaped_everywhere(support, sql):
    job_id = seed_job(sql, status="error", input_text=HOSTILE, request_id=HOSTILE[:60],
                      metadata={"note": HOSTILE, HOSTILE: 1}, result={"text": HOSTILE}, error=HOSTILE,
                      executor_id="<b>runner</b>", session_id=HOSTILE[:40])
    seed_event(sql, job_id, "finished", "<i>x</i>", {"status": "error", "reason": HOSTILE})
    for path in ("/console/runs/jobs", f"/console/jobs/{job_id}", f"/console/jobs/{job_id}/input",
                 f"/console/jobs/{job_id}/metadata", f"/console/jobs/{job_id}/result"):
        page = support.get(path)
        assert page.status_code == 200, (path, page.text[:2000])
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert "<b>runner</b>" not in page.text and "<i>x</i>" not in page.text, path
    html = support.get(f"/console/jobs/{job_id}").text
    assert ESCAPED in html  # the input and the error, escaped
    assert "&lt;b&gt;runner&lt;/b&gt;" in html
    assert "\u202e" not in html and "⟨RLO⟩" in html  # a bidi override is shown, not obeyed


def test_a_long_input_is_bounded_and_shown_whole_on_demand(support, sql):
    long_input = "".join(f"line {n:06d} " for n in range(9000))[:100_000]
    job_id = seed_job(sql, status="done", input_text=long_input, result={"text": "y" * 10_000})
    html = support.get(f"/console/jobs/{job_id}").text
    assert long_input[:jobs_view.SHOWN_CHARS] in html and long_input[:jobs_view.SHOWN_CHARS + 1] not in html
    assert "Show all (100,000 characters)" in html
    assert len(html) < 60_000  # the page does not carry the whole input nor the whole result
    fragment = support.get(f"/console/jobs/{job_id}/input", headers=HTMX)
    assert fragment.status_code == 200 and long_input in fragment.text and "<html" not in fragment.text
    whole = support.get(f"/console/jobs/{job_id}/input")
    assert "<html" in whole.text and long_input in whole.text
    assert support.get(f"/console/jobs/{job_id}/error").status_code == 404  # it has none
    assert support.get(f"/console/jobs/{uuid.uuid4()}/input").status_code == 404


def test_an_unknown_job_is_a_404_page(support, sql):
    before = row_counts(sql, *WRITES)
    for ref in (str(uuid.uuid4()), "not-a-job"):
        assert support.get(f"/console/jobs/{ref}").status_code == 404
    assert row_counts(sql, *WRITES) == before


def test_a_role_without_runs_read_is_refused_every_job_page(server, cli, sql):
    make_admin(cli, "apu", "approver")
    approver = signed_in(server.url, "apu")
    job_id = seed_job(sql, status="done", input_text="SECRET-INPUT")
    before = row_counts(sql, *WRITES)
    for path in ("/console/runs/jobs", f"/console/jobs/{job_id}", f"/console/jobs/{job_id}/input",
                 "/console/executors/"):
        page = approver.get(path)
        assert page.status_code == 403, path
        assert "SECRET-INPUT" not in page.text and job_id not in page.text
    assert "/console/executors/" not in approver.get("/console/approvals/").text  # not in the navigation
    assert row_counts(sql, *WRITES) == before


# ================================================================ rerun


def test_an_admin_reruns_a_finished_job_from_its_page(admin, sql):
    job_id = seed_job(sql, status="rejected", error="budget exceeded", result={"text": "old"})
    page = admin.get(f"/console/jobs/{job_id}")
    assert RERUN in page.text
    done = admin.post(f"/console/jobs/{job_id}/rerun", data={"csrf_token": csrf_of(page.text)})
    assert done.status_code == 303 and location(done) == f"/console/jobs/{job_id}"
    assert sql("SELECT status, error, result FROM bz_jobs WHERE id = %s", (job_id,)) == [
        ("queued", None, {"text": "old"})]
    assert sql("SELECT event, actor, detail FROM bz_job_events WHERE job_id = %s", (job_id,)) == [
        ("rerun", "ada", {"from": "rejected", "via": "console"})]
    after = admin.get(f"/console/jobs/{job_id}").text
    assert flashes(after) == ["The job is queued again under the same ID; executors of its target were told."]
    assert RERUN not in after  # in flight now: no button


def test_a_rerun_is_refused_in_flight_without_runs_write_and_without_csrf(admin, support, sql):
    queued = seed_job(sql, status="queued")
    done = seed_job(sql, status="done")
    token = csrf_of(admin.get(f"/console/jobs/{done}").text)
    assert RERUN not in admin.get(f"/console/jobs/{queued}").text
    before = row_counts(sql, *WRITES)
    rows = sql("SELECT * FROM bz_jobs ORDER BY id")
    refused = admin.post(f"/console/jobs/{queued}/rerun", data={"csrf_token": token})
    assert refused.status_code == 303
    assert flashes(admin.get(location(refused)).text) == [
        "The job is queued: only a finished job (done, error or rejected) can be rerun. Wait for it to finish."]
    assert support.post(f"/console/jobs/{done}/rerun",
                        data={"csrf_token": csrf_of(support.get(f"/console/jobs/{done}").text)}).status_code == 403
    assert admin.post(f"/console/jobs/{done}/rerun", data={}).status_code == 400  # no CSRF token
    assert admin.post(f"/console/jobs/{uuid.uuid4()}/rerun", data={"csrf_token": token}).status_code == 404
    assert sql("SELECT * FROM bz_jobs ORDER BY id") == rows
    assert row_counts(sql, *WRITES)["bz_job_events"] == before["bz_job_events"]


# ================================================================ the Executors page


def test_the_executors_page_shows_executors_tokens_targets_leases_and_blocked_threads(support, sql, cli):
    cli("executors", "token", "issue", "desk-runner", "--targets", "desk-worker")
    sql("INSERT INTO bz_executor_targets (name, description) VALUES ('desk-worker', 'The desk')")
    sql("INSERT INTO bz_executors (executor_id, token_name, targets, capabilities, last_seen_at) VALUES "
        "('runner-1', 'desk-runner', '{desk-worker}', %s, now() - interval '30 seconds'), "
        "('runner-old', 'desk-runner', '{desk-worker}', NULL, now() - interval '5 minutes')",
        ('{"runtime": "<script>x</script>"}',))
    held = seed_job(sql, status="dispatched", executor_id="runner-1", thread_key="desk:conv-1")
    waiting = seed_job(sql, status="queued", thread_key="desk:conv-1")
    html = support.get("/console/executors/").text
    assert "runner-1" in html and "runner-old" in html
    assert '<span class="badge online">online</span>' in html and '<span class="badge offline">offline</span>' in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x</script>" not in html
    [(last4,)] = sql("SELECT token_last4 FROM bz_executor_tokens")
    assert f"<code>…{last4}</code>" in html
    assert f'href="/console/jobs/{held}"' in html  # its lease
    assert "desk:conv-1" in html and waiting not in html  # the blocked thread, its job in flight linked
    assert "Issue token" not in html and "Rotate" not in html  # support holds no runs:write
    assert 'id="clients"' not in html  # nor clients:read


def test_an_admin_issues_rotates_and_revokes_an_executor_token_shown_once(admin, support, sql):
    token = csrf_of(admin.get("/console/executors/").text)
    issued = admin.post("/console/executors/tokens", data={"csrf_token": token, "name": "night-runner",
                                                           "targets": "desk-worker, ops", "description": "Nights"})
    assert issued.status_code == 200
    shown = re.search(r'<code class="token">([0-9a-f]{32})</code>', issued.text).group(1)
    assert sql("SELECT name, allowed_targets, token_last4 FROM bz_executor_tokens") == [
        ("night-runner", ["desk-worker", "ops"], shown[-4:])]
    again = admin.get("/console/executors/").text
    assert shown not in again and f"…{shown[-4:]}" in again  # never shown again
    rotated = admin.post("/console/executors/tokens/night-runner/rotate", data={"csrf_token": token})
    new = re.search(r'<code class="token">([0-9a-f]{32})</code>', rotated.text).group(1)
    assert new != shown and "The previous token is refused from now on." in rotated.text
    # A refusal: the form again with what is wrong, nothing written.
    before = row_counts(sql, *WRITES)
    bad = admin.post("/console/executors/tokens", data={"csrf_token": token, "name": "Bad Name", "targets": "x1"})
    assert bad.status_code == 400 and "name: must be 2-64 characters" in unescape(bad.text)
    assert support.post("/console/executors/tokens/night-runner/revoke",
                        data={"csrf_token": csrf_of(support.get("/console/executors/").text)}).status_code == 403
    assert admin.post("/console/executors/tokens/night-runner/revoke", data={}).status_code == 400  # no CSRF
    assert row_counts(sql, *WRITES) == before
    revoked = admin.post("/console/executors/tokens/night-runner/revoke", data={"csrf_token": token})
    assert revoked.status_code == 303 and sql("SELECT count(*) FROM bz_executor_tokens") == [(0,)]
    # Each change is in the configuration-change log, as the same change through the admin API.
    assert sql("SELECT actor, method, path FROM bz_config_audit WHERE object_kind IS DISTINCT FROM 'admin' "
               "ORDER BY id") == [
        ("ada", "POST", "executor-tokens"), ("ada", "POST", "executor-tokens"),
        ("ada", "DELETE", "executor-tokens/night-runner")]


def test_an_admin_issues_and_revokes_a_client_token(admin, sql):
    seed_client(sql, "crm-app")
    page = admin.get("/console/executors/")
    assert 'id="client-crm-app"' in page.text and "none issued" in page.text
    token = csrf_of(page.text)
    issued = admin.post("/console/executors/clients/crm-app/token/rotate", data={"csrf_token": token})
    assert issued.status_code == 200
    shown = re.search(r'<code class="token">([^<]+)</code>', issued.text).group(1)
    [(digest,)] = sql("SELECT client_token_hash FROM bz_client_apps WHERE app_id = 'crm-app'")
    assert digest is not None and shown not in admin.get("/console/executors/").text
    revoked = admin.post("/console/executors/clients/crm-app/token/revoke", data={"csrf_token": token})
    assert revoked.status_code == 303
    assert sql("SELECT client_token_hash FROM bz_client_apps WHERE app_id = 'crm-app'") == [(None,)]
    unknown = admin.post("/console/executors/clients/nobody/token/rotate", data={"csrf_token": token})
    assert unknown.status_code == 400 and "No client app nobody." in unescape(unknown.text)
