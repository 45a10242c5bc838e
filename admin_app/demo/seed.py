"""Seeding the demo through the hub's own HTTP APIs, as real agents, business backends and
approvers would. Every step is keyed (sessions kept in the demo state, fixed conversation, turn,
invocation and archive IDs), so a second run reuses what exists instead of duplicating it."""
from __future__ import annotations

import hashlib
import uuid
from typing import Callable

import requests

from .state import DemoState

LONG_ARCHIVE_EVENTS = 20000
BATCH = 50
NAMESPACE = uuid.UUID("6b7a1f0e-2d55-4d53-9a4e-8f1c3c1d9e21")

# (session name, client app, route, demo user): who the demo's agents act for.
AGENTS = (
    ("crm-alice", "crm-demo", "customers", {"id": "alice", "tenant": "tenant-7", "roles": ["manager"]}, "tenant-7:alice"),
    ("crm-alice-laptop", "crm-demo", "customers", {"id": "alice", "tenant": "tenant-7", "roles": ["manager"]}, "tenant-7:alice"),
    ("erp-bob", "erp-demo", "orders", {"id": "bob", "tenant": "tenant-9", "roles": ["clerk"]}, "tenant-9:bob"),
)


def demo_uuid(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, name))


class SeedError(Exception):
    pass


class Seeder:
    def __init__(self, hub_url: str, state: DemoState, admin_token: str, fault: Callable[[str], None],
                 progress: Callable[[int], None] = lambda n: None):
        self.hub = hub_url.rstrip("/")
        self.state = state
        self.admin = {"Authorization": f"Bearer {admin_token}"}
        self.fault = fault
        self.progress = progress
        self.http = requests.Session()
        self.sessions: dict[str, dict] = {}

    # ---------------------------------------------------------------- plumbing
    def call(self, method: str, path: str, token: str | None = None, expect=(200, 201), **kwargs) -> dict:
        headers = kwargs.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = self.http.request(method, self.hub + path, headers=headers, timeout=120, **kwargs)
        if response.status_code not in expect:
            raise SeedError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}

    def agent(self, name: str) -> str:
        return self.sessions[name]["access_token"]

    # ---------------------------------------------------------------- sessions (Agent Auth)
    def connect(self, name: str, client: str, route: str, principal: dict, subject: str) -> None:
        """Reuse the stored session when it still works, refresh it when it can be refreshed,
        otherwise authorize anew the way a business backend does (with its Client Token)."""
        stored = self.state.data["sessions"].get(name)
        if stored:
            probe = self.http.get(self.hub + "/agent-auth/v1/session", timeout=30,
                                  headers={"Authorization": f"Bearer {stored['access_token']}"})
            if probe.status_code == 200:
                self.sessions[name] = stored
                return
            refreshed = self.http.post(self.hub + "/agent-auth/v1/token", timeout=30, json={
                "grant_type": "refresh_token", "client_app_id": client, "refresh_token": stored["refresh_token"]})
            if refreshed.status_code == 200:
                self.sessions[name] = self.state.data["sessions"][name] = refreshed.json()
                return
        verifier = uuid.uuid4().hex + uuid.uuid4().hex
        challenge = _challenge(verifier)
        callback = "http://127.0.0.1:9/callback"  # the demo exchanges the code itself; nothing listens
        created = self.call("POST", "/agent-auth/v1/authorizations", json={
            "client_app_id": client, "redirect_uri": callback, "state": uuid.uuid4().hex,
            "requested_routes": [route], "device_label": name, "code_challenge": challenge,
            "code_challenge_method": "S256"})
        approved = self.call("POST", f"/agent-auth/v1/authorizations/{created['authorization_id']}/approve",
                             self.state.data["client_tokens"][client],
                             json={"principal": principal, "on_behalf_of": subject, "allowed_routes": [route]})
        code = approved["redirect_uri"].split("code=")[1].split("&")[0]
        issued = self.call("POST", "/agent-auth/v1/token", json={
            "grant_type": "authorization_code", "client_app_id": client, "code": code,
            "redirect_uri": callback, "code_verifier": verifier})
        self.sessions[name] = self.state.data["sessions"][name] = issued

    # ---------------------------------------------------------------- runtime
    def turn(self, agent: str, route: str, conversation: str, turn: str, text: str) -> dict:
        return self.call("POST", f"/agent-api/v1/workspaces/{route}/turns", self.agent(agent), json={
            "client_conversation_id": conversation, "client_turn_id": turn,
            "user_message_id": f"{conversation}:{turn}:user", "user_input": text})

    def complete(self, agent: str, run: dict, text: str) -> None:
        self.call("POST", f"/agent-api/v1/runs/{run['run_id']}/complete", self.agent(agent), json={
            "assistant_message_id": f"{run['client_conversation_id']}:{run['client_turn_id']}:assistant",
            "status": "completed", "content": text, "model": "demo-local-model", "runtime": "demo-agent"})

    def invoke(self, agent: str, route: str, run: dict | None, invocation: str, tool: str, arguments: dict) -> dict:
        revision = self.call("GET", f"/agent-api/v1/tools?route={route}", self.agent(agent))["capability_revision"]
        body = {"invocation_id": invocation, "route": route, "capability_revision": revision,
                "tool": tool, "arguments": arguments}
        if run is not None:
            body["run_id"] = run["run_id"]
        return self.call("POST", "/agent-api/v1/tool-invocations", self.agent(agent), json=body)

    def decide_and_resume(self, agent: str, result: dict, decision: str, reason: str) -> None:
        """An approver decides, then the agent resumes the original invocation; skipped when an
        earlier run already did both."""
        approval = result.get("approval")
        if result["status"] != "awaiting_approval" or approval is None:
            return
        if approval["state"] == "pending":
            self.call("POST", f"/admin/api/tool-approvals/{approval['id']}/{decision}", headers=dict(self.admin),
                      json={"args_hash": approval["args_hash"], "reason": reason})
        self.call("POST", f"/agent-api/v1/tool-invocations/{result['invocation_id']}/resume",
                  self.agent(agent), json={})

    # ---------------------------------------------------------------- archives
    def archive(self, creator: str, body: dict, confirmers: list[str]) -> tuple[str, int]:
        """The archive's id and how many events it already holds (a second run resumes there)."""
        created = self.call("POST", "/agent-api/v1/conversation-audits", self.agent(creator), json=body)
        conversation_id = created["conversation"]["conversation_id"]
        for member in confirmers:
            self.call("POST", f"/agent-api/v1/conversation-audits/{conversation_id}/confirm", self.agent(member), json={})
        return conversation_id, created["conversation"]["last_sequence"]

    def append(self, writer: str, archive: tuple[str, int], events: list[dict]) -> None:
        conversation_id, stored = archive
        self.progress(min(stored, len(events)))
        events = [e for e in events if e["sequence"] > stored]
        for start in range(0, len(events), BATCH):
            self.call("POST", f"/agent-api/v1/conversation-audits/{conversation_id}/events", self.agent(writer),
                      json={"events": events[start:start + BATCH]})
            self.progress(len(events[start:start + BATCH]))

    # ---------------------------------------------------------------- the story
    def run(self) -> dict:
        for name, client, route, principal, subject in AGENTS:
            self.connect(name, client, route, principal, subject)
        self.state.save()
        made = {}
        made.update(self.credit_review())
        made.update(self.order_desk())
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
        if self._status("crm-alice", "demo-read-contoso") is None:
            self.fault("customer_get")  # the business system drops the connection after answering
        self.invoke("crm-alice", "customers", t4, "demo-read-contoso", "customer_get", {"customer_id": "C-100236"})
        self.complete("crm-alice", t4, "I could not confirm Contoso's record: the call's outcome is unknown.")
        # Waiting for an approver: a large raise and an e-mail change (forced by the route).
        self.invoke("crm-alice", "customers", None, "demo-raise-contoso", "customer_update_credit_limit",
                    {"customer_id": "C-100236", "credit_limit": 25000})
        self.invoke("crm-alice", "customers", None, "demo-email-contoso", "customer_update_email",
                    {"customer_id": "C-100236", "email": "treasury@contoso.example", "notify_customer": True})

        v1 = self.archive("crm-alice", {
            "client_archive_id": demo_uuid("archive-credit-review"), "client_conversation_id": conv,
            "route": "customers",
            "member_session_ids": [self.sessions["crm-alice"]["session_id"],
                                   self.sessions["crm-alice-laptop"]["session_id"]],
            "member_labels": {self.sessions["crm-alice"]["session_id"]: "Alice (desktop)",
                              self.sessions["crm-alice-laptop"]["session_id"]: "Alice (laptop)"}},
            ["crm-alice-laptop"])
        events, seq = [], 0
        for run, user, answer, status in ((t1, "Find ACME and show its credit limit.",
                                           "ACME Industrial GmbH (C-100234) has a credit limit of 5,000 EUR.", "completed"),
                                          (t2, "Raise it to 50,000 EUR, they signed a framework deal.",
                                           "Done: the credit limit of ACME is now 50,000 EUR (approved).", "completed"),
                                          (t3, "Also raise Northwind to 80,000 GBP.",
                                           "The increase for Northwind was denied by the approver.", "completed"),
                                          (t4, "What is Contoso's current status?",
                                           "I could not confirm Contoso's record: the call's outcome is unknown.", "failed")):
            turn = run["client_turn_id"]
            for event in ({"kind": "turn_start"}, {"kind": "user_message", "content": user},
                          {"kind": "run_link", "run_id": run["run_id"],
                           "member_session_id": self.sessions["crm-alice"]["session_id"]},
                          {"kind": "assistant_message", "content": answer}, {"kind": "turn_end", "status": status}):
                seq += 1
                events.append({"event_id": f"{turn}-{seq}", "sequence": seq, "client_turn_id": turn, **event})
        self.append("crm-alice", v1, events)
        return {"v1_archive": v1[0]}

    def _status(self, agent: str, invocation: str) -> str | None:
        response = self.http.get(self.hub + f"/agent-api/v1/tool-invocations/{invocation}/receipt", timeout=30,
                                 headers={"Authorization": f"Bearer {self.agent(agent)}"})
        return response.json()["status"] if response.status_code == 200 else None

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
        v2 = self.archive("erp-bob", {
            "schema": "bailing.agent-conversation-audit-create.v2",
            "client_archive_id": demo_uuid("archive-cross-system"), "client_conversation_id": conv,
            "members": [
                {"session_id": self.sessions["crm-alice"]["session_id"], "client_app_id": "crm-demo",
                 "route": "customers", "label": "CRM account"},
                {"session_id": self.sessions["erp-bob"]["session_id"], "client_app_id": "erp-demo",
                 "route": "orders", "label": "ERP account"}]}, ["crm-alice"])
        events, seq = [], 0
        for run, user, answer in ((t1, "Import this week's orders from the shared file.",
                                   "The import is waiting for approval; stock of ABC-1001 is 420 in Berlin."),
                                  (t2, "Cancel ORD-000001, the customer withdrew.",
                                   "The cancellation is waiting for approval.")):
            turn = run["client_turn_id"]
            for event in ({"kind": "turn_start"}, {"kind": "user_message", "content": user},
                          {"kind": "run_link", "run_id": run["run_id"],
                           "member_session_id": self.sessions["erp-bob"]["session_id"]},
                          {"kind": "assistant_message", "content": answer}, {"kind": "turn_end", "status": "completed"}):
                seq += 1
                events.append({"event_id": f"{turn}-{seq}", "sequence": seq, "client_turn_id": turn, **event})
        self.append("erp-bob", v2, events)
        return {"v2_archive": v2[0]}

    def long_archive(self) -> str:
        """One archive of exactly 20,000 events: 5,000 short turns of a long shift."""
        archive = self.archive("crm-alice", {
            "client_archive_id": demo_uuid("archive-long-shift"), "client_conversation_id": "long-shift",
            "route": "customers", "member_session_ids": [self.sessions["crm-alice"]["session_id"]]}, [])
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
        return archive[0]


def _challenge(verifier: str) -> str:
    import base64

    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _order_file(size: int) -> str:
    """A realistic order CSV of about `size` bytes, with names in several scripts."""
    lines = ["customer_id,sku,quantity,unit_price,currency,note"]
    notes = ["Lieferung bis Freitag", "livraison express", "请在周五前送达", "配送は金曜日まで", "entrega urgente"]
    n = 0
    while sum(len(line.encode()) + 1 for line in lines) < size:
        n += 1
        lines.append(f"C-10023{4 + n % 3},ABC-100{1 + n % 2},{1 + n % 40},{12.5 + n % 7:.2f},EUR,{notes[n % 5]} #{n}")
    return "\n".join(lines)
