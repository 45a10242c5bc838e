"""Issue 19 item 5 in a real browser: every console page passes axe-core at 1280x800 and at
375x800 (a phone), never scrolls sideways at 375 px, keeps AA contrast in the dark colour scheme
too, and asks only for fingerprinted static files.

The data comes from the real agent APIs (tests/browser.py's Hub); each page is visited as a role
that may see it."""
from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import expect

from tests.browser import MERGE, UI

STATIC = Path(__file__).resolve().parent.parent / "static"
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 800}


def overflow(view: UI) -> int:
    return int(view.page.evaluate("document.scrollingElement.scrollWidth"))


def contrast_in_dark(view: UI, what: str) -> None:
    """axe-core's color-contrast rule with the page in the dark colour scheme."""
    from axe_playwright_python.sync_playwright import Axe

    view.page.emulate_media(color_scheme="dark")
    try:
        results = Axe().run(view.page, options={"runOnly": ["color-contrast"]})
    finally:
        view.page.emulate_media(color_scheme="light")
    violations = results.response.get("violations", [])
    assert violations == [], (what, [(v["id"], [n["target"] for n in v["nodes"]][:5]) for v in violations])


def check(view: UI, what: str) -> None:
    """The page as it is now: axe clean wide, then at 375 px with no sideways scroll, and dark."""
    page = view.page
    page.set_viewport_size(WIDE)
    page.wait_for_load_state("networkidle")
    view.axe(f"{what} at 1280")
    page.set_viewport_size(PHONE)
    assert overflow(view) <= PHONE["width"], (what, overflow(view))
    view.axe(f"{what} at 375")
    contrast_in_dark(view, what)
    page.set_viewport_size(WIDE)


def visit(view: UI, path: str, heading: str, status: int = 200) -> None:
    view.goto(path, status)
    expect(view.page.locator("h1")).to_contain_text(heading)
    check(view, path)


def watch_static(view: UI) -> list[str]:
    asked: list[str] = []
    view.page.on("request", lambda r: asked.append(r.url) if "/static/" in r.url else None)
    return asked


def assert_fingerprinted(urls: list[str]) -> None:
    assert urls, "no static file was asked for"
    for url in urls:
        parts = urlsplit(url)
        digest = hashlib.sha256((STATIC / parts.path.removeprefix("/static/")).read_bytes()).hexdigest()[:16]
        assert parse_qs(parts.query).get("v") == [digest], url


def test_every_console_page_passes_axe_and_fits_a_phone(hub, ui):
    archive_id, run_id = hub.traced_conversation()
    merge = hub.approval("customer_merge", MERGE)
    admin = hub.admin("admin")

    view = ui()
    asked = watch_static(view)
    visit(view, "/console/login", "Sign in")
    view.sign_in(admin)
    for path, heading in [
        ("/console/conversations/", "Conversations"),
        ("/console/conversations/?q=credit", "Conversations"),
        (f"/console/conversations/{archive_id}", "Conversation conv-acme-credit"),
        (f"/console/conversations/{archive_id}?view=markdown&at=3", "Conversation conv-acme-credit"),
        (f"/console/conversations/{archive_id}/search?q=credit", "Search in conversation conv-acme-credit"),
        ("/console/runs/", "Runs"),
        ("/console/runs/unresolved", "Unresolved calls"),
        (f"/console/runs/{run_id}", "Run"),
        ("/console/approvals/", "Pending approvals"),
        ("/console/approvals/history", "Decided approvals"),
        ("/console/access-log", "Access log"),
        ("/console/admins/", "Admins"),
        (f"/console/admins/{admin}", admin),
        ("/console/account", "Your account"),
    ]:
        visit(view, path, heading)

    visit(view, f"/console/approvals/{merge['id']}", "Approval: customer_merge")
    expect(view.page.locator("[data-snapshot-body] details").first).to_be_visible()
    check(view, "approval with its snapshot as a tree")
    view.page.get_by_role("button", name="Raw (exact bytes)").click()
    expect(view.page.locator("pre[data-snapshot]")).to_be_visible()
    check(view, "approval with its snapshot's exact bytes")

    view.goto(f"/console/conversations/{archive_id}")
    view.page.set_viewport_size(PHONE)
    view.shot("phone-transcript.png")
    view.page.set_viewport_size(WIDE)
    view.watch.allowed_statuses.add(404)
    visit(view, "/console/no-such-page", "Not found", status=404)
    view.shot("error-404.png", full_page=False)
    assert_fingerprinted(asked)
    view.watch.assert_clean()


def test_error_pages_pass_axe_signed_out_and_for_a_role_without_permission(hub, ui):
    support = hub.admin("support")
    view = ui()
    asked = watch_static(view)
    view.watch.allowed_statuses.update({400, 403, 404})
    visit(view, "/console/no-such-page", "Not found", status=404)
    visit(view, "/console/login?q=%01", "Bad request", status=400)
    expect(view.page.get_by_text("The request holds control characters.")).to_be_visible()
    view.sign_in(support)
    visit(view, "/console/approvals/", "Not allowed", status=403)
    view.page.get_by_role("link", name="Back to the console").click()
    expect(view.page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    assert_fingerprinted(asked)
    view.watch.assert_clean()
