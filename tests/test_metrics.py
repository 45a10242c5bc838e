"""Issue 17, deliverable 4: GET /metrics in Prometheus format.

Against real servers on loopback (the in-process `server`, or gunicorn for the multiprocess
mode) and a real PostgreSQL: request counts and latency buckets, appended audit events, governed
call outcomes, the gauges read from the database, the pool, the protection of the endpoint, and
a database outage. The in-process counters are shared by every app of a test process, so each
test compares a scrape before and after what it does.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from admin_app import create_app
from tests.conftest import serve
from tests.gunicorn_hub import GunicornHub
from tests.test_audit_agent import append, completed_turn, ready
from tests.test_tool_invocations import BIG_CREDIT, CUSTOMER, Admin, Agent

REQUESTS = "bailing_http_requests_total"
LATENCY = "bailing_http_request_duration_seconds"
OUTCOMES = "bailing_tool_invocation_outcomes_total"
APPENDED = "bailing_audit_events_appended_total"
TOKEN = "metrics-scrape-token-for-tests"


# ----------------------------------------------------------------------------- helpers

class Samples(dict):
    """A scrape: {(sample name, sorted label pairs): value}."""

    def value(self, name: str, **labels) -> float:
        return self.get((name, tuple(sorted(labels.items()))), 0.0)

    def names(self) -> set[str]:
        return {name for name, _ in self}

    def labels_of(self, name: str) -> list[dict]:
        return [dict(labels) for sample, labels in self if sample == name]


def parse(text: str) -> Samples:
    samples = Samples()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(server, **kwargs) -> Samples:
    response = server.get("/metrics", **kwargs)
    assert response.status_code == 200, response.text[:500]
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return parse(response.text)


def delta(before: Samples, after: Samples, name: str, **labels) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


# ----------------------------------------------------------------------------- requests

def test_a_request_moves_its_count_and_latency_buckets_under_its_url_rule(server):
    before = scrape(server)
    assert server.get("/health/live").status_code == 200
    run = "5c0c3fb1-39c0-4d5b-9d2e-0f1b8a7d6e11"
    assert server.post(f"/agent-api/v1/runs/{run}/complete", json={}).status_code == 401
    assert server.get("/no/such/page/8b1d0c").status_code == 404
    after = scrape(server)

    live = {"method": "GET", "route": "/health/live", "status": "200"}
    assert delta(before, after, REQUESTS, **live) == 1
    assert delta(before, after, LATENCY + "_count", **live) == 1
    assert delta(before, after, LATENCY + "_sum", **live) > 0
    buckets = sorted(((float(labels["le"]), after.value(LATENCY + "_bucket", **labels)
                       - before.value(LATENCY + "_bucket", **labels))
                      for labels in after.labels_of(LATENCY + "_bucket")
                      if {k: labels[k] for k in live} == live), key=lambda b: b[0])
    assert [le for le, _ in buckets][-2:] == [60.0, float("inf")]
    moved = [d for _, d in buckets]
    # One observation: every bucket from the one it fell in upwards moved by exactly one.
    assert moved[-1] == 1 and set(moved) <= {0, 1} and moved == sorted(moved)

    # The URL rule, never the path: the run id and the unknown path are not label values.
    assert delta(before, after, REQUESTS, method="POST", route="/agent-api/v1/runs/<run_id>/complete",
                 status="401") == 1
    assert delta(before, after, REQUESTS, method="GET", route="(unmatched)", status="404") == 1
    routes = {labels["route"] for labels in after.labels_of(REQUESTS)}
    assert not any(run in r or "8b1d0c" in r for r in routes), routes


def test_scrapes_are_not_counted_and_odd_methods_share_one_label(server):
    before = scrape(server)
    scrape(server)
    assert server.request("BREW", "/health/live").status_code == 405
    after = scrape(server)
    assert all(labels["route"] != "/metrics" for labels in after.labels_of(REQUESTS))
    # A method no rule allows matches no rule (405): the unmatched label, as an unknown path.
    assert delta(before, after, REQUESTS, method="other", route="(unmatched)", status="405") == 1
    assert not any(labels["method"] == "BREW" for labels in after.labels_of(REQUESTS))


# ----------------------------------------------------------------------------- audit events

def test_appended_events_grow_by_exactly_each_acknowledged_batch(server, issue_session):
    writer, other = issue_session(), issue_session()
    cid = ready(server, writer, other)
    before = scrape(server)
    batch = completed_turn(1)
    response = append(server, writer, cid, batch)
    assert response.status_code == 200, response.text
    after = scrape(server)
    assert delta(before, after, APPENDED) == len(batch) == 4

    # An identical retry stores nothing new; a refused batch stores nothing: neither counts.
    assert append(server, writer, cid, batch).status_code == 200
    changed = [dict(batch[0], event_id="other-start")]
    refused = append(server, writer, cid, changed)
    assert refused.status_code == 409 and refused.json()["error"] == "conversation_audit_conflict"
    assert delta(after, scrape(server), APPENDED) == 0


# ----------------------------------------------------------------------------- tool calls

def test_dispatch_outcomes_are_counted_once_each_and_gauges_equal_the_database(
        server, governed, business, sql):
    agent = Agent(server, governed)
    before = scrape(server)
    assert agent.invoke("customer_get", CUSTOMER, "m-read")["status"] == "executed"
    assert agent.invoke("customer_get", CUSTOMER, "m-read")["status"] == "executed"  # a replay
    assert agent.invoke("customer_update_credit_limit", BIG_CREDIT, "m-big")["status"] == "awaiting_approval"
    assert agent.resume("m-big")["status"] == "awaiting_approval"  # still waiting: no new outcome
    rejected = agent.invoke("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": -1},
                            "m-bad")
    assert rejected["status"] == "rejected_before_dispatch"
    business.fault("customer_get", "drop_response")
    assert agent.invoke("customer_get", CUSTOMER, "m-lost")["status"] == "reconciliation_required"
    after = scrape(server)

    assert {outcome: delta(before, after, OUTCOMES, outcome=outcome) for outcome in (
        "executed", "awaiting_approval", "rejected_before_dispatch", "reconciliation_required",
        "business_rejected", "denied")} == {
        "executed": 1, "awaiting_approval": 1, "rejected_before_dispatch": 1,
        "reconciliation_required": 1, "business_rejected": 0, "denied": 0}

    pending = sql("SELECT count(*) FROM bz_tool_approvals WHERE status = 'pending'")[0][0]
    reconcile = sql("SELECT count(*) FROM bz_tool_invocations WHERE status = 'reconciliation_required'")[0][0]
    assert (pending, reconcile) == (1, 1)
    assert after.value("bailing_database_up") == 1
    assert after.value("bailing_tool_approvals_pending") == pending
    assert after.value("bailing_tool_invocations_reconciliation_required") == reconcile
    assert after.value("bailing_tool_dispatches_in_flight") == 0
    assert after.value("bailing_tool_approvals_pending_oldest_age_seconds") >= 0

    # An expired approval waits for nobody: it leaves the gauges (and no age keeps growing).
    sql("UPDATE bz_tool_approvals SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'")
    expired = scrape(server)
    assert expired.value("bailing_tool_approvals_pending") == 0
    assert expired.value("bailing_tool_approvals_pending_oldest_age_seconds") == 0

    # The gauges follow the database, whoever changed it.
    sql("UPDATE bz_tool_approvals SET status = 'denied', expires_at = NULL, created_at = now() - interval '1 hour'")
    again = scrape(server)
    assert again.value("bailing_tool_approvals_pending") == 0
    assert again.value("bailing_tool_approvals_pending_oldest_age_seconds") == 0


def test_an_approver_denial_is_counted_once_and_a_refused_one_not(server, governed, business, cli):
    agent = Agent(server, governed)
    approver = Admin(server, cli, "ann", "approver")
    assert agent.invoke("customer_update_credit_limit", BIG_CREDIT, "m-deny")["status"] == "awaiting_approval"
    [approval] = approver.approvals("pending")
    before = scrape(server)
    # Refused (no reason, then a stale hash): nothing ends, nothing is counted.
    assert approver.decide(approval["id"], "deny", args_hash=approval["args_hash"]).status_code == 400
    assert approver.decide(approval["id"], "deny", args_hash="f" * 64, reason="no").status_code == 409
    assert delta(before, scrape(server), OUTCOMES, outcome="denied") == 0
    approver.deny(approval)
    assert approver.decide(approval["id"], "deny", args_hash=approval["args_hash"],
                           reason="again").status_code == 409  # already decided
    assert delta(before, scrape(server), OUTCOMES, outcome="denied") == 1


def test_pool_figures_are_this_process_pool(app, server, configured):
    settings = app.extensions["bailing"].settings
    assert server.get("/health/ready").status_code == 200
    # A request that uses the pool (an agent route without a bearer checks it in the database).
    assert server.post("/agent-api/v1/conversation-audits", json={},
                       headers={"Authorization": "Bearer nope"}).status_code == 401
    samples = scrape(server)
    assert samples.value("bailing_db_pool_size") == settings.db_pool_size
    assert samples.value("bailing_db_pool_checked_out") == 0  # the scrape reads on its own connection
    assert samples.value("bailing_db_pool_overflow") <= 0
    assert samples.value("bailing_db_pool_max_overflow") == settings.db_max_overflow


# ----------------------------------------------------------------------------- protection

def test_with_a_token_only_its_bearer_may_scrape(hub_app):
    live = hub_app(metrics_token=TOKEN)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                    {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Basic {TOKEN}"}):
        response = live.get("/metrics", headers=headers)
        assert response.status_code == 401, headers
        assert response.json()["error"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "bailing_" not in response.text  # nothing of the metrics leaks
    samples = scrape(live, headers={"Authorization": f"Bearer {TOKEN}"})
    assert samples.value("bailing_database_up") == 1


def test_without_a_token_only_loopback_clients_may_scrape(hub_app):
    # Behind one trusted proxy the client address is X-Forwarded-For's last hop: that is how a
    # client elsewhere is simulated over a real loopback connection.
    live = hub_app(trusted_proxies=1)
    outside = live.get("/metrics", headers={"X-Forwarded-For": "203.0.113.7"})
    assert outside.status_code == 404
    assert "bailing_" not in outside.text
    assert live.get("/metrics").status_code == 200  # no proxy header: the loopback peer itself
    # A forwarded request is never "local", whatever address it claims: a proxy on the same host
    # (declared or not) would otherwise hand /metrics to every client it serves.
    undeclared = hub_app()
    for name, value in (("X-Forwarded-For", "::1"), ("X-Forwarded-For", "127.0.0.1"),
                        ("Forwarded", "for=127.0.0.1"), ("X-Real-IP", "127.0.0.1"),
                        ("X-Forwarded-Proto", "https")):
        for hub in (live, undeclared):
            refused = hub.get("/metrics", headers={name: value})
            assert refused.status_code == 404, (name, value)
            assert "bailing_" not in refused.text
    assert undeclared.get("/metrics").status_code == 200

    # A token set: the address does not matter, the bearer does.
    guarded = hub_app(trusted_proxies=1, metrics_token=TOKEN)
    far = {"X-Forwarded-For": "203.0.113.7"}
    assert guarded.get("/metrics", headers=far).status_code == 401
    assert guarded.get("/metrics", headers={**far, "Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_endpoint_is_outside_the_api_prefixes_and_read_only(server):
    assert server.post("/metrics").status_code == 405
    assert server.get("/agent-api/metrics").status_code in (401, 404)
    assert server.get("/admin/api/metrics").status_code in (401, 404)


# ----------------------------------------------------------------------------- outage

def test_a_database_outage_is_a_gauge_not_a_failed_scrape(tmp_path):
    import socket

    with socket.socket() as closed:  # a port nobody listens on (bound, never listening)
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        application = create_app({"database_url": f"postgresql://bailing@127.0.0.1:{port}/none",
                                  "data_dir": tmp_path / "var"})
        live = serve(application)
        try:
            response = live.get("/metrics")
            assert response.status_code == 200
            samples = parse(response.text)
            assert samples.value("bailing_database_up") == 0
            assert "bailing_tool_approvals_pending" not in samples.names()
            assert "bailing_http_requests_total" in {name for name, _ in samples}  # the rest answers
        finally:
            live.stop()
            application.extensions["bailing"].db.dispose()


# ----------------------------------------------------------------------------- gunicorn


# The test's own requests: a route the harness's readiness probe (/health/live) never uses, whose
# last request may still be counted after its answer has arrived.
COUNTED_ROUTE = "/health/ready"


def _requests_of(files: list[Path]) -> float:
    """Requests to COUNTED_ROUTE counted in these multiprocess files."""
    total = 0.0
    for metric in MultiProcessCollector.merge([str(f) for f in files]):
        for sample in metric.samples:
            if sample.name == REQUESTS and sample.labels.get("route") == COUNTED_ROUTE:
                total += sample.value
    return total


@pytest.mark.any_server  # gunicorn workers and their metric files
def test_multiprocess_mode_sums_every_gunicorn_worker(db_url, tmp_path):
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_1.db").write_bytes(b"left by an earlier run")  # wiped at start
    with GunicornHub(db_url, workers=2, data_dir=tmp_path / "var",
                     args=("-c", "python:admin_app.observability.gunicorn_conf"),
                     env={"PROMETHEUS_MULTIPROC_DIR": str(folder)}) as hub:
        pids = hub.worker_pids()
        assert not (folder / "counter_1.db").exists()
        sent, per_worker = 0, {}
        # New connections until both workers have answered some (the kernel shares them out).
        while sent < 400 and not (len(per_worker) == 2 and all(per_worker.values())):
            with requests.get(hub.url + COUNTED_ROUTE, headers={"Connection": "close"}, timeout=10) as r:
                assert r.status_code == 200
            sent += 1
            if sent % 10 == 0:
                per_worker = {pid: _requests_of(list(folder.glob(f"counter_{pid}.db"))) for pid in pids}
        # A request is counted once its answer is sent, so the last one may land just after it.
        deadline = time.monotonic() + 10
        while True:
            per_worker = {pid: _requests_of(list(folder.glob(f"counter_{pid}.db"))) for pid in pids}
            if sum(per_worker.values()) >= sent or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert all(per_worker.values()), per_worker
        assert sum(per_worker.values()) == sent

        # Whichever worker answers the scrape, it reports the sum of both.
        for _ in range(4):
            samples = parse(requests.get(hub.url + "/metrics", timeout=10).text)
            assert samples.value(REQUESTS, method="GET", route=COUNTED_ROUTE, status="200") == sent
            assert samples.value("bailing_database_up") == 1
            # Pool figures: one series per live worker (label pid).
            assert {labels["pid"] for labels in samples.labels_of("bailing_db_pool_size")} == {
                str(pid) for pid in pids}

        # A worker that dies keeps its counts in the sum; gunicorn replaces it.
        os.kill(pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(hub.worker_pids()) != 2 or pids[0] in hub.worker_pids()):
            time.sleep(0.05)
        samples = parse(requests.get(hub.url + "/metrics", timeout=10).text)
        assert samples.value(REQUESTS, method="GET", route=COUNTED_ROUTE, status="200") == sent
        live = {labels["pid"] for labels in samples.labels_of("bailing_db_pool_size")}
        assert str(pids[0]) not in live, (pids, hub.worker_pids(), live, sorted(f.name for f in folder.iterdir()))
