"""Issue 16 item 6: a loopback callback names a real port. Port 0 is where no callback server can
listen, so `POST /agent-auth/v1/authorizations` refuses it like any other unusable callback
(400 `invalid_request`) and writes nothing; ports 1 and 65535 are accepted."""
from __future__ import annotations

import pytest

from tests.helpers import assert_error
from tests.test_contract_agent_auth import hub  # noqa: F401 - `hub` is a fixture, used by name


@pytest.mark.parametrize("callback", ["http://127.0.0.1:0/callback", "http://[::1]:0/callback",
                                      "http://127.0.0.1:00/callback", "http://127.0.0.1:000000/cb"])
def test_a_callback_on_port_0_is_refused_and_writes_nothing(hub, callback):  # noqa: F811
    before = hub.counts()
    body = assert_error(hub.start(redirect_uri=callback)[0], 400, "invalid_request")
    assert [p["path"] for p in body["problems"]] == ["redirect_uri"]
    assert hub.counts() == before


@pytest.mark.parametrize("callback", ["http://127.0.0.1:1/callback", "http://[::1]:65535/callback"])
def test_a_callback_on_a_real_port_is_accepted(hub, callback):  # noqa: F811
    response, _, _ = hub.start(redirect_uri=callback)
    assert response.status_code == 201, response.text
    [(stored,)] = hub.sql("SELECT redirect_uri FROM bz_agent_authorizations")
    assert stored == callback
