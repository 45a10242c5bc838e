"""Issue 19 item 5, server side: compressed console pages and assets (never the APIs),
fingerprinted static URLs cached for a year, and styled error pages outside the APIs.

Everything over real HTTP to a live server on loopback; the raw bytes on the wire are read with
`stream=True` and `raw.read(decode_content=False)`, since requests decompresses by itself."""
from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import brotli
import pytest
import requests

from tests.helpers import PASSWORD, make_admin

STATIC = Path(__file__).resolve().parent.parent / "static"
YEAR = "public, max-age=31536000, immutable"
STATIC_URL = re.compile(r'(?:href|src)="(/static/[^"]+)"')


def signed_in(server, username: str) -> requests.Session:
    http = requests.Session()
    page = http.get(server.url + "/console/login", timeout=30)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    response = http.post(server.url + "/console/login", timeout=30, allow_redirects=False,
                         data={"username": username, "password": PASSWORD, "csrf_token": token})
    assert response.status_code == 303, response.text
    return http


def wire(http: requests.Session, url: str, encoding: str, **kwargs) -> tuple[requests.Response, bytes]:
    """The response and its body exactly as sent (still compressed)."""
    response = http.get(url, headers={"Accept-Encoding": encoding, **kwargs.pop("headers", {})},
                        stream=True, timeout=60, **kwargs)
    return response, response.raw.read(decode_content=False)


def plain(response: requests.Response, raw: bytes) -> bytes:
    coding = response.headers.get("Content-Encoding")
    if coding == "br":
        return brotli.decompress(raw)
    if coding == "gzip":
        return gzip.decompress(raw)
    assert coding is None, coding
    return raw


@pytest.fixture
def transcript(hub) -> str:
    """A transcript of 40 turns (200 events) made through the agent APIs; returns its archive id."""
    archive = hub.archive("conv-delivery", "Dana at the desk")
    events: list[dict] = []
    for turn in range(40):
        events += hub.exchange(archive, len(events) + 1, f"turn-{turn}", f"Question number {turn} about order "
                               f"ORD-{turn:06d}?", f"Order ORD-{turn:06d} ships on Friday from WH-BER.")
    hub.append(archive, events)
    return archive


# ================================================================ compression

def test_a_transcript_page_is_compressed_at_least_four_times_with_br_and_gzip(hub, server, transcript):
    http = signed_in(server, hub.admin("auditor"))
    url = f"{server.url}/console/conversations/{transcript}"
    sizes = {}
    for coding in ("br", "gzip"):
        response, raw = wire(http, url, coding)
        assert response.status_code == 200
        assert response.headers["Content-Encoding"] == coding
        assert "Accept-Encoding" in response.headers["Vary"]
        assert int(response.headers["Content-Length"]) == len(raw)
        body = plain(response, raw)
        assert b"Order ORD-000039 ships on Friday" in body
        sizes[coding] = (len(body), len(raw))
    for coding, (whole, sent) in sizes.items():
        assert whole >= 4 * sent, (coding, whole, sent)


def test_without_accept_encoding_a_page_is_sent_plain(hub, server, transcript):
    http = signed_in(server, hub.admin("auditor"))
    response, raw = wire(http, f"{server.url}/console/conversations/{transcript}", "identity")
    assert response.status_code == 200 and "Content-Encoding" not in response.headers
    assert "Accept-Encoding" in response.headers["Vary"]
    assert b"Order ORD-000000 ships on Friday" in raw


def test_an_htmx_fragment_is_compressed(hub, server, transcript):
    http = signed_in(server, hub.admin("auditor"))
    response, raw = wire(http, f"{server.url}/console/conversations/{transcript}/events?after=0", "gzip",
                         headers={"HX-Request": "true"})
    assert response.status_code == 200 and response.headers["Content-Encoding"] == "gzip"
    assert b"Question number 0" in gzip.decompress(raw)


def test_static_files_are_compressed(server):
    for name in ("console.css", "vendor/htmx-2.0.4/htmx.min.js"):
        response, raw = wire(requests.Session(), f"{server.url}/static/{name}", "br, gzip")
        assert response.status_code == 200 and response.headers["Content-Encoding"] == "br"
        assert brotli.decompress(raw) == (STATIC / name).read_bytes()


def test_the_apis_are_never_compressed(hub, server, cli):
    from tests.helpers import admin_token

    token = admin_token(cli, "api-reader", "auditor")
    agent = {"Authorization": hub.headers()["Authorization"]}
    for path, headers in (("/agent-api/v1/tools?route=desk", agent),
                          ("/admin/api/conversation-audits", {"Authorization": f"Bearer {token}"}),
                          ("/agent-api/v1/nothing-here", {}),  # an error envelope too
                          ("/admin/api/agent-runs/unknown", {"Authorization": f"Bearer {token}"})):
        response, raw = wire(requests.Session(), server.url + path, "gzip, br, deflate", headers=headers)
        assert "Content-Encoding" not in response.headers, path
        assert "Accept-Encoding" not in response.headers.get("Vary", ""), path
        assert raw.startswith(b"{"), (path, raw[:40])


def test_the_transcript_download_stays_a_plain_stream(hub, server, transcript):
    http = signed_in(server, hub.admin("auditor"))
    response, raw = wire(http, f"{server.url}/console/conversations/{transcript}/export.json", "gzip, br")
    assert response.status_code == 200 and "Content-Encoding" not in response.headers
    assert raw.startswith(b"{") and b"ORD-000039" in raw


# ================================================================ fingerprinted static files

def _static_urls(html: str) -> list[str]:
    return STATIC_URL.findall(html)


def test_every_static_url_carries_the_hash_of_the_served_file(server, cli):
    make_admin(cli, "fingerprints", "admin")
    http = signed_in(server, "fingerprints")
    pages = [http.get(server.url + path, timeout=30).text
             for path in ("/console/login", "/console/conversations/", "/console/approvals/",
                          "/console/admins/", "/console/account", "/console/no-such-page")]
    urls = {url for page in pages for url in _static_urls(page)}
    assert {u.split("?")[0] for u in urls} >= {"/static/hub.css", "/static/console.css", "/static/console.js",
                                                "/static/favicon.svg", "/static/vendor/htmx-2.0.4/htmx.min.js"}
    for url in urls:
        path, _, query = url.partition("?")
        digest = hashlib.sha256((STATIC / path.removeprefix("/static/")).read_bytes()).hexdigest()[:16]
        assert query == f"v={digest}", url


def test_the_current_hash_is_cached_for_a_year_anything_else_briefly(server):
    page = requests.get(server.url + "/console/login", timeout=30).text
    current = next(url for url in _static_urls(page) if url.startswith("/static/console.css"))
    fresh = requests.get(server.url + current, timeout=30)
    assert fresh.status_code == 200 and fresh.headers["Cache-Control"] == YEAR
    for stale in ("/static/console.css?v=0000000000000000", "/static/console.css"):
        response = requests.get(server.url + stale, timeout=30)
        assert response.status_code == 200 and response.content == fresh.content
        cache = response.headers["Cache-Control"]
        assert "immutable" not in cache and "must-revalidate" in cache, (stale, cache)
    # Revalidation works: the ETag comes back as a 304.
    again = requests.get(server.url + "/static/console.css", timeout=30,
                         headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304


# ================================================================ error pages

def _assert_styled(response: requests.Response, status: int, heading: str) -> str:
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("text/html")
    html = response.text
    assert f"<h1>{heading}</h1>" in html
    assert re.search(r'<link rel="stylesheet" href="/static/console\.css\?v=[0-9a-f]{16}">', html)
    assert 'href="/console/"' in html  # the way home
    return html


def test_a_missing_page_is_a_styled_404_with_the_navigation_when_signed_in(server, cli):
    anonymous = requests.get(server.url + "/console/nothing-here", timeout=30)
    html = _assert_styled(anonymous, 404, "Not found")
    assert "<nav>" not in html and "Sign out" not in html
    assert _assert_styled(requests.get(server.url + "/nowhere", timeout=30), 404, "Not found")

    make_admin(cli, "lost", "auditor")
    html = _assert_styled(signed_in(server, "lost").get(server.url + "/console/nothing-here", timeout=30),
                          404, "Not found")
    assert "<nav>" in html and ">Conversations</a>" in html and "Sign out" in html


def test_a_400_shows_its_description_escaped(server):
    response = requests.get(server.url + "/console/login?q=%01<b>", timeout=30)
    html = _assert_styled(response, 400, "Bad request")
    assert "The request holds control characters." in html
    assert "<b>" not in html


def test_a_400_description_with_markup_is_escaped(hub_app):
    def setup(application):
        from flask import abort

        @application.get("/console/test-only/refuse")
        def refuse():
            abort(400, description='<img src=x onerror="alert(1)"> bad cursor')

    live = hub_app(setup=setup)
    html = _assert_styled(live.get("/console/test-only/refuse"), 400, "Bad request")
    assert '&lt;img src=x onerror=&#34;alert(1)&#34;&gt; bad cursor' in html
    assert "<img" not in html


def test_a_405_keeps_its_allow_header(server):
    response = requests.put(server.url + "/console/login", timeout=30)
    assert response.status_code in (400, 405)  # CSRF refuses unsafe console requests first
    response = requests.put(server.url + "/nowhere-else", timeout=30)
    assert response.status_code == 404
    response = requests.post(server.url + "/", timeout=30)
    _assert_styled(response, 405, "Method not allowed")
    assert "GET" in response.headers["Allow"]


def test_a_403_page_links_home(server, cli):
    make_admin(cli, "no-approvals", "support")
    response = signed_in(server, "no-approvals").get(server.url + "/console/approvals/", timeout=30)
    _assert_styled(response, 403, "Not allowed")


def test_a_500_shows_the_request_id_and_never_the_exception(hub_app):
    def setup(application):
        @application.get("/console/test-only/boom")
        def boom():
            raise RuntimeError("secret-detail-of-the-failure")

    live = hub_app(setup=setup)
    response = live.get("/console/test-only/boom", headers={"X-Request-Id": "support-trace-1"})
    html = _assert_styled(response, 500, "Something went wrong")
    assert response.headers["X-Request-Id"] == "support-trace-1"
    assert '<code class="request-id">support-trace-1</code>' in html
    assert "secret-detail" not in html and "RuntimeError" not in html
    assert response.headers["Cache-Control"] == "no-store"

    fresh = live.get("/console/test-only/boom")
    assert f'<code class="request-id">{fresh.headers["X-Request-Id"]}</code>' in fresh.text


def test_api_paths_keep_their_json_errors(server):
    for path in ("/admin/api/nothing-here", "/agent-api/v1/nothing-here"):
        response = requests.get(server.url + path, timeout=30)
        assert response.headers["Content-Type"].startswith("application/json"), path
        assert response.json()["error"] in ("not_found", "unauthorized")
