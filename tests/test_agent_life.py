"""A whole agent life through the Agent Client SDK, against the demo hub on loopback.

The hub, the demo business system (CRM and ERP operations, consent pages) and the demo
configuration are served as `bailing-admin demo` serves them. Every agent-side request goes
through `admin_app.agent_sdk`, which refuses any answer off the wire contract, so a drift of the
hub from the contract fails this test at the step that drifted. Only the approver's decision is
a raw admin API call, as the console makes it."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid

import pytest
import requests

from admin_app.agent_sdk import AgentClient, HubError, SessionStore, login
from admin_app.config import PROJECT_ROOT
from admin_app.demo.approver import ConsentPage
from admin_app.demo.command import prepare
from admin_app.demo.consent import DEMO_USERS
from admin_app.demo.seed import demo_invocation_id

from .conftest import serve
from .helpers import row_counts


class DemoHub:
    def __init__(self, live, business_url: str, admin_token: str):
        self.live, self.business_url, self.admin_token = live, business_url, admin_token
        self.url = live.url
        self.answers: list[requests.Response] = []  # every answer the SDK read from the hub
        self.http = requests.Session()
        self.http.hooks["response"].append(lambda response, *args, **kwargs: self.answers.append(response))

    def check_envelopes(self) -> None:
        """Every hub answer, success or refusal: JSON with its charset, and never cached."""
        hub_answers = [r for r in self.answers if r.url.startswith(self.url)]
        assert hub_answers
        for response in hub_answers:
            assert response.headers.get("Cache-Control") == "no-store", response.url
            assert response.headers.get("Content-Type") == "application/json; charset=utf-8", response.url
            if response.url == self.url + "/agent-auth/v1/token":
                assert response.headers.get("Pragma") == "no-cache"
        assert any(r.url == self.url + "/agent-auth/v1/token" for r in hub_answers)

    def admin(self, method: str, path: str, **kwargs) -> dict:
        response = self.live.request(method, path, headers={"Authorization": f"Bearer {self.admin_token}"}, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def sign_in(self, tmp_path, name: str, client: str, route: str, user: str) -> AgentClient:
        store = SessionStore(tmp_path / "agents" / f"{name}.json")
        consent = ConsentPage(user, DEMO_USERS[user]["password"])
        record = login(self.url, client, [route], device_label=name, store=store, open_url=consent, timeout=60,
                       http=self.http)
        assert consent.pages[0].url.startswith(self.business_url + "/consent/")  # the real consent page
        assert record["allowed_routes"] == [route]
        return AgentClient(store, self.http)


@pytest.fixture
def demo(app, tmp_path):
    saved = {k: os.environ.get(k) for k in ("DEMO_CRM_SECRET", "DEMO_ERP_SECRET")}
    live = serve(app)
    hub = app.extensions["bailing"]
    _, business, business_url, admin_token = prepare(hub, tmp_path / "demo", 0, live.url, False,
                                                     echo=lambda message: None)
    yield DemoHub(live, business_url, admin_token)
    business.shutdown()
    live.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def by_name(tools) -> dict:
    return {t.name: t for t in tools}


def visible_events(member: str, run_id: str, turn: str, first: int, count: int) -> list[dict]:
    """`count` events of one turn starting at sequence `first`: start, messages, the run link, end."""
    events = [{"event_id": f"{turn}-start", "sequence": first, "client_turn_id": turn, "kind": "turn_start"},
              {"event_id": f"{turn}-link", "sequence": first + 1, "client_turn_id": turn, "kind": "run_link",
               "run_id": run_id, "member_session_id": member}]
    for n in range(count - 3):
        kind = "user_message" if n % 2 == 0 else "assistant_message"
        events.append({"event_id": f"{turn}-m{n}", "sequence": first + 2 + n, "client_turn_id": turn, "kind": kind,
                       "content": f"  Message {n} of the long review, kept exactly as shown.\n"})
    events.append({"event_id": f"{turn}-end", "sequence": first + count - 1, "client_turn_id": turn,
                   "kind": "turn_end", "status": "completed"})
    return events


REFRESHER = ("import sys; from admin_app.agent_sdk import SessionStore; "
             "print(SessionStore(sys.argv[1]).access_token(force=True, stale=sys.argv[2]))")


def test_a_whole_agent_life_through_the_sdk(demo, tmp_path):
    # ---- login through the consent page; the session file is the user's alone
    alice = demo.sign_in(tmp_path, "alice-desktop", "crm-demo", "customers", "alice")
    assert stat.S_IMODE(os.stat(alice.store.path).st_mode) == 0o600

    # ---- session view: the browser's user, not anything the agent said
    view = alice.session()
    assert view.principal["id"] == "alice" and view.principal["tenant"] == "tenant-7"
    assert view.on_behalf_of == "tenant-7:alice" and view.allowed_routes == ("customers",)
    assert view.device_label == "alice-desktop"

    # ---- workspaces and bootstrap
    assert [w.route for w in alice.workspaces()] == ["customers"]
    profile = alice.bootstrap("customers")
    assert profile.workspace.route == "customers" and "customer desk" in profile.instructions
    assert profile.capabilities.writes >= 1 and profile.capabilities.approval_required >= 1
    info = alice.system_info("customers")
    assert info.availability == "unknown" and info.metadata_status in ("configured", "missing")

    # ---- a turn
    turn = alice.turn("customers", client_conversation_id="life-1", client_turn_id="t1", user_message_id="life-1-u1",
                      user_input="Find ACME and raise its credit limit to 50,000 EUR.",
                      page_context={"title": "Customers"}, renderers=["markdown"])
    assert turn.capability_revision == profile.capabilities.revision
    assert 1 <= len(turn.active_tools) <= profile.capabilities.active_limit
    again = alice.turn("customers", client_conversation_id="life-1", client_turn_id="t1", user_message_id="life-1-u1",
                       user_input="Find ACME and raise its credit limit to 50,000 EUR.",
                       page_context={"title": "Customers"}, renderers=["markdown"])
    assert again.run_id == turn.run_id  # the same key resolves to the same frozen run

    # ---- knowledge on demand: capabilities, hints, a bounded read, and a negotiated turn
    shelf = alice.knowledge_capabilities("customers")
    assert shelf.enabled and shelf.documents >= 1 and "on_demand" in shelf.delivery_modes
    hints = alice.knowledge_search("customers", "credit limit", limit=3)
    assert 1 <= len(hints) <= 3
    piece = alice.knowledge_read("customers", hints[0].chunk_id)
    assert len(piece.content) == hints[0].content_chars and not piece.truncated
    hinted = alice.turn("customers", client_conversation_id="life-kb", client_turn_id="t1",
                        user_message_id="life-kb-u1", user_input="What is the credit policy?",
                        knowledge_delivery="on_demand")
    assert hinted.knowledge_delivery == "on_demand"

    # ---- search and tool detail
    found = alice.search("customers", "credit limit", run_id=turn.run_id)
    assert found.capability_revision == turn.capability_revision
    assert "customer_update_credit_limit" in by_name(found.tools)
    assert found.discovery is not None and found.discovery.returned_count == len(found.tools)
    write_tool = by_name(found.tools)["customer_update_credit_limit"]
    assert write_tool.readonly is False and write_tool.approval_required is True
    detail = alice.tool_detail("customers", "customer_search", turn.capability_revision)
    assert detail.tool.name == "customer_search" and detail.usage_guidance.text

    # ---- a read
    read = alice.invoke("customers", capability_revision=turn.capability_revision, agent_run_id=turn.run_id,
                        tool="customer_search", arguments={"q": "acme"}, invocation_id=demo_invocation_id("life-read"))
    assert read.state == "executed" and read.ok is True and read.business_status == 200

    # ---- a write waits for approval
    write_id = demo_invocation_id("life-write")
    write = alice.invoke("customers", capability_revision=turn.capability_revision, agent_run_id=turn.run_id,
                         tool="customer_update_credit_limit", invocation_id=write_id,
                         arguments={"customer_id": "C-100234", "credit_limit": 50000})
    assert write.state == "awaiting_approval" and write.ok is False and write.approval_id is not None
    pending = alice.receipt(write_id)
    assert pending.approval_status == "pending" and pending.approval_id == write.approval_id
    assert pending.dispatch_state == "not_dispatched" and pending.agent_run_id == turn.run_id
    still = alice.resume(write_id, route="customers", tool="customer_update_credit_limit")
    assert still.state == "awaiting_approval" and still.approval_id == write.approval_id

    # ---- the approver decides in the admin API
    approval = demo.admin("GET", f"/admin/api/tool-approvals/{write.approval_id}")
    assert approval["status"] == "pending"
    demo.admin("POST", f"/admin/api/tool-approvals/{write.approval_id}/approve",
               json={"args_hash": approval["args_hash"], "reason": "Framework agreement signed."})

    # ---- resume runs the frozen call once; the receipt shows it
    done = alice.resume(write_id, route="customers", tool="customer_update_credit_limit")
    assert done.state == "executed" and done.ok is True and 200 <= done.business_status < 300
    replay = alice.resume(write_id, route="customers", tool="customer_update_credit_limit")
    assert replay.state == "executed"
    seen = alice.receipt(write_id)
    assert seen.result is not None and seen.result.state == "executed"
    assert seen.approval_status == "approved" and seen.result_source in ("job", "journal")

    # ---- complete, and an identical replay
    completed = alice.complete(turn.run_id, assistant_message_id="life-1-a1", status="completed",
                               content="ACME's credit limit is now 50,000 EUR (approved).",
                               model="local-model", runtime_name="life-test", usage={"input_tokens": 10})
    assert completed.status == "completed" and completed.idempotent_replay in (None, False)
    replayed = alice.complete(turn.run_id, assistant_message_id="life-1-a1", status="completed",
                              content="ACME's credit limit is now 50,000 EUR (approved).",
                              model="local-model", runtime_name="life-test", usage={"input_tokens": 10})
    assert replayed.idempotent_replay in (None, True)

    # ---- a v1 archive: two of alice's sessions on one route
    laptop = demo.sign_in(tmp_path, "alice-laptop", "crm-demo", "customers", "alice")
    v1 = alice.create_archive("customers", client_archive_id=str(uuid.uuid4()), client_conversation_id="life-1",
                              member_session_ids=[alice.session_id, laptop.session_id],
                              member_labels={alice.session_id: "Desktop", laptop.session_id: "Laptop"})
    assert (v1.state, v1.member_count, v1.confirmed_count, v1.last_sequence) == ("enrolling", 2, 1, 0)
    with pytest.raises(HubError) as early:
        alice.append_events(v1.conversation_id, visible_events(alice.session_id, turn.run_id, "t1", 1, 3))
    assert (early.value.status, early.value.code) == (409, "conversation_audit_not_ready")
    ready = laptop.confirm_archive(v1.conversation_id, member_count=2)
    assert (ready.state, ready.confirmed_count) == ("ready", 2)
    sizes = []
    ack = alice.append_events(v1.conversation_id, visible_events(alice.session_id, turn.run_id, "t1", 1, 120),
                              on_batch=lambda batch, a: sizes.append(len(batch)))
    assert sizes == [50, 50, 20] and ack.last_sequence == 120
    again = alice.append_events(v1.conversation_id, visible_events(alice.session_id, turn.run_id, "t1", 1, 120))
    assert again.last_sequence == 120  # an identical retry is the identical ACK
    stored = demo.admin("GET", f"/admin/api/conversation-audits/{v1.conversation_id}?limit=200")
    assert stored["conversation"]["last_sequence"] == 120 and len(stored["events"]) == 120

    # ---- a v2 archive across the two demo systems: the ERP session writes
    bob = demo.sign_in(tmp_path, "bob-erp", "erp-demo", "orders", "bob")
    assert alice.audit_capabilities().cross_binding_members is True
    erp_turn = bob.turn("orders", client_conversation_id="life-2", client_turn_id="t1", user_message_id="life-2-u1",
                        user_input="How many ABC-1001 are in stock?")
    v2 = bob.create_cross_archive("orders", client_archive_id=str(uuid.uuid4()), client_conversation_id="life-2",
                                  label="ERP", others=[(alice, "customers", "CRM")])
    assert (v2.client_app_id, v2.route_key, v2.state) == ("erp-demo", "orders", "enrolling")
    assert alice.confirm_archive(v2.conversation_id, member_count=2).state == "ready"
    ack = bob.append_events(v2.conversation_id, visible_events(bob.session_id, erp_turn.run_id, "t1", 1, 5))
    assert ack.last_sequence == 5
    with pytest.raises(HubError) as not_writer:
        alice.append_events(v2.conversation_id, visible_events(bob.session_id, erp_turn.run_id, "t1", 6, 3))
    assert not_writer.value.status == 404  # only the writer appends

    # ---- refresh: the old access token stops, the SDK carries on
    old = alice.store.load()["access_token"]
    alice.refresh()
    assert requests.get(demo.url + "/agent-auth/v1/session", headers={"Authorization": f"Bearer {old}"},
                        timeout=30).status_code == 401
    assert alice.session().session_id == view.session_id

    # ---- two processes refused with the same token refresh once between them
    stale = alice.store.load()["access_token"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", REFRESHER, str(alice.store.path), stale], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0].strip() == outs[1][0].strip() != stale
    assert alice.session().session_id == view.session_id  # no replay: the session is alive

    # ---- revoke: the session is gone at the hub and from the file
    token = alice.store.load()["access_token"]
    alice.revoke()
    assert not alice.store.exists()
    assert requests.get(demo.url + "/agent-auth/v1/session", headers={"Authorization": f"Bearer {token}"},
                        timeout=30).status_code == 401
    demo.check_envelopes()


def test_bailing_admin_agent_login_goes_through_the_consent_page(demo, cli, tmp_path, monkeypatch):
    """The developer's command: the browser it opens is the consent page (driven over HTTP here)."""
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", ConsentPage("bob", DEMO_USERS["bob"]["password"]))
    store = tmp_path / "cli" / "agent-session.json"
    code, out, err = cli("agent", "login", "--hub", demo.url, "--client", "erp-demo", "--route", "orders",
                         "--device-label", "Bob's desktop", "--store", str(store))
    assert code == 0, err
    assert out["allowed_routes"] == ["orders"] and out["stored_in"] == str(store)
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    agent = AgentClient(store)
    assert agent.session().device_label == "Bob's desktop"
    assert [w.route for w in agent.workspaces()] == ["orders"]

    # A second login revokes the first session before it starts.
    first = agent.store.load()["access_token"]
    code, out, err = cli("agent", "login", "--hub", demo.url, "--client", "erp-demo", "--route", "orders",
                         "--device-label", "Bob's desktop", "--store", str(store))
    assert code == 0, err
    assert requests.get(demo.url + "/agent-auth/v1/session", headers={"Authorization": f"Bearer {first}"},
                        timeout=30).status_code == 401
    assert AgentClient(store).session().session_id == out["session_id"] != agent.session_id


def test_the_refusals_an_agent_meets_are_typed_and_write_nothing(demo, tmp_path, sql):
    alice = demo.sign_in(tmp_path, "alice", "crm-demo", "customers", "alice")
    key = {"client_conversation_id": "refusals", "client_turn_id": "t1", "user_message_id": "refusals-u1"}
    turn = alice.turn("customers", user_input="Find ACME.", **key)
    tables = ("bz_runs", "bz_messages", "bz_tool_invocations", "bz_tool_approvals",
              "bz_agent_conversation_archives", "bz_agent_conversation_events")
    before = row_counts(sql, *tables)

    def refused(status: int, code: str, action) -> None:
        with pytest.raises(HubError) as caught:
            action()
        assert (caught.value.status, caught.value.public_code) == (status, code), caught.value
        assert row_counts(sql, *tables) == before

    # the same turn key with another input
    refused(409, "turn_conflict", lambda: alice.turn("customers", user_input="Find Northwind.", **key))
    # a route outside the session
    refused(403, "route_not_allowed", lambda: alice.bootstrap("orders"))
    # a stale capability revision, and a tool outside the catalog
    refused(409, "capability_changed", lambda: alice.invoke(
        "customers", capability_revision="0" * 64, agent_run_id=turn.run_id, tool="customer_search",
        arguments={"q": "acme"}))
    refused(404, "tool_not_found", lambda: alice.invoke(
        "customers", capability_revision=turn.capability_revision, agent_run_id=turn.run_id, tool="order_cancel",
        arguments={}))
    # resume and receipt of an invocation this session never made
    refused(404, "invocation_not_found", lambda: alice.resume("f" * 64))
    refused(404, "invocation_not_found", lambda: alice.receipt("f" * 64))
    # completion: an unknown run is a conflict, as upstream answers it
    refused(409, "run_completion_conflict", lambda: alice.complete(
        str(uuid.uuid4()), assistant_message_id="refusals-a0", status="completed", content="Done."))
    # an archive whose creator is not a member
    refused(404, "conversation_audit_not_found", lambda: alice.create_archive(
        "customers", client_archive_id=str(uuid.uuid4()), client_conversation_id="refusals",
        member_session_ids=[str(uuid.uuid4())]))

    # a changed completion replay
    alice.complete(turn.run_id, assistant_message_id="refusals-a1", status="completed", content="Found ACME.")
    before = row_counts(sql, *tables)
    refused(409, "run_completion_conflict", lambda: alice.complete(
        turn.run_id, assistant_message_id="refusals-a1", status="completed", content="Found nothing."))
    demo.check_envelopes()
