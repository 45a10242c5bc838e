"""Issue 16, items 2, 4 and the console part of 6: console sessions kept on the server (sign-out,
sign out everywhere, idle and absolute timeouts, a new id at sign-in, no binding to client
headers), sign-in that a stranger cannot turn against a real user, and console input and output
hygiene. Over real HTTP where a browser would be; through the Flask test client where a test must
choose the client address or send bytes an HTTP client library will not."""
from __future__ import annotations

import hashlib
import re
import threading

import pytest
import requests
from argon2 import PasswordHasher

from admin_app import create_app
from admin_app.config import Settings
from admin_app.console import auth as console_auth
from admin_app.identity import sign_in_throttle as throttle
from admin_app.identity import admins as identity_admins
from tests.conftest import serve
from tests.helpers import NEW_PASSWORD, PASSWORD, make_admin, row_count
from tests.test_console_server import GENERIC, Browser, csrf_of, flashes, location, signed_in

SIGN_IN = "/console/login"


def console_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every console route but the sign-in form, path parameters filled in."""
    routes = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/console") or rule.endpoint == "console_auth.login":
            continue
        path = rule.rule
        for name in rule.arguments:
            kind = re.search(rf"<(?:([a-z]+):)?{name}>", path).group(1)
            value = ("nobody" if name == "username" else "1" if kind == "int" else
                     "00000000-0000-4000-8000-000000000000")
            path = re.sub(rf"<(?:[a-z]+:)?{name}>", value, path)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            routes.append((method, path))
    assert len(routes) > 20
    return routes


def to_sign_in(response) -> bool:
    return response.status_code in (302, 303) and location(response).startswith(SIGN_IN)


def copy_of(browser: Browser) -> Browser:
    """Another client holding the very same cookies (a cookie captured off the first)."""
    thief = Browser(browser.base)
    thief.http.cookies.update(browser.http.cookies)
    return thief


def open_sessions(sql, username: str) -> int:
    return sql("SELECT count(*) FROM bz_console_sessions s JOIN bz_admins a ON a.id = s.admin_id "
               "WHERE a.username = %s AND s.ended_at IS NULL", (username,))[0][0]


# ================================================================ server-side sessions

def test_an_old_cookie_after_sign_out_is_refused_on_every_console_route(app, server, cli, sql):
    make_admin(cli, "ann", "admin")
    owner = signed_in(server.url, "ann")
    token = owner.token()
    captured = {"Cookie": "bailing_session=" + owner.http.cookies["bailing_session"]}

    def replay(method: str, path: str, **kwargs):
        """The captured cookie, sent as it was, whatever the answers set."""
        headers = {**captured, **kwargs.pop("headers", {})}
        return requests.request(method, server.url + path, headers=headers, allow_redirects=False,
                                timeout=60, **kwargs)

    assert replay("GET", "/console/conversations/").status_code == 200  # it works while signed in
    out = owner.post("/console/logout", data={"csrf_token": token})
    assert out.status_code == 303
    assert sql("SELECT end_reason FROM bz_console_sessions") == [("signed_out",)]

    def state():
        return (row_count(sql, "bz_admin_events"), row_count(sql, "bz_console_sessions"),
                sql("SELECT username, role, disabled, password_hash FROM bz_admins"))

    before = state()
    for method, path in console_routes(app):
        if method == "GET":
            response = replay("GET", path)
            if path == "/console/":
                assert location(response) == SIGN_IN, path
            else:
                assert to_sign_in(response), (path, response.status_code)
        else:
            response = replay("POST", path, data={"csrf_token": token, "username": "eve", "role": "admin",
                                                  "password": NEW_PASSWORD, "decision": "approve"})
            assert to_sign_in(response) or response.status_code == 401, (path, response.status_code)
    fragment = replay("GET", "/console/approvals/count", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and fragment.headers["HX-Redirect"] == SIGN_IN
    assert state() == before


def test_the_cookie_holds_a_fresh_random_id_and_the_table_only_its_hash(app, server, cli, sql):
    make_admin(cli, "ann", "admin")
    browser = Browser(server.url)
    page = browser.get(SIGN_IN)
    planted = copy_of(browser)  # a cookie fixed before sign-in, as in session fixation
    response = browser.post(SIGN_IN, data={"username": "ann", "password": PASSWORD, "csrf_token": csrf_of(page.text)})
    assert response.status_code == 303

    serializer = app.session_interface.get_signing_serializer(app)
    session_id = serializer.loads(browser.http.cookies["bailing_session"])["_user_id"]
    assert isinstance(session_id, str) and len(session_id) >= 43
    stored = sql("SELECT token_hash FROM bz_console_sessions")
    assert stored == [(hashlib.sha256(session_id.encode()).hexdigest(),)]
    assert session_id not in str(sql("SELECT * FROM bz_console_sessions"))
    assert to_sign_in(planted.get("/console/conversations/"))

    again = signed_in(server.url, "ann")
    second = serializer.loads(again.http.cookies["bailing_session"])["_user_id"]
    assert second != session_id and open_sessions(sql, "ann") == 2


def test_an_idle_session_ends_after_the_idle_timeout(server, cli, sql):
    make_admin(cli, "ann", "auditor")
    browser = signed_in(server.url, "ann")
    sql("UPDATE bz_console_sessions SET last_seen_at = now() - interval '29 minutes'")
    assert browser.get("/console/conversations/").status_code == 200  # and this use counts as activity
    assert sql("SELECT last_seen_at > now() - interval '1 minute' FROM bz_console_sessions") == [(True,)]
    sql("UPDATE bz_console_sessions SET last_seen_at = now() - interval '31 minutes'")
    assert to_sign_in(browser.get("/console/conversations/"))


def test_a_session_ends_at_the_absolute_timeout_even_when_busy(server, cli, sql):
    make_admin(cli, "ann", "auditor")
    browser = signed_in(server.url, "ann")
    assert sql("SELECT expires_at - created_at FROM bz_console_sessions")[0][0].total_seconds() == 12 * 3600
    sql("UPDATE bz_console_sessions SET expires_at = now() - interval '1 second'")
    assert to_sign_in(browser.get("/console/conversations/"))


def test_timeouts_come_from_the_settings(db_url, tmp_path, cli, sql, monkeypatch):
    assert (Settings().console_idle_minutes, Settings().console_max_hours) == (30, 12)
    monkeypatch.setenv("BAILING_CONSOLE_IDLE_MINUTES", "5")
    monkeypatch.setenv("BAILING_CONSOLE_MAX_HOURS", "2")
    settings = Settings.from_env()
    assert (settings.console_idle_minutes, settings.console_max_hours) == (5, 2)
    monkeypatch.setenv("BAILING_CONSOLE_IDLE_MINUTES", "0")
    with pytest.raises(SystemExit):
        Settings.from_env()
    monkeypatch.delenv("BAILING_CONSOLE_IDLE_MINUTES")
    monkeypatch.delenv("BAILING_CONSOLE_MAX_HOURS")

    application = create_app({"database_url": db_url, "data_dir": tmp_path, "console_idle_minutes": 5,
                              "console_max_hours": 2})
    live = serve(application)
    try:
        make_admin(cli, "ann", "auditor")
        browser = signed_in(live.url, "ann")
        assert sql("SELECT expires_at - created_at FROM bz_console_sessions")[0][0].total_seconds() == 2 * 3600
        sql("UPDATE bz_console_sessions SET last_seen_at = now() - interval '6 minutes'")
        assert to_sign_in(browser.get("/console/conversations/"))
    finally:
        live.stop()
        application.extensions["bailing"].db.dispose()


def test_sign_out_everywhere_ends_every_session_of_the_admin_only(server, cli, sql):
    make_admin(cli, "ann", "auditor")
    make_admin(cli, "bea", "auditor")
    laptop, phone = signed_in(server.url, "ann"), signed_in(server.url, "ann")
    other = signed_in(server.url, "bea")

    out = laptop.post("/console/account/sign-out-everywhere", data={"csrf_token": laptop.token()})
    assert out.status_code == 303 and location(out) == SIGN_IN
    assert to_sign_in(laptop.get("/console/conversations/"))
    assert to_sign_in(phone.get("/console/conversations/"))
    assert other.get("/console/conversations/").status_code == 200
    assert open_sessions(sql, "ann") == 0 and open_sessions(sql, "bea") == 1
    assert sql("SELECT actor, action, target FROM bz_admin_events WHERE action = 'sessions_ended'") == [
        ("ann", "sessions_ended", "ann")]


def test_a_password_change_ends_the_other_sessions_and_keeps_this_one(server, cli, sql):
    make_admin(cli, "ann", "auditor")
    here, elsewhere = signed_in(server.url, "ann"), signed_in(server.url, "ann")
    out = here.post("/console/account/password", data={
        "csrf_token": here.token(), "current_password": PASSWORD, "new_password": NEW_PASSWORD,
        "confirm_password": NEW_PASSWORD})
    assert out.status_code == 303
    assert here.get("/console/conversations/").status_code == 200
    assert to_sign_in(elsewhere.get("/console/conversations/"))
    assert Browser(server.url).login("ann").status_code == 401
    assert Browser(server.url).login("ann", NEW_PASSWORD).status_code == 303
    assert sql("SELECT actor, action, target, detail->>'sessions_ended' FROM bz_admin_events "
               "WHERE action = 'password_changed'") == [("ann", "password_changed", "ann", "1")]


def test_a_wrong_current_password_changes_nothing(server, cli, sql):
    make_admin(cli, "ann", "auditor")
    here, elsewhere = signed_in(server.url, "ann"), signed_in(server.url, "ann")
    hash_before = sql("SELECT password_hash FROM bz_admins")
    events_before = row_count(sql, "bz_admin_events")
    out = here.post("/console/account/password", data={
        "csrf_token": here.token(), "current_password": "not the password", "new_password": NEW_PASSWORD,
        "confirm_password": NEW_PASSWORD})
    assert out.status_code == 303
    assert flashes(here.get("/console/account").text) == ["The current password is not right."]
    assert sql("SELECT password_hash FROM bz_admins") == hash_before
    assert row_count(sql, "bz_admin_events") == events_before
    assert elsewhere.get("/console/conversations/").status_code == 200


def test_the_session_is_not_bound_to_forwarded_for_or_user_agent(server, cli):
    make_admin(cli, "ann", "auditor")
    browser = Browser(server.url)
    page = browser.get(SIGN_IN, headers={"X-Forwarded-For": "198.51.100.7", "User-Agent": "first"})
    response = browser.post(SIGN_IN, headers={"X-Forwarded-For": "198.51.100.7", "User-Agent": "first"},
                            data={"username": "ann", "password": PASSWORD, "csrf_token": csrf_of(page.text)})
    assert response.status_code == 303
    for forwarded in ("203.0.113.9", "198.51.100.7, 10.0.0.1"):
        again = browser.get("/console/conversations/", headers={"X-Forwarded-For": forwarded, "User-Agent": "other"})
        assert again.status_code == 200
    assert browser.get("/console/conversations/").status_code == 200  # and the session was not dropped


# ================================================================ sign-in throttle

def sign_in(client, username: str, password: str, address: str):
    client.get(SIGN_IN, environ_overrides={"REMOTE_ADDR": address})
    with client.session_transaction() as s:
        token = s.get("csrf")
    return client.post(SIGN_IN, data={"username": username, "password": password, "csrf_token": token},
                       environ_overrides={"REMOTE_ADDR": address})


@pytest.fixture
def quick(monkeypatch):
    """Short delays, so that the rules and not the clock are under test."""
    monkeypatch.setattr(throttle, "ACCOUNT_DELAY_STEP", 0.01)
    monkeypatch.setattr(throttle, "ACCOUNT_MAX_DELAY", 0.03)
    monkeypatch.setattr(throttle, "ADDRESS_FREE_FAILURES", 3)


def test_delays_grow_with_failures_and_are_bounded():
    delays = [throttle.account_delay(n) for n in range(40)]
    assert delays[:throttle.ACCOUNT_FREE_FAILURES] == [0.0] * throttle.ACCOUNT_FREE_FAILURES
    assert delays == sorted(delays) and delays[throttle.ACCOUNT_FREE_FAILURES] > 0
    assert max(delays) == throttle.ACCOUNT_MAX_DELAY <= 5


def test_a_strangers_address_must_wait_but_the_owner_signs_in_from_their_own(app, cli, sql, quick):
    make_admin(cli, "ann", "admin")
    stranger, owner = app.test_client(), app.test_client()
    for _ in range(3):
        assert sign_in(stranger, "ann", "wrong guess", "203.0.113.66").status_code == 401
    counted = sql("SELECT key, failures FROM bz_sign_in_failures ORDER BY key")
    refused = sign_in(stranger, "ann", "another guess", "203.0.113.66")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "Try again in" in refused.get_data(as_text=True)
    assert sql("SELECT key, failures FROM bz_sign_in_failures ORDER BY key") == counted  # nothing checked

    right = sign_in(owner, "ann", PASSWORD, "198.51.100.20")
    assert right.status_code == 303
    assert sql("SELECT key FROM bz_sign_in_failures") == [("address:203.0.113.66",)]  # the account is clear


def test_the_address_wait_is_short_and_passes(app, cli, sql, quick):
    make_admin(cli, "ann", "admin")
    client = app.test_client()
    for _ in range(3):
        sign_in(client, "ann", "wrong guess", "203.0.113.66")
    assert sign_in(client, "ann", PASSWORD, "203.0.113.66").status_code == 429
    sql("UPDATE bz_sign_in_failures SET last_failure_at = last_failure_at - interval '2 seconds'")
    assert sign_in(client, "ann", PASSWORD, "203.0.113.66").status_code == 303
    assert throttle.ADDRESS_MAX_WAIT <= 60


def test_ipv6_addresses_are_counted_per_64(app):
    assert throttle.address_key("2001:db8:1:2::5") == throttle.address_key("2001:db8:1:2:ffff::9")
    assert throttle.address_key("2001:db8:1:3::5") != throttle.address_key("2001:db8:1:2::5")
    assert throttle.address_key("::ffff:198.51.100.7") == throttle.address_key("198.51.100.7")


def test_unknown_usernames_add_a_bounded_number_of_rows(app, cli, sql, quick, monkeypatch):
    cheap = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    monkeypatch.setattr(throttle, "_NO_ADMIN_HASH", cheap.hash("x"))
    monkeypatch.setattr(throttle, "ADDRESS_FREE_FAILURES", 10_000)
    client = app.test_client()
    names = 3 * throttle.UNKNOWN_BUCKETS
    for n in range(names):
        response = sign_in(client, f"nobody-{n}", "wrong", "203.0.113.66")
        assert response.status_code == 401 and GENERIC in response.get_data(as_text=True)
    rows = sql("SELECT key, failures FROM bz_sign_in_failures")
    assert len(rows) <= throttle.UNKNOWN_BUCKETS + 1
    assert sum(f for k, f in rows if k.startswith("unknown:")) == names
    assert not any("nobody" in k for k, _ in rows)


def test_old_failures_are_forgotten_and_pruned(app, cli, sql, quick):
    make_admin(cli, "ann", "admin")
    client = app.test_client()
    sign_in(client, "ann", "wrong", "203.0.113.66")
    sql("UPDATE bz_sign_in_failures SET last_failure_at = now() - interval '16 minutes'")
    sign_in(client, "ann", "wrong", "198.51.100.3")
    assert sorted(sql("SELECT key, failures FROM bz_sign_in_failures")) == sorted([
        ("address:198.51.100.3", 1), (sql("SELECT 'admin:' || id FROM bz_admins")[0][0], 1)])


def test_concurrent_password_checks_are_bounded_and_the_excess_gets_429(app, cli, sql, monkeypatch):
    make_admin(cli, "ann", "admin")
    slots = threading.BoundedSemaphore(1)
    monkeypatch.setattr(identity_admins, "_hash_slots", slots)
    monkeypatch.setattr(identity_admins, "HASH_WAIT_SECONDS", 0.05)
    assert identity_admins.MAX_CONCURRENT_HASHES <= 8
    slots.acquire()  # another sign-in is hashing right now
    try:
        busy = sign_in(app.test_client(), "ann", PASSWORD, "198.51.100.20")
        assert busy.status_code == 429
        assert busy.headers["Retry-After"] == str(identity_admins.BUSY_RETRY_AFTER_SECONDS)
        assert row_count(sql, "bz_console_sessions") == 0
        assert row_count(sql, "bz_sign_in_failures") == 0
    finally:
        slots.release()
    assert sign_in(app.test_client(), "ann", PASSWORD, "198.51.100.20").status_code == 303


def test_simultaneous_sign_ins_never_hash_more_than_the_bound_at_once(server, cli, monkeypatch):
    make_admin(cli, "ann", "admin")
    slow_verify, lock = console_auth.verify_password, threading.Lock()
    running, peak = [0], [0]

    def counted(stored, password):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            threading.Event().wait(0.3)  # a slow hash, so that the attempts overlap
            return slow_verify(stored, password)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(console_auth, "verify_password", counted)
    monkeypatch.setattr(identity_admins, "HASH_WAIT_SECONDS", 0.1)
    browsers = [Browser(server.url) for _ in range(3 * identity_admins.MAX_CONCURRENT_HASHES)]
    forms = [{"username": "ann", "password": PASSWORD, "csrf_token": csrf_of(b.get(SIGN_IN).text)} for b in browsers]
    results: list = [None] * len(browsers)
    start = threading.Barrier(len(browsers))

    def attempt(n: int) -> None:
        start.wait()
        results[n] = browsers[n].post(SIGN_IN, data=forms[n])

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(len(browsers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    statuses = sorted(r.status_code for r in results)
    assert set(statuses) == {303, 429}, statuses
    assert all(r.headers["Retry-After"] == str(identity_admins.BUSY_RETRY_AFTER_SECONDS)
               for r in results if r.status_code == 429)
    assert 1 <= peak[0] <= identity_admins.MAX_CONCURRENT_HASHES


def test_a_disabled_admin_cannot_sign_in_even_with_the_right_password(app, cli, sql):
    make_admin(cli, "ann", "admin")
    cli("admins", "disable", "ann")
    response = sign_in(app.test_client(), "ann", PASSWORD, "198.51.100.20")
    assert response.status_code == 401 and GENERIC in response.get_data(as_text=True)
    assert row_count(sql, "bz_console_sessions") == 0


def test_an_attempt_finds_its_admin_and_loses_it_once_disabled(app, cli):
    make_admin(cli, "ann", "admin")
    database = app.extensions["bailing"].db
    with database.session() as db:
        known = throttle.attempt(db, "ann", "198.51.100.20")
        unknown = throttle.attempt(db, "nobody", "198.51.100.20")
    assert known.account == f"admin:{known.admin_id}" and known.address == "address:198.51.100.20"
    assert known.password_hash.startswith("$argon2") and known.password_hash != unknown.password_hash
    assert unknown.admin_id is None and unknown.account.startswith("unknown:")
    assert not identity_admins.verify_password(unknown.password_hash, PASSWORD)
    with database.session() as db:
        assert throttle.admin_to_sign_in(db, known).username == "ann"
        assert throttle.admin_to_sign_in(db, unknown) is None
    cli("admins", "disable", "ann")
    with database.session() as db:
        assert throttle.admin_to_sign_in(db, known) is None


# ================================================================ input and output hygiene

CONTROL = ["\x00", "\x01", "\n", "\x1b", "\x7f"]


@pytest.mark.parametrize("char", CONTROL, ids=[f"{ord(c):02x}" for c in CONTROL])
def test_control_characters_in_a_query_answer_400(server, cli, char):
    make_admin(cli, "ann", "admin")
    browser = signed_in(server.url, "ann")
    for path in ("/console/conversations/", "/console/runs/", "/console/approvals/", "/console/access-log",
                 "/console/admins/", SIGN_IN):
        assert browser.get(path, params={"q": f"a{char}b"}).status_code == 400, path
        assert browser.get(path, params={f"k{char}": "v"}).status_code == 400, path
    assert Browser(server.url).get(SIGN_IN, params={"next": f"/console/{char}"}).status_code == 400


def test_next_with_an_encoded_newline_never_answers_500(server, cli):
    make_admin(cli, "ann", "admin")
    browser = signed_in(server.url, "ann")
    for raw in ("/console/%0A", "/console/%0D%0AX-Injected:%201", "/console/%00"):
        response = browser.http.get(server.url + SIGN_IN + "?next=" + raw, allow_redirects=False)
        assert response.status_code in (302, 303, 400), raw
        assert "X-Injected" not in response.headers


def test_a_newline_at_the_end_of_next_is_not_a_console_path(server, cli):
    assert console_auth.SAFE_NEXT.fullmatch("/console/\n") is None


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b"], ids=["nul", "soh", "esc"])
def test_control_characters_in_a_sign_in_form_answer_400_and_count_nothing(app, cli, sql, char):
    make_admin(cli, "ann", "admin")
    client = app.test_client()
    client.get(SIGN_IN)
    with client.session_transaction() as s:
        token = s["csrf"]
    for field in ("username", "password", "next"):
        data = {"username": "ann", "password": PASSWORD, "next": "/console/", "csrf_token": token}
        data[field] = f"a{char}b"
        assert client.post(SIGN_IN, data=data).status_code == 400, field
    assert row_count(sql, "bz_sign_in_failures") == 0 and row_count(sql, "bz_console_sessions") == 0


def test_line_breaks_in_a_form_field_are_allowed(app, cli, sql):
    make_admin(cli, "ann", "admin")
    response = sign_in(app.test_client(), "ann", "two\r\nlines of wrong password", "198.51.100.20")
    assert response.status_code == 401


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x7f"], ids=["nul", "soh", "del"])
def test_control_characters_in_a_header_answer_400(app, char):
    client = app.test_client()
    for path in (SIGN_IN, "/console/conversations/", "/console/"):
        assert client.get(path, headers={"X-Anything": f"a{char}b"}).status_code == 400, path
    assert client.get(SIGN_IN, headers={"X-Anything": "a\tb"}).status_code == 200


def test_every_console_response_is_no_store_and_varies_on_htmx(app, server, cli):
    make_admin(cli, "ann", "admin")
    signed = signed_in(server.url, "ann")
    anonymous = Browser(server.url)
    checked = 0
    for browser in (signed, anonymous):
        for method, path in console_routes(app) + [("GET", SIGN_IN), ("GET", "/console/no-such-page")]:
            if method != "GET":
                continue
            for headers in ({}, {"HX-Request": "true"}):
                response = browser.get(path, headers=headers)
                assert response.headers.get("Cache-Control") == "no-store", (path, response.status_code)
                vary = {v.strip().lower() for v in response.headers.get("Vary", "").split(",")}
                assert "hx-request" in vary, (path, response.headers.get("Vary"))
                checked += 1
    refused = anonymous.post("/console/logout")  # a CSRF refusal is a console response too
    assert refused.status_code == 400 and refused.headers["Cache-Control"] == "no-store"
    assert checked > 60
