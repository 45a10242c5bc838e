"""Issue 16 item 6: dot segments (`.` and `..`, raw or percent-encoded, alone or between slashes)
are refused as tool path parameters before dispatch: the invocation answers as any argument
refusal does (`rejected_before_dispatch`, an `invalid_arguments` reason naming the parameter,
never its value), and the business system on loopback receives nothing; nothing is queued for
approval or journaled. The same text in a query parameter, and ordinary values with dots, pass."""
from __future__ import annotations

import pytest

from tests.helpers import row_count
from tests.test_tool_invocations import BIG_CREDIT, Agent

DOTS = [".", "..", "%2e", "%2E", "%2e%2e", "%2E%2e", ".%2e", "%2e.", "%252e%252e", "../C-100234",
        "C-100234/..", "..%2fC-100234", "..\\C-100234", "x/./y"]


@pytest.fixture
def agent(server, governed) -> Agent:
    return Agent(server, governed)


def nothing_sent(business, sql) -> None:
    assert business.executions() == []
    assert row_count(sql, "bz_tool_journal") == 0
    assert row_count(sql, "bz_tool_approvals") == 0


@pytest.mark.parametrize("value", DOTS)
def test_a_dot_segment_path_parameter_is_refused_before_dispatch(agent, business, sql, value):
    result = agent.invoke("customer_get", {"customer_id": value})
    assert result["status"] == "rejected_before_dispatch", result
    assert result["reason"] == "invalid_arguments: customer_id: dot_segment"
    assert result["ok"] is False and result["auto_retry_allowed"] is False
    assert "result" not in result and "approval" not in result
    assert value not in sql("SELECT reason FROM bz_tool_invocations")[0][0]
    nothing_sent(business, sql)


@pytest.mark.parametrize("value", ["..", "%2e%2e"])
def test_a_write_needing_approval_is_refused_before_it_is_queued(agent, business, sql, value):
    result = agent.invoke("customer_update_credit_limit", {**BIG_CREDIT, "customer_id": value})
    assert result["status"] == "rejected_before_dispatch", result
    assert result["reason"] == "invalid_arguments: customer_id: dot_segment"
    nothing_sent(business, sql)


@pytest.mark.parametrize("value", ["..", "%2e%2e"])
def test_dots_in_a_query_parameter_are_only_text(agent, business, sql, value):
    result = agent.invoke("customer_search", {"q": value})
    assert result["status"] == "executed", result
    assert len(business.executions("customer_search")) == 1


@pytest.mark.parametrize("value", ["...", ".hidden", "a.b", "..C-100234", "C-100234."])
def test_values_that_only_contain_dots_reach_the_business_system(agent, business, sql, value):
    result = agent.invoke("customer_get", {"customer_id": value})
    assert result["status"] == "business_rejected", result  # no such customer, but it was asked
    [execution] = business.executions("customer_get")
    assert execution["status"] == 404
