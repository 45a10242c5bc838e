"""Tool rate-limit policies (BUSINESS_SIDE.md §D): the tool gate `tool:<provider>:<tool>` and the
provider gate `provider:<provider>`, checked after a call is screened and before its approval,
both checked before either is charged, shared by every session and every hub process on the
database; a refused call is `rejected_before_dispatch` with `retry_after_ms` and `rate_limit`,
writes no approval, journal, reservation or permit, and its resume runs the gates again.

Against the demo business system on loopback (conftest `business`, `governed`): its requests are
counted there, not in the hub.
"""
from __future__ import annotations

import hashlib
import threading
import time

import pytest
import requests

from admin_app import limits
from admin_app.catalog.compiler import compile_provider
from admin_app.catalog.rate_limits import Limit, declared, provider_limit, tool_limit
from tests.conftest import governed_config
from tests.helpers import admin_token, apply_config, assert_ok, bearer, row_counts
from tests.task_world import binding

BASE = "/agent-api/v1/tool-invocations"
ROUTE = "desk"
READ = "customer_get"
SEARCH = "customer_search"
WRITE = "customer_update_credit_limit"  # approval above 10000
CUSTOMER = {"customer_id": "C-100234"}
BIG_CREDIT = {"customer_id": "C-100234", "credit_limit": 50000}
TEXT = ("Not dispatched: a shared rate limit of this tool or its provider is reached. Wait "
        "retry_after_ms milliseconds, then resume this same invocation_id; do not make a new call.")


def iid(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def limited_config(business_url: str, *, per_min: int = 0, policies: dict | None = None) -> dict:
    """The governed configuration with demo-crm's rate-limit fields set."""
    config = governed_config(business_url)
    crm = config["tool_providers"][0]
    crm["rate_limit_per_min"] = per_min
    if policies is not None:
        crm["tool_rate_limits"] = policies
    return config


def override(tool: str, count: int, window: str) -> dict:
    return {"overrides": {tool: {"mode": "custom", "count": count, "window": window}}}


class Agent:
    """An agent session on route `desk`; every call on a connection of its own (thread-safe)."""

    def __init__(self, url: str, session: dict):
        self.url, self.headers = url, bearer(session["access_token"])
        self._revision: str | None = None

    def revision(self) -> str:
        if self._revision is None:
            response = requests.get(f"{self.url}/agent-api/v1/tools?route={ROUTE}", headers=self.headers, timeout=30)
            self._revision = assert_ok(response)["capability_revision"]
        return self._revision

    def invoke(self, tool: str, arguments: dict, label: str, run_id: str | None = None) -> dict:
        body = {"invocation_id": iid(label), "route": ROUTE, "capability_revision": self.revision(),
                "tool": tool, "arguments": arguments}
        if run_id is not None:
            body["agent_run_id"] = run_id
        return checked(assert_ok(requests.post(self.url + BASE, json=body, headers=self.headers, timeout=60)))

    def resume(self, label: str) -> dict:
        return checked(assert_ok(requests.post(f"{self.url}{BASE}/{iid(label)}/resume", headers=self.headers,
                                               timeout=60)))

    def receipt(self, label: str) -> dict:
        return assert_ok(requests.get(f"{self.url}{BASE}/{iid(label)}/receipt", headers=self.headers, timeout=30))


def checked(result: dict) -> dict:
    """The result's rate-limit fields as the official client accepts them (WIRE_CONTRACT §2.11)."""
    limited = "rate_limit" in result or "retry_after_ms" in result
    assert ("rate_limit" in result) == ("retry_after_ms" in result), result
    if limited:
        assert result["state"] == "rejected_before_dispatch" and result["ok"] is False, result
        assert result["auto_retry_allowed"] is True
        assert result["retry_after_ms"] in range(1, limits.RATE_LIMIT_RETRY_AFTER_MS_MAX + 1)
        limit = result["rate_limit"]
        assert set(limit) == {"level", "count", "window_sec", "scope", "source"}
        assert limit["scope"] == "tool_provider_shared" and limit["window_sec"] in (1, 60, 3600, 86400)
        assert result["text"] == TEXT and "business_status" not in result
    else:
        assert result["auto_retry_allowed"] is (result["state"] == "in_progress"), result
    return result


def session(cli) -> dict:
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                         "--principal", '{"id": "user-43", "tenant": "tenant-7"}',
                         "--on-behalf-of", "tenant-7:user-43")
    assert code == 0, err
    return out


def buckets(sql) -> dict[str, int]:
    return dict(sql("SELECT bucket, held FROM bz_tool_rate_buckets WHERE held > 0"))


def in_threads(count: int, work) -> list:
    """`work(i)` in `count` threads released together; the answers in order."""
    start = threading.Barrier(count)
    answers: list = [None] * count

    def run(i: int) -> None:
        start.wait()
        answers[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


# ----------------------------------------------------------------------------- resolution

@pytest.mark.parametrize("value, expected", [
    ({"count": 10, "window": "1h"}, (10, 3600)),
    ({"count": 1, "window": "1s"}, (1, 1)),
    ({"count": 5, "window": "1d"}, (5, 86400)),
    ({"count": 0, "window": "1m"}, None),
    ({"count": 1.5, "window": "1m"}, None),
    ({"count": True, "window": "1m"}, None),
    ({"count": 10, "window": "2m"}, None),
    ({"count": 10}, None),
    ({"count": 10, "window": "1m", "burst": 2}, None),
    ("10/m", None),
])
def test_an_acc_declaration_is_valid_or_means_no_limit(value, expected):
    assert declared(value) == expected


@pytest.mark.parametrize("policies, tool, expected", [
    (None, "t", Limit(10, 60, "declaration")),
    ({}, "t", Limit(10, 60, "declaration")),
    ({"default": {"mode": "inherit"}}, "t", Limit(10, 60, "declaration")),
    ({"default": {"mode": "disabled"}}, "t", None),
    ({"default": {"mode": "custom", "count": 3, "window": "1s"}}, "t", Limit(3, 1, "provider_default")),
    ({"default": {"mode": "disabled"}, "overrides": {"t": {"mode": "inherit"}}}, "t", Limit(10, 60, "declaration")),
    ({"default": {"mode": "custom", "count": 3, "window": "1s"}, "overrides": {"t": {"mode": "disabled"}}}, "t", None),
    ({"default": {"mode": "disabled"}, "overrides": {"t": {"mode": "custom", "count": 7, "window": "1d"}}}, "t",
     Limit(7, 86400, "tool_override")),
    ({"overrides": {"other": {"mode": "disabled"}}}, "t", Limit(10, 60, "declaration")),
])
def test_the_effective_tool_limit_and_its_source(policies, tool, expected):
    assert tool_limit((10, 60), policies, tool) == expected


def test_inherit_without_a_declaration_is_no_tool_limit_and_zero_per_minute_no_provider_gate():
    assert tool_limit(None, None, "t") is None
    assert tool_limit(None, {"overrides": {"t": {"mode": "inherit"}}}, "t") is None
    assert provider_limit(0) is None
    assert provider_limit(120) == Limit(120, 60, "provider_total")


def _doc(rate_limit) -> dict:
    acc = {"version": 1, "enabled": True, "scope": "x.read",
           "execution": {"readonly": True, "rate_limit": rate_limit}}
    return {"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
            "paths": {"/x": {"get": {"operationId": "x_get", "responses": {"200": {"description": "ok"}},
                                     "x-agent-capability": acc}}}}


def test_the_compiler_keeps_a_valid_declaration_and_warns_of_an_invalid_one():
    good = compile_provider("p", _doc({"count": 4, "window": "1m"}), "http://127.0.0.1:9", 1000)
    assert good.tools["x_get"].rate_limit == (4, 60) and good.warnings == []
    bad = compile_provider("p", _doc({"count": 0, "window": "1m"}), "http://127.0.0.1:9", 1000)
    assert bad.tools["x_get"].rate_limit is None  # the tool is kept, without a limit
    assert [w["code"] for w in bad.warnings] == ["rate_limit_declaration_invalid"]
    # The limit is a gate, not part of what the call runs: the fingerprint ignores it.
    assert good.tools["x_get"].execution_fingerprint == bad.tools["x_get"].execution_fingerprint


# ----------------------------------------------------------------------------- the tool gate

def test_fifty_concurrent_calls_against_ten_a_minute_dispatch_exactly_ten(server, cli, business, governed, sql,
                                                                         tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, policies=override(READ, 10, "1m")))
    agents = [Agent(server.url, governed), Agent(server.url, session(cli))]  # one bucket for all sessions
    for agent in agents:
        agent.revision()
    results = in_threads(50, lambda i: agents[i % 2].invoke(READ, CUSTOMER, f"burst-{i}"))
    states = [r["state"] for r in results]
    assert states.count("executed") == 10 and states.count("rejected_before_dispatch") == 40
    assert len(business.executions(READ)) == 10  # what the business system received
    for refused in (r for r in results if r["state"] == "rejected_before_dispatch"):
        assert refused["rate_limit"] == {"level": "tool", "count": 10, "window_sec": 60,
                                         "scope": "tool_provider_shared", "source": "tool_override"}
        assert refused["retry_after_ms"] in range(1, 60_001)  # within the 1m window
    assert buckets(sql) == {"tool:demo-crm:customer_get": 10}
    assert sql("SELECT count(*) FROM bz_tool_journal")[0][0] == 10
    assert sql("SELECT count(*) FROM bz_tool_deferred_calls")[0][0] == 40


def test_a_limited_call_gets_no_approval_and_never_consumes_one(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, policies=override(WRITE, 3, "1m")))
    agent = Agent(server.url, governed)
    agent.revision()
    results = in_threads(8, lambda i: agent.invoke(WRITE, BIG_CREDIT, f"write-{i}"))
    waiting = [i for i, r in enumerate(results) if r["state"] == "awaiting_approval"]
    refused = [i for i, r in enumerate(results) if r["state"] == "rejected_before_dispatch"]
    assert len(waiting) == 3 and len(refused) == 5
    # Only the admitted calls asked for approval; the refused ones have none, and sent nothing.
    assert sql("SELECT count(*) FROM bz_tool_approvals")[0][0] == 3
    refused_jobs = sql("SELECT count(*) FROM bz_tool_approvals a JOIN bz_tool_invocations i ON i.id = a.job_id "
                       "WHERE i.status = 'rejected_before_dispatch'")
    assert refused_jobs == [(0,)]
    assert all("approval_id" not in results[i] for i in refused)
    assert business.executions(WRITE) == []
    approver = bearer(admin_token(cli, "ann", "approver"))
    label = f"write-{waiting[0]}"
    approval = results[waiting[0]]["approval"]
    assert_ok(requests.post(f"{server.url}/admin/api/tool-approvals/{approval['id']}/approve",
                            json={"args_hash": approval["args_hash"]}, headers=approver, timeout=30))
    # The window still holds the three admissions: the approved call is held back before its
    # approval is used, and the approval stays approved and unconsumed.
    held = agent.resume(label)
    assert held["state"] == "rejected_before_dispatch" and held["rate_limit"]["source"] == "tool_override"
    assert held["approval_id"] == results[waiting[0]]["approval_id"]
    assert sql("SELECT status, consumed_at FROM bz_tool_approvals WHERE id = %s",
               (approval["id"],)) == [("approved", None)]
    assert agent.receipt(label)["approval"]["status"] == "approved"
    assert sql("SELECT count(*) FROM bz_tool_journal") == [(0,)]
    # The operator raises the limit: the same resume now consumes the approval and sends once.
    apply_config(cli, tmp_path, limited_config(business.url, policies=override(WRITE, 10, "1m")))
    assert agent.resume(label)["state"] == "executed"
    assert sql("SELECT consumed_at IS NOT NULL FROM bz_tool_approvals WHERE id = %s", (approval["id"],)) == [(True,)]
    assert len(business.executions(WRITE)) == 1
    # A refused call resumed asks for its approval then, with its sealed arguments.
    later = agent.resume(f"write-{refused[0]}")
    assert later["state"] == "awaiting_approval", later
    [(snapshot_hash,)] = sql("SELECT a.args_hash FROM bz_tool_approvals a JOIN bz_tool_invocations i "
                             "ON i.id = a.job_id WHERE i.invocation_id = %s", (iid(f"write-{refused[0]}"),))
    assert snapshot_hash == hashlib.sha256(b'{"credit_limit":50000,"customer_id":"C-100234"}').hexdigest()
    assert sql("SELECT count(*) FROM bz_tool_deferred_calls") == [(len(refused) - 1,)]


def test_resume_after_the_window_dispatches_the_sealed_call_once(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, policies=override(READ, 1, "1s")))
    agent = Agent(server.url, governed)
    assert agent.invoke(READ, CUSTOMER, "first")["state"] == "executed"
    refused = agent.invoke(READ, CUSTOMER, "second")
    assert refused["state"] == "rejected_before_dispatch" and refused["retry_after_ms"] <= 1000
    # Persisted: the receipt and an invoke replay say the same, and nothing was sent.
    receipt = agent.receipt("second")
    assert receipt["result"]["rate_limit"] == refused["rate_limit"] and receipt["dispatch_state"] == "not_dispatched"
    assert receipt["journal_state"] == "absent" and receipt["approval"] == {"status": "none"}
    assert agent.invoke(READ, CUSTOMER, "second") == refused
    assert len(business.executions(READ)) == 1
    time.sleep(refused["retry_after_ms"] / 1000 + 0.05)
    done = agent.resume("second")
    assert done["state"] == "executed" and "rate_limit" not in done
    assert agent.resume("second") == done  # a replay: nothing sent again
    assert len(business.executions(READ)) == 2
    assert sql("SELECT count(*) FROM bz_tool_deferred_calls") == [(0,)]
    assert agent.receipt("second")["result"]["state"] == "executed"


def test_the_declaration_limits_by_default_and_the_trace_shows_the_gate(server, cli, business, governed, sql,
                                                                        tmp_path):
    config = limited_config(business.url)
    config["tool_providers"][0]["openapi"] = _crm_with_declaration(tmp_path, READ, {"count": 2, "window": "1h"})
    apply_config(cli, tmp_path, config)
    agent = Agent(server.url, governed)
    assert [agent.invoke(READ, CUSTOMER, f"d-{i}")["state"] for i in range(2)] == ["executed"] * 2
    refused = agent.invoke(READ, CUSTOMER, "d-2")
    assert refused["rate_limit"] == {"level": "tool", "count": 2, "window_sec": 3600,
                                     "scope": "tool_provider_shared", "source": "declaration"}
    assert 3_500_000 < refused["retry_after_ms"] <= 3_600_000
    [(job,)] = sql("SELECT id::text FROM bz_tool_invocations WHERE invocation_id = %s", (iid("d-2"),))
    support = bearer(admin_token(cli, "sam", "support"))
    trace = assert_ok(requests.get(f"{server.url}/admin/api/tool-jobs/{job}", headers=support, timeout=30))["job"]
    assert trace["reason"] == "rate_limited"
    assert trace["rate_limit"] == {**refused["rate_limit"], "retry_after_ms": refused["retry_after_ms"]}
    # The operator turns the declaration off: the same call goes through on its resume.
    config["tool_providers"][0]["tool_rate_limits"] = {"overrides": {READ: {"mode": "disabled"}}}
    apply_config(cli, tmp_path, config)
    assert agent.resume("d-2")["state"] == "executed"


def _crm_with_declaration(tmp_path, tool: str, rate_limit: dict) -> str:
    import json

    from tests.conftest import EXAMPLES

    doc = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    for item in doc["paths"].values():
        for op in item.values():
            if isinstance(op, dict) and op.get("operationId") == tool:
                op["x-agent-capability"].setdefault("execution", {})["rate_limit"] = rate_limit
    path = tmp_path / "crm-declared.json"
    path.write_text(json.dumps(doc))
    return str(path)


# ----------------------------------------------------------------------------- the provider gate

def test_the_provider_gate_counts_all_its_tools_together(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, per_min=3))
    agent = Agent(server.url, governed)
    assert agent.invoke(READ, CUSTOMER, "p-1")["state"] == "executed"
    assert agent.invoke(SEARCH, {"q": "acme"}, "p-2")["state"] == "executed"
    assert agent.invoke(READ, CUSTOMER, "p-3")["state"] == "executed"
    refused = agent.invoke(SEARCH, {"q": "acme"}, "p-4")
    assert refused["rate_limit"] == {"level": "provider", "count": 3, "window_sec": 60,
                                     "scope": "tool_provider_shared", "source": "provider_total"}
    # Another provider's tools are not counted with it.
    assert agent.invoke("order_get", {"order_id": "ORD-000001"}, "p-erp")["state"] == "executed"
    # demo-erp names no limit: Core's default of 120 a minute counts it.
    assert buckets(sql) == {"provider:demo-crm": 3, "provider:demo-erp": 1}


def test_a_call_refused_by_one_gate_charges_neither(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, per_min=3, policies=override(READ, 2, "1m")))
    agent = Agent(server.url, governed)
    assert [agent.invoke(READ, CUSTOMER, f"b-{i}")["state"] for i in range(2)] == ["executed"] * 2
    by_tool = agent.invoke(READ, CUSTOMER, "b-2")
    assert by_tool["rate_limit"]["level"] == "tool"
    # The tool's refusal left the provider's third place free.
    assert buckets(sql) == {"tool:demo-crm:customer_get": 2, "provider:demo-crm": 2}
    assert agent.invoke(SEARCH, {"q": "acme"}, "b-3")["state"] == "executed"
    # Now the provider is full: a call its tool gate would admit is refused, and charges no gate.
    config = limited_config(business.url, per_min=3, policies=override(READ, 5, "1m"))
    apply_config(cli, tmp_path, config)
    by_provider = agent.invoke(READ, CUSTOMER, "b-4")
    assert by_provider["rate_limit"]["level"] == "provider"
    assert buckets(sql) == {"tool:demo-crm:customer_get": 2, "provider:demo-crm": 3}
    assert len(business.executions(READ)) == 2 and len(business.executions(SEARCH)) == 1


# ----------------------------------------------------------------------------- several hub processes

def test_two_hub_instances_on_one_database_share_the_bucket(server, hub_app, cli, business, governed, sql,
                                                            tmp_path):
    apply_config(cli, tmp_path, limited_config(business.url, policies=override(READ, 4, "1m")))
    other = hub_app()  # a second create_app on the same database: another process, as far as the limit knows
    agents = [Agent(server.url, governed), Agent(other.url, governed)]
    results = in_threads(10, lambda i: agents[i % 2].invoke(READ, CUSTOMER, f"h-{i}"))
    assert [r["state"] for r in results].count("executed") == 4
    assert len(business.executions(READ)) == 4
    # The call one instance refused is resumed through the other: the same invocation, still limited.
    refused = next(i for i, r in enumerate(results) if r["state"] == "rejected_before_dispatch")
    assert agents[(refused + 1) % 2].resume(f"h-{refused}")["state"] == "rejected_before_dispatch"


# ----------------------------------------------------------------------------- task-managed calls

def test_a_limited_task_call_reserves_nothing_and_its_resume_reserves_once(world, tmp_path):
    from tests.task_world import task_config, counters

    config = task_config(world.business.url)
    # A minute's window, not a second's: the second call must come while the first call's window
    # is still open, and on a loaded machine the first call alone has taken over a second. The
    # window is then passed by moving the recorded hit back, not by waiting a minute.
    config["tool_providers"][0]["tool_rate_limits"] = override(WRITE, 1, "1m")
    apply_config(world.cli, tmp_path, config)
    member = world.member()
    task = world.create([member], max_write_calls=5)
    run = member.turn(binding(task))["run_id"]
    small = {"customer_id": "C-100234", "credit_limit": 500}
    assert member.invoke(WRITE, small, "t-1", run)["state"] == "executed"
    before = row_counts(world.sql, "bz_agent_task_invocations", "bz_agent_task_events", "bz_tool_journal")
    refused = member.invoke(WRITE, small, "t-2", run)
    assert refused["state"] == "rejected_before_dispatch" and refused["rate_limit"]["level"] == "tool"
    # No record, reservation, permit or journal row: only the refusal.
    assert row_counts(world.sql, "bz_agent_task_invocations", "bz_agent_task_events", "bz_tool_journal") == before
    assert counters(world, task["task_id"]) == (0, 1, 0)
    assert assert_ok(member.receipt_raw("t-2"))["result"]["state"] == "rejected_before_dispatch"
    assert refused["retry_after_ms"] in range(1, 60_001)
    world.sql("UPDATE bz_tool_rate_admissions SET admitted_at = admitted_at - interval '61 seconds'")
    assert assert_ok(member.resume_raw("t-2"))["state"] == "executed"
    assert counters(world, task["task_id"]) == (0, 2, 0)
    assert len(world.business.executions(WRITE)) == 2
