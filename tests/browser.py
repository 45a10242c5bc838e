"""The console's browser harness, shared by every browser test file: Debian's Chromium driven by
Playwright with `executable_path` (never `playwright install`), a watch that fails a test on any
page error, console error, Content-Security-Policy violation or dialog, an accessibility check
(axe-core), and the hub fed through its real agent APIs over HTTP. conftest.py makes the
fixtures (`browser`, `ui`, `hub`) available to every test file."""
from __future__ import annotations

import os
import re
import shutil
import uuid

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from admin_app.config import PROJECT_ROOT
from tests.helpers import PASSWORD, make_admin, session_bearer


SHOTS = PROJECT_ROOT / "docs" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
AUDITS = "/agent-api/v1/conversation-audits"
ROUTE = "desk"
XSS = ('<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
       '<svg onload="alert(3)"></svg>')
MERGE = {"source_customer_id": "C-100235", "target_customer_id": "C-100234",
         "reason": "Same company, registered twice under two VAT numbers"}
CREDIT = {"customer_id": "C-100234", "credit_limit": 20000}
ADJUST = {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": -150, "reason": "write_off"}
# Which navigation links and pages each role may see.
NAV = {"Conversations": "runs:read", "Runs": "runs:read", "Dead letters": "runs:read", "Approvals": "approvals:read",
       "Access log": "audit:read", "Records": "audit:read", "Tasks": "clients:read", "Admins": "admins:manage",
       "Pause": "system:write"}
ROLES = {
    "admin": {"runs:read", "audit:read", "approvals:read", "approvals:decide", "admins:manage", "clients:read",
              "clients:write", "system:write"},
    "auditor": {"runs:read", "audit:read"},
    "approver": {"approvals:read", "approvals:decide"},
    "support": {"runs:read"},
}



# ================================================================ the browser

@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); the console's "
                    "browser tests need it and never run `playwright install`.")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Watch:
    """Everything that must not happen on a console page: page errors, console errors, CSP
    violations (reported through a binding that CSP cannot block) and dialogs."""

    def __init__(self, context, page: Page):
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []
        self.csp: list[dict] = []
        self.dialogs: list[str] = []
        self.allowed_statuses: set[int] = set()
        self.favicon_errors: list[str] = []
        context.expose_binding("__bzReportCsp", lambda source, report: self.csp.append(report))
        context.add_init_script("""
            document.addEventListener("securitypolicyviolation", function (e) {
              window.__bzReportCsp({directive: e.violatedDirective, blocked: e.blockedURI,
                                    sample: e.sample, source: e.sourceFile, line: e.lineNumber});
            }, true);
        """)
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        page.on("console", self._console)
        page.on("dialog", self._dialog)

    def _console(self, message) -> None:
        if message.type != "error":
            return
        text = message.text
        if (message.location or {}).get("url", "").endswith("/favicon.ico"):
            # The browser's own request for /favicon.ico, which the console does not serve: a
            # defect of its own, shown by test_the_browser_finds_every_resource_it_asks_for.
            self.favicon_errors.append(text)
            return
        # A page the test means to be refused (403 Not allowed, 401 on a wrong password) is
        # reported by Chromium as a failed resource; nothing else is tolerated.
        status = re.search(r"the server responded with a status of (\d{3})", text)
        if status and int(status.group(1)) in self.allowed_statuses:
            return
        self.console_errors.append(text)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.dialogs == [], self.dialogs
        assert self.page_errors == [], self.page_errors
        assert self.csp == [], self.csp
        assert self.console_errors == [], self.console_errors


class UI:
    def __init__(self, browser, base: str, **context_options):
        self.base = base
        self.context = browser.new_context(viewport=VIEWPORT, **context_options)
        self.page = self.context.new_page()
        self.page.set_default_timeout(10_000)
        self.watch = Watch(self.context, self.page)

    def goto(self, path: str, status: int = 200):
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == status, (path, response and response.status)
        return response

    def sign_in(self, username: str, password: str = PASSWORD) -> None:
        page = self.page
        self.goto("/console/login")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()

    def sign_out(self) -> None:
        with self.page.expect_navigation():
            self.page.get_by_role("button", name="Sign out").click()
        expect(self.page.get_by_role("heading", name="Sign in")).to_be_visible()

    def shot(self, name: str, full_page: bool = True) -> None:
        """Screenshots for the README, written only when asked for (BAILING_SCREENSHOTS=1), so a
        test run does not change tracked files."""
        if os.environ.get("BAILING_SCREENSHOTS") != "1":
            return
        SHOTS.mkdir(parents=True, exist_ok=True)
        # A page with htmx settles before the picture: no request in flight.
        self.page.wait_for_load_state("networkidle")
        self.page.screenshot(path=str(SHOTS / name), full_page=full_page)
        assert (SHOTS / name).stat().st_size > 10_000

    def scroll_transcript_to_end(self) -> None:
        """Scroll an open transcript down page by page until "End of transcript." shows: each
        scroll to the bottom reveals the "Loading more…" row, which fetches the next page."""
        page = self.page
        end = page.get_by_text("End of transcript.")
        events = page.locator("[data-sequence]")
        seen = events.count()
        for _ in range(40):
            if end.is_visible():
                break
            page.mouse.wheel(0, 40_000)
            page.keyboard.press("End")
            page.wait_for_function("n => document.querySelectorAll('[data-sequence]').length > n "
                                   "|| document.querySelector('.transcript p.end') !== null", arg=seen)
            seen = events.count()
        expect(end).to_be_visible()

    def axe(self, what: str = "") -> None:
        """axe-core on the page as it is now: no violation of any rule it runs. (Playwright
        evaluates the script over the DevTools protocol, so the page's CSP does not block it.)"""
        from axe_playwright_python.sync_playwright import Axe

        results = Axe().run(self.page)
        violations = results.response.get("violations", [])
        assert violations == [], (what or self.page.url, [
            (v["id"], v["impact"], [node["target"] for node in v["nodes"]][:5]) for v in violations])

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def ui(browser, server):
    """A fresh browser context (1280x800, its own cookies and storage) on the live server."""
    opened: list[UI] = []

    def open_ui(**context_options) -> UI:
        instance = UI(browser, server.url, **context_options)
        opened.append(instance)
        return instance

    yield open_ui
    for instance in opened:
        instance.close()


# ================================================================ data through the real APIs

class Hub:
    """The hub over the demo business system (the `governed` fixture: route `desk`, app
    `ops-app`), fed through its agent APIs over HTTP."""

    def __init__(self, server, cli, sql, session: dict):
        self.server, self.cli, self.sql, self.session = server, cli, sql, session
        self.admins: dict[str, str] = {}
        self.contexts: dict[str, dict] = {}
        self._revision: str | None = None

    # ---- console users
    def admin(self, role: str, name: str | None = None) -> str:
        name = name or f"{role}-user"
        make_admin(self.cli, name, role)
        self.admins[name] = role
        return name

    # ---- agent side
    def headers(self) -> dict:
        return session_bearer(self.session)

    def turn(self, conversation: str, turn_id: str, user_input: str) -> dict:
        """A real turn; the context exactly as the agent received it."""
        response = self.server.post(f"/agent-api/v1/workspaces/{ROUTE}/turns", headers=self.headers(), json={
            "client_conversation_id": conversation, "client_turn_id": turn_id,
            "user_message_id": f"msg-{turn_id}", "user_input": user_input})
        assert response.status_code == 200, response.text
        self.contexts[response.json()["run_id"]] = response.json()
        return response.json()

    def complete(self, run_id: str, content: str) -> None:
        response = self.server.post(f"/agent-api/v1/runs/{run_id}/complete", headers=self.headers(), json={
            "assistant_message_id": f"asst-{run_id[:8]}", "status": "completed", "content": content,
            "model": "local-model", "runtime": "local-runtime",
            "usage": {"input_tokens": 120, "cached_input_tokens": 80, "output_tokens": 30,
                      "total_tokens": 150, "tool_calls": 2}})
        assert response.status_code == 200, response.text

    def archive(self, conversation: str, label: str | None = None) -> str:
        body = {"client_archive_id": str(uuid.uuid4()), "client_conversation_id": conversation,
                "route": ROUTE, "member_session_ids": [self.session["session_id"]]}
        if label:
            body["member_labels"] = {self.session["session_id"]: label}
        response = self.server.post(AUDITS, headers=self.headers(), json=body)
        assert response.status_code == 200, response.text
        conversation_id = response.json()["conversation"]["conversation_id"]
        assert response.json()["conversation"]["state"] == "ready"
        return conversation_id

    def append(self, conversation_id: str, events: list[dict]) -> None:
        for start in range(0, len(events), 50):
            batch = events[start:start + 50]
            response = self.server.post(f"{AUDITS}/{conversation_id}/events", headers=self.headers(),
                                        json={"events": batch})
            assert response.status_code == 200, response.text
            assert response.json()["last_sequence"] == batch[-1]["sequence"]

    def revision(self) -> str:
        if self._revision is None:
            response = self.server.get("/agent-api/v1/tools", params={"route": ROUTE}, headers=self.headers())
            assert response.status_code == 200, response.text
            self._revision = response.json()["capability_revision"]
        return self._revision

    def invoke(self, tool: str, arguments: dict, run_id: str | None = None) -> dict:
        envelope = {"invocation_id": uuid.uuid4().hex + uuid.uuid4().hex, "route": ROUTE,
                    "capability_revision": self.revision(), "tool": tool, "arguments": arguments}
        if run_id:
            envelope["run_id"] = run_id
        response = self.server.post("/agent-api/v1/tool-invocations", headers=self.headers(), json=envelope)
        assert response.status_code == 200, response.text
        return response.json()

    def approval(self, tool: str, arguments: dict, run_id: str | None = None) -> dict:
        out = self.invoke(tool, arguments, run_id)
        assert out["status"] == "awaiting_approval", out
        return out["approval"]

    # ---- whole scenes
    def exchange(self, conversation_id: str, first: int, turn_id: str, question: str, answer: str,
                 run_id: str | None = None) -> list[dict]:
        """One completed turn as archive events (with its run link if given), from `first`."""
        events = [{"kind": "turn_start"}, {"kind": "user_message", "content": question}]
        if run_id:
            events.append({"kind": "run_link", "run_id": run_id, "member_session_id": self.session["session_id"]})
        events += [{"kind": "assistant_message", "content": answer}, {"kind": "turn_end", "status": "completed"}]
        for offset, event in enumerate(events):
            event.update(event_id=f"{turn_id}-{offset}", sequence=first + offset, client_turn_id=turn_id)
        return events

    def traced_conversation(self, conversation: str = "conv-acme-credit", question: str | None = None,
                            label: str = "Dana at the operations desk",
                            answer: str | None = None) -> tuple[str, str]:
        """A real run (turn, a read tool call, a write awaiting approval, completion) archived with
        its run link; returns (archive id, run id)."""
        question = question or "Can ACME's credit limit go up to 20,000? Check their record first."
        run_id = self.turn(conversation, "turn-1", question)["run_id"]
        read = self.invoke("customer_get", {"customer_id": "C-100234"}, run_id)
        assert read["status"] == "executed", read
        self.approval("customer_update_credit_limit", CREDIT, run_id)
        answer = answer or "ACME has paid on time for two years. I asked for approval to raise the limit to 20,000."
        self.complete(run_id, answer)
        archive_id = self.archive(conversation, label)
        events = self.exchange(archive_id, 1, "turn-1", question, answer, run_id)
        events += self.exchange(archive_id, len(events) + 1, "turn-2", "Thanks. Anything else to check?",
                                "The open order ORD-000001 ships on Friday; nothing else is pending.")
        self.append(archive_id, events)
        return archive_id, run_id


@pytest.fixture
def hub(governed, server, cli, sql) -> Hub:
    return Hub(server, cli, sql, governed)


