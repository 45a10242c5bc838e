"""Seeding the demo through the hub's own HTTP APIs, as real agents, business backends and
approvers would. Every agent-side call goes through the Agent Client SDK (`admin_app.agent_sdk`),
which refuses any answer off the wire contract; each agent signs in through the business system's
consent page. Every step is keyed (session files kept beside the demo state, fixed conversation,
turn, invocation and archive IDs), so a second run reuses what exists instead of duplicating it."""
from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import requests

from .. import limits
from ..agent_sdk import AgentAuthError, AgentClient, AgentSdkError, ContractError, HubError, SessionStore, login
from ..agent_sdk.models import TaskBinding
from .approver import ConsentError, ConsentPage
from .consent import DEMO_USERS
from .state import DemoState

LONG_ARCHIVE_EVENTS = limits.AUDIT_ARCHIVE_MAX_EVENTS  # an archive as long as the spec allows
NAMESPACE = uuid.UUID("6b7a1f0e-2d55-4d53-9a4e-8f1c3c1d9e21")

# (session name, client app, route, demo user at the consent page): who the demo's agents act for.
AGENTS = (
    ("crm-alice", "crm-demo", "customers", "alice"),
    ("crm-alice-laptop", "crm-demo", "customers", "alice"),
    ("erp-bob", "erp-demo", "orders", "bob"),
)
# The agents of the task-control story: sessions of their own, since a session placed in a task
# must bind every later turn and call to a task, forever (TASK_CONTROL.md §2.3).
TASK_AGENTS = (
    ("crm-alice-tasks", "crm-demo", "customers", "alice"),
    ("erp-bob-tasks", "erp-demo", "orders", "bob"),
)
# How far ahead of the first seeding the near-budget task's deadline lies (kept in the demo state,
# so a second run sends the same create body).
TASK_DEADLINE_DAYS = 30


def demo_uuid(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, name))


def demo_invocation_id(name: str) -> str:
    """The demo's fixed invocation ids, in the contract's form (64 lowercase hex)."""
    return hashlib.sha256(f"bailing-demo:{name}".encode()).hexdigest()


class SeedError(Exception):
    pass


@dataclass(frozen=True)
class Run:
    """A prepared turn, with the keys the demo made it under."""
    run_id: str
    conversation: str
    turn: str
    capability_revision: str


@dataclass(frozen=True)
class Outcome:
    invocation_id: str
    state: str | None
    approval_id: int | None


class Seeder:
    def __init__(self, hub_url: str, state: DemoState, admin_token: str, fault: Callable[[str], None],
                 progress: Callable[[int], None] = lambda n: None):
        self.hub = hub_url.rstrip("/")
        self.state = state
        self.admin = {"Authorization": f"Bearer {admin_token}"}
        self.fault = fault
        self.progress = progress
        self.http = requests.Session()
        self.agents: dict[str, AgentClient] = {}

    # ---------------------------------------------------------------- plumbing
    def admin_call(self, method: str, path: str, **kwargs) -> dict:
        """The approver's side: the admin API, called as the console calls it."""
        response = self.http.request(method, self.hub + path, headers=self.admin, timeout=120, **kwargs)
        if response.status_code != 200:
            raise SeedError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def session_id(self, name: str) -> str:
        return self.agents[name].session_id

    # ---------------------------------------------------------------- sessions (Agent Auth)
    def connect(self, name: str, client: str, route: str, user: str) -> None:
        """Reuse the stored session when it still works (the SDK refreshes it when it must),
        otherwise sign in anew through the business system's consent page."""
        store = SessionStore(self.state.agent_store(name), self.http)
        if store.exists():
            stored = store.load()
            if stored.get("hub_url") != self.hub:  # the same hub, served on another port this time
                store.save({**stored, "hub_url": self.hub})
            try:
                agent = AgentClient(store, self.http)
                agent.session()
                self.agents[name] = agent
                return
            except (AgentAuthError, HubError, ContractError):
                pass  # login() revokes what is stored before it starts
        login(self.hub, client, [route], device_label=name, store=store, http=self.http, timeout=60,
              open_url=ConsentPage(user, DEMO_USERS[user]["password"]))
        self.agents[name] = AgentClient(store, self.http)

    # ---------------------------------------------------------------- runtime
    def turn(self, agent: str, route: str, conversation: str, turn: str, text: str,
             task: TaskBinding | None = None) -> Run:
        context = self.agents[agent].turn(route, client_conversation_id=conversation, client_turn_id=turn,
                                          user_message_id=f"{conversation}:{turn}:user", user_input=text,
                                          task_binding=task)
        return Run(context.run_id, conversation, turn, context.capability_revision)

    def complete(self, agent: str, run: Run, text: str) -> None:
        self.agents[agent].complete(run.run_id, assistant_message_id=f"{run.conversation}:{run.turn}:assistant",
                                    status="completed", content=text, model="demo-local-model",
                                    runtime_name="demo-agent")

    def known(self, agent: str, invocation_id: str) -> Outcome | None:
        """What an earlier run left of this invocation (its read-only receipt), if anything."""
        try:
            receipt = self.agents[agent].receipt(invocation_id)
        except HubError as err:
            if err.status == 404 and err.code == "invocation_not_found":
                return None
            raise
        return Outcome(invocation_id, receipt.result.state if receipt.result else None, receipt.approval_id)

    def invoke(self, agent: str, route: str, run: Run, name: str, tool: str, arguments: dict,
               before: Callable[[], None] | None = None) -> Outcome:
        invocation_id = demo_invocation_id(name)
        earlier = self.known(agent, invocation_id)
        if earlier is not None:
            return earlier
        if before is not None:
            before()
        result = self.agents[agent].invoke(route, capability_revision=run.capability_revision,
                                           agent_run_id=run.run_id, tool=tool, arguments=arguments,
                                           invocation_id=invocation_id)
        return Outcome(invocation_id, result.state, result.approval_id)

    def decide_and_resume(self, agent: str, outcome: Outcome, decision: str, reason: str) -> None:
        """An approver decides, then the agent resumes the original invocation; skipped when an
        earlier run already did both."""
        if outcome.state != "awaiting_approval" or outcome.approval_id is None:
            return
        approval = self.admin_call("GET", f"/admin/api/tool-approvals/{outcome.approval_id}")
        if approval["status"] == "pending":
            self.admin_call("POST", f"/admin/api/tool-approvals/{outcome.approval_id}/{decision}",
                            json={"args_hash": approval["args_hash"], "reason": reason})
        self.agents[agent].resume(outcome.invocation_id)

    # ---------------------------------------------------------------- archives
    def append(self, writer: str, header, events: list[dict]) -> None:
        stored = header.last_sequence
        self.progress(min(stored, len(events)))
        self.agents[writer].append_events(header.conversation_id, [e for e in events if e["sequence"] > stored],
                                          on_batch=lambda batch, ack: self.progress(len(batch)))

    # ---------------------------------------------------------------- the story
    def run(self) -> dict:
        try:
            return self._story()
        except (AgentSdkError, ConsentError) as err:  # refused, or answered off the contract
            raise SeedError(str(err)) from None

    def _story(self) -> dict:
        for name, client, route, user in AGENTS + TASK_AGENTS:
            self.connect(name, client, route, user)
        made = {}
        made.update(self.credit_review())
        made.update(self.order_desk())
        made["tasks"] = self.task_control()
        made["long_archive"] = self.long_archive()
        return made

    def credit_review(self) -> dict:
        conv = "credit-review-acme"
        t1 = self.turn("crm-alice", "customers", conv, "t1", "Find ACME and show its credit limit.")
        self.invoke("crm-alice", "customers", t1, "demo-read-acme", "customer_search", {"q": "acme"})
        self.complete("crm-alice", t1, "ACME Industrial GmbH (C-100234) has a credit limit of 5,000 EUR.")
        t2 = self.turn("crm-alice", "customers", conv, "t2", "Raise it to 50,000 EUR, they signed a framework deal.")
        raised = self.invoke("crm-alice", "customers", t2, "demo-raise-acme", "customer_update_credit_limit",
                             {"customer_id": "C-100234", "credit_limit": 50000})
        self.decide_and_resume("crm-alice", raised, "approve",
                               "Framework agreement FA-2026-17 signed; payment history clean.")
        self.complete("crm-alice", t2, "Done: the credit limit of ACME is now 50,000 EUR (approved).")
        t3 = self.turn("crm-alice", "customers", conv, "t3", "Also raise Northwind to 80,000 GBP.")
        denied = self.invoke("crm-alice", "customers", t3, "demo-raise-northwind", "customer_update_credit_limit",
                             {"customer_id": "C-100235", "credit_limit": 80000})
        self.decide_and_resume("crm-alice", denied, "deny", "Two late payments this quarter; no increase.")
        self.complete("crm-alice", t3, "The increase for Northwind was denied by the approver.")
        t4 = self.turn("crm-alice", "customers", conv, "t4", "What is Contoso's current status?")
        # The business system drops the connection after answering: the outcome stays unknown.
        self.invoke("crm-alice", "customers", t4, "demo-read-contoso", "customer_get", {"customer_id": "C-100236"},
                    before=lambda: self.fault("customer_get"))
        self.complete("crm-alice", t4, "I could not confirm Contoso's record: the call's outcome is unknown.")
        # Waiting for an approver: a large raise and an e-mail change (forced by the route).
        t5 = self.turn("crm-alice", "customers", conv, "t5",
                       "Raise Contoso to 25,000 EUR and send its invoices to treasury@contoso.example.")
        self.invoke("crm-alice", "customers", t5, "demo-raise-contoso", "customer_update_credit_limit",
                    {"customer_id": "C-100236", "credit_limit": 25000})
        self.invoke("crm-alice", "customers", t5, "demo-email-contoso", "customer_update_email",
                    {"customer_id": "C-100236", "email": "treasury@contoso.example", "notify_customer": True})
        self.complete("crm-alice", t5, "Both changes are waiting for an approver.")

        desktop, laptop = self.session_id("crm-alice"), self.session_id("crm-alice-laptop")
        v1 = self.agents["crm-alice"].create_archive(
            "customers", client_archive_id=demo_uuid("archive-credit-review"), client_conversation_id=conv,
            member_session_ids=[desktop, laptop],
            member_labels={desktop: "Alice (desktop)", laptop: "Alice (laptop)"})
        self.agents["crm-alice-laptop"].confirm_archive(v1.conversation_id, member_count=2)
        events = _transcript(desktop, (
            (t1, "Find ACME and show its credit limit.",
             "ACME Industrial GmbH (C-100234) has a credit limit of 5,000 EUR.", "completed"),
            (t2, "Raise it to 50,000 EUR, they signed a framework deal.",
             "Done: the credit limit of ACME is now 50,000 EUR (approved).", "completed"),
            (t3, "Also raise Northwind to 80,000 GBP.",
             "The increase for Northwind was denied by the approver.", "completed"),
            (t4, "What is Contoso's current status?",
             "I could not confirm Contoso's record: the call's outcome is unknown.", "failed")))
        self.append("crm-alice", v1, events)
        return {"v1_archive": v1.conversation_id}

    def order_desk(self) -> dict:
        conv = "orders-and-accounts"
        t1 = self.turn("erp-bob", "orders", conv, "t1", "Import this week's orders from the shared file.")
        csv = _order_file(900 * 1024)
        self.invoke("erp-bob", "orders", t1, "demo-import-week-48", "order_import",
                    {"file_name": "orders-week-48.csv", "csv": csv})
        self.invoke("erp-bob", "orders", t1, "demo-stock-ber", "inventory_get", {"sku": "ABC-1001"})
        self.complete("erp-bob", t1, "The import is waiting for approval; stock of ABC-1001 is 420 in Berlin.")
        t2 = self.turn("erp-bob", "orders", conv, "t2", "Cancel ORD-000001, the customer withdrew.")
        self.invoke("erp-bob", "orders", t2, "demo-cancel-1", "order_cancel",
                    {"order_id": "ORD-000001", "reason": "customer_request", "comment": "Withdrawn by phone."})
        self.complete("erp-bob", t2, "The cancellation is waiting for approval.")
        # A cross-system archive: the ERP session writes, the CRM session is a confirmed member.
        v2 = self.agents["erp-bob"].create_cross_archive(
            "orders", client_archive_id=demo_uuid("archive-cross-system"), client_conversation_id=conv,
            label="ERP account", others=[(self.agents["crm-alice"], "customers", "CRM account")])
        self.agents["crm-alice"].confirm_archive(v2.conversation_id, member_count=2)
        events = _transcript(self.session_id("erp-bob"), (
            (t1, "Import this week's orders from the shared file.",
             "The import is waiting for approval; stock of ABC-1001 is 420 in Berlin.", "completed"),
            (t2, "Cancel ORD-000001, the customer withdrew.", "The cancellation is waiting for approval.",
             "completed")))
        self.append("erp-bob", v2, events)
        return {"v2_archive": v2.conversation_id}

    # ---------------------------------------------------------------- task control
    def create_task(self, name: str, members: list[dict], policy: dict) -> dict:
        """A task through the admin API, as the console creates one. The request id names the
        member sessions, so a second run (same sessions) is answered with the task it made."""
        sessions = "-".join(sorted({m["session_id"][:8] for m in members}))
        return self.admin_call("POST", "/admin/api/agent-tasks",
                               json={"request_id": f"demo-task-{name}-{sessions}", "members": members,
                                     "policy": policy})

    def control_task(self, task: dict, action: str) -> dict:
        current = self.admin_call("GET", f"/admin/api/agent-tasks/{task['task_id']}")["task"]
        return self.admin_call("POST", f"/admin/api/agent-tasks/{task['task_id']}/control",
                               json={"request_id": f"demo-{action}-{task['task_id']}", "action": action,
                                     "expected_revision": current["revision"]})

    def task_deadline(self) -> str:
        if "task_deadline" not in self.state.data:
            moment = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(days=TASK_DEADLINE_DAYS)
            self.state.data["task_deadline"] = moment.strftime("%Y-%m-%dT%H:%M:00.000Z")
        return str(self.state.data["task_deadline"])

    def task_control(self) -> dict:
        """Three tasks made and worked through the hub's APIs: one near its write budget (4 of 5
        used by real calls), one paused after some work, one cancelled. Each step runs only while
        the task shows it has not run yet, so a second run changes nothing."""
        alice, bob = self.session_id("crm-alice-tasks"), self.session_id("erp-bob-tasks")

        def member(session: str, app: str, route: str, conversation: str, tools: list[str]) -> dict:
            return {"session_id": session, "client_app_id": app, "workspace": route,
                    "client_conversation_id": conversation, "allowed_tools": tools}

        notes = self.create_task("acme-notes", [member(alice, "crm-demo", "customers", "task-acme-notes",
                                                       ["customer_get", "customer_note_add"])],
                                 {"max_write_calls": 5, "max_concurrent": 2, "expires_at": self.task_deadline()})
        if notes["state"] == "active" and notes["ledger_sequence"] == 1:
            run = self.turn("crm-alice-tasks", "customers", "task-acme-notes", "t1",
                            "Log this week's four calls with ACME on their timeline.",
                            TaskBinding(notes["task_id"], notes["scope_hash"]))
            self.invoke("crm-alice-tasks", "customers", run, "demo-task-acme-read", "customer_get",
                        {"customer_id": "C-100234"})
            for n, text in enumerate(("Monday: confirmed the framework agreement FA-2026-17.",
                                      "Tuesday: agreed delivery slots for December.",
                                      "Wednesday: invoice INV-20931 will be paid on Friday.",
                                      "Thursday: asked for a second contact in purchasing."), start=1):
                self.invoke("crm-alice-tasks", "customers", run, f"demo-task-acme-note-{n}", "customer_note_add",
                            {"customer_id": "C-100234", "body": text})
            self.complete("crm-alice-tasks", run, "Logged the four calls; one more write is left in this task.")

        stock = self.create_task("stock-count", [member(bob, "erp-demo", "orders", "task-stock-count-berlin",
                                                        ["inventory_adjust", "inventory_get"])],
                                 {"max_write_calls": 20, "max_concurrent": 1, "expires_at": None})
        if stock["state"] == "active":
            if stock["ledger_sequence"] == 1:
                run = self.turn("erp-bob-tasks", "orders", "task-stock-count-berlin", "t1",
                                "Book the Berlin cycle count: three more ABC-1001 than the system shows.",
                                TaskBinding(stock["task_id"], stock["scope_hash"]))
                self.invoke("erp-bob-tasks", "orders", run, "demo-task-stock-read", "inventory_get",
                            {"sku": "ABC-1001", "warehouse_id": "WH-BER"})
                self.invoke("erp-bob-tasks", "orders", run, "demo-task-stock-adjust", "inventory_adjust",
                            {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": 3,
                             "reason": "cycle_count", "reference": "COUNT-BER-48"})
                self.complete("erp-bob-tasks", run, "Booked +3 ABC-1001 in Berlin (cycle count COUNT-BER-48).")
            stock = self.control_task(stock, "pause")

        review = self.create_task("northwind-review", [
            member(alice, "crm-demo", "customers", "task-northwind-review", ["customer_get", "customer_search"]),
            member(bob, "erp-demo", "orders", "task-northwind-orders", ["order_get", "order_list"])],
            {"max_write_calls": 0, "max_concurrent": 2, "expires_at": None})
        if review["state"] != "cancelled":
            if review["ledger_sequence"] == 1:
                run = self.turn("crm-alice-tasks", "customers", "task-northwind-review", "t1",
                                "Look up Northwind before the account review.",
                                TaskBinding(review["task_id"], review["scope_hash"]))
                self.invoke("crm-alice-tasks", "customers", run, "demo-task-northwind-read", "customer_get",
                            {"customer_id": "C-100235"})
                self.complete("crm-alice-tasks", run, "Northwind's record is ready for the review.")
            review = self.control_task(review, "cancel")
        return {"near_budget": notes["task_id"], "paused": stock["task_id"], "cancelled": review["task_id"]}

    def long_archive(self) -> str:
        """One archive of exactly 20,000 events: 5,000 short turns of a long shift. A v2 archive of
        one member, as archives are made now: the credit review is the demo's one legacy v1 archive
        (the README's tour says so). Its id differs from the v1 archive of earlier demos, whose
        frozen input a v2 create under the same id would conflict with."""
        archive = self.agents["crm-alice"].create_cross_archive(
            "customers", client_archive_id=demo_uuid("archive-long-shift-v2"), client_conversation_id="long-shift",
            others=[])
        events = []
        for n in range(LONG_ARCHIVE_EVENTS // 4):
            turn, base = f"shift-{n + 1}", n * 4
            events += [
                {"event_id": f"e{base + 1}", "sequence": base + 1, "client_turn_id": turn, "kind": "turn_start"},
                {"event_id": f"e{base + 2}", "sequence": base + 2, "client_turn_id": turn, "kind": "user_message",
                 "content": f"Check customer call #{n + 1}: any open invoices?"},
                {"event_id": f"e{base + 3}", "sequence": base + 3, "client_turn_id": turn, "kind": "assistant_message",
                 "content": f"Call #{n + 1}: no open invoices; the account is in good standing."},
                {"event_id": f"e{base + 4}", "sequence": base + 4, "client_turn_id": turn, "kind": "turn_end",
                 "status": "completed"},
            ]
        self.append("crm-alice", archive, events)
        return archive.conversation_id


def _transcript(member: str, turns) -> list[dict]:
    """The visible events of these turns: start, the user's text, the run link, the answer, end."""
    events, seq = [], 0
    for run, user, answer, status in turns:
        for event in ({"kind": "turn_start"}, {"kind": "user_message", "content": user},
                      {"kind": "run_link", "run_id": run.run_id, "member_session_id": member},
                      {"kind": "assistant_message", "content": answer}, {"kind": "turn_end", "status": status}):
            seq += 1
            events.append({"event_id": f"{run.turn}-{seq}", "sequence": seq, "client_turn_id": run.turn, **event})
    return events


def _order_file(size: int) -> str:
    """A realistic order CSV of about `size` bytes, with names in several scripts."""
    lines = ["customer_id,sku,quantity,unit_price,currency,note"]
    notes = ["Lieferung bis Freitag", "livraison express", "请在周五前送达", "配送は金曜日まで", "entrega urgente"]
    n, length = 0, len(lines[0].encode()) + 1  # counted as it grows: re-summing all lines each time is quadratic
    while length < size:
        n += 1
        lines.append(f"C-10023{4 + n % 3},ABC-100{1 + n % 2},{1 + n % 40},{12.5 + n % 7:.2f},EUR,{notes[n % 5]} #{n}")
        length += len(lines[-1].encode()) + 1
    return "\n".join(lines)
