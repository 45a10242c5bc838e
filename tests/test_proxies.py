"""Issue 16 item 6: `BAILING_TRUSTED_PROXIES`, the number of proxy hops whose `X-Forwarded-For`,
`-Proto` and `-Host` the hub believes. With the default 0 those headers are a client's claim and
change nothing: the client address is the socket's, the cookie is Secure only over real HTTPS.
With 1 (the TLS proxy the docs describe) the address, scheme and host are the proxy's report of
them, so the session cookie is Secure and sign-in failures are counted per real client address."""
from __future__ import annotations

import pytest
import requests

from admin_app.config import Settings
from tests.helpers import PASSWORD, make_admin
from tests.test_console_server import Browser, csrf_of

FORGED = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "hub.example"}


def _probe_route(application) -> None:
    @application.get("/_probe")  # what the application sees of the request
    def _probe():
        from flask import jsonify, request

        return jsonify(addr=request.remote_addr, secure=request.is_secure, host=request.host)


@pytest.fixture
def hub_with(hub_app, cli):
    """A live hub whose settings trust `hops` proxies, with admin `ann` (the CLI shares the database)."""
    make_admin(cli, "ann", "admin")
    return lambda hops: hub_app(setup=_probe_route, trusted_proxies=hops)


def sign_in(live, headers: dict, password: str = PASSWORD) -> requests.Response:
    """A sign-in through the proxy. The browser sees HTTPS, so it returns a Secure cookie that a
    client library would keep from plain HTTP: the cookie is carried by hand, as the proxy does."""
    browser = Browser(live.url)
    browser.http.headers.update(headers)
    page = browser.get("/console/login")
    assert page.status_code == 200, page.text
    cookie = session_cookie(page).split(";", 1)[0]
    return browser.post("/console/login", headers={"Cookie": cookie},
                        data={"username": "ann", "password": password, "csrf_token": csrf_of(page.text)})


def session_cookie(response: requests.Response) -> str:
    [cookie] = [c for c in response.raw.headers.getlist("Set-Cookie") if c.startswith("bailing_session=")]
    return cookie


def failure_keys(sql) -> set[str]:
    return {key for (key,) in sql("SELECT key FROM bz_sign_in_failures") if key.startswith("address:")}


def test_by_default_forwarded_headers_are_ignored(hub_with, sql):
    live = hub_with(0)
    seen = live.get("/_probe", headers=FORGED).json()
    assert seen == {"addr": "127.0.0.1", "secure": False, "host": live.url.removeprefix("http://")}
    signed = sign_in(live, FORGED)
    assert signed.status_code == 303, signed.text
    assert "secure" not in session_cookie(signed).lower()
    assert sign_in(live, FORGED, password="wrong password here").status_code == 401
    assert failure_keys(sql) == {"address:127.0.0.1"}


def test_behind_one_proxy_the_forwarded_client_scheme_and_host_count(hub_with, sql):
    live = hub_with(1)
    # The trusted proxy appends what it saw; anything the client sent before it is not believed.
    through_proxy = {"X-Forwarded-For": "198.51.100.66, 203.0.113.9", "X-Forwarded-Proto": "https",
                     "X-Forwarded-Host": "hub.example"}
    seen = live.get("/_probe", headers=through_proxy).json()
    assert seen == {"addr": "203.0.113.9", "secure": True, "host": "hub.example"}
    signed = sign_in(live, through_proxy)
    assert signed.status_code == 303, signed.text
    assert "; secure" in session_cookie(signed).lower()
    assert sign_in(live, through_proxy, password="wrong password here").status_code == 401
    assert failure_keys(sql) == {"address:203.0.113.9"}


def test_two_hops_take_the_address_the_outer_proxy_saw(hub_with):
    live = hub_with(2)
    seen = live.get("/_probe", headers={"X-Forwarded-For": "192.0.2.1, 198.51.100.7, 203.0.113.9",
                                        "X-Forwarded-Proto": "https, http"}).json()
    assert seen["addr"] == "198.51.100.7" and seen["secure"] is True


def test_without_forwarded_headers_a_trusting_hub_sees_the_socket(hub_with):
    live = hub_with(1)
    seen = live.get("/_probe").json()
    assert seen == {"addr": "127.0.0.1", "secure": False, "host": live.url.removeprefix("http://")}


@pytest.mark.parametrize("raw, expected", [(None, 0), ("", 0), ("0", 0), ("1", 1), ("3", 3)])
def test_the_setting_is_read_from_the_environment(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("BAILING_TRUSTED_PROXIES", raising=False)
    else:
        monkeypatch.setenv("BAILING_TRUSTED_PROXIES", raw)
    assert Settings.from_env().trusted_proxies == expected


@pytest.mark.parametrize("raw", ["-1", "one", "1.5"])
def test_a_bad_setting_stops_the_hub(monkeypatch, raw):
    monkeypatch.setenv("BAILING_TRUSTED_PROXIES", raw)
    with pytest.raises(SystemExit, match="BAILING_TRUSTED_PROXIES"):
        Settings.from_env()
