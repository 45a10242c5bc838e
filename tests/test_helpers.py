"""The shared checks in tests/helpers.py fail on every part of an answer they promise to check;
otherwise a test that leans on them could pass on a wrong answer."""
from __future__ import annotations

import json

import pytest
import requests

from tests.helpers import assert_error, assert_ok, cli_ok, cli_refused

# Pure Python: no database.
pytestmark = pytest.mark.any_server

ENVELOPE = {"error": "invalid_request", "message": "The body is not valid."}


def response(status: int, body, headers: dict | None = None) -> requests.Response:
    made = requests.Response()
    made.status_code = status
    made._content = json.dumps(body).encode()
    made.headers.update({"Content-Type": "application/json", "Cache-Control": "no-store", **(headers or {})})
    return made


def test_assert_error_returns_the_envelope_of_a_matching_refusal():
    assert assert_error(response(400, ENVELOPE), 400, "invalid_request") == ENVELOPE


@pytest.mark.parametrize("answer", [
    pytest.param(response(401, ENVELOPE), id="other-status"),
    pytest.param(response(400, {**ENVELOPE, "error": "not_found"}), id="other-code"),
    pytest.param(response(400, {"error": "invalid_request"}), id="no-message"),
    pytest.param(response(400, {**ENVELOPE, "message": ""}), id="empty-message"),
    pytest.param(response(400, {**ENVELOPE, "message": 7}), id="message-not-a-string"),
    pytest.param(response(400, ENVELOPE, {"Cache-Control": "max-age=60"}), id="cached"),
    pytest.param(response(400, ["invalid_request"]), id="not-an-envelope"),
])
def test_assert_error_fails_on_any_other_answer(answer):
    with pytest.raises(AssertionError):
        assert_error(answer, 400, "invalid_request")


def test_assert_ok_returns_the_body_of_a_matching_answer():
    assert assert_ok(response(201, {"id": 1}), 201) == {"id": 1}


@pytest.mark.parametrize("answer", [
    pytest.param(response(201, {"id": 1}), id="other-status"),
    pytest.param(response(200, {"id": 1}, {"Cache-Control": "max-age=60"}), id="cached"),
    pytest.param(response(200, {"id": 1}, {"Content-Type": "text/html"}), id="not-json"),
])
def test_assert_ok_fails_on_any_other_answer(answer):
    with pytest.raises(AssertionError):
        assert_ok(answer)


def test_cli_checks_fail_on_the_other_outcome():
    refusal = {"error": "admin_not_found", "message": "No such admin."}
    assert cli_ok((0, {"username": "ann"}, "")) == {"username": "ann"}
    assert cli_refused((1, "", refusal), "admin_not_found") == refusal
    for result in [(1, "", refusal), (0, "not a report", "")]:
        with pytest.raises(AssertionError):
            cli_ok(result)
    for result in [(0, {}, ""), (2, "", refusal), (1, "partial output", refusal),
                   (1, "", {**refusal, "error": "other"}), (1, "", {**refusal, "message": ""}),
                   (1, "", "Traceback (most recent call last)")]:
        with pytest.raises(AssertionError):
            cli_refused(result, "admin_not_found")
