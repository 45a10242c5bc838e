"""AgentClient: one agent's typed view of its hub. Every answer is checked before it is returned;
an off-contract answer raises ContractError naming the field, a refusal raises HubError."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from . import audit, auth, contract as c, invocations, knowledge, runtime, system
from .audit import Member
from .check import Reader
from .connection import Connection
from .errors import RequestRefused, Unsupported
from .http import NO_BODY, answer
from .models import (ArchiveHeader, AuditAck, AuditCapabilities, Bootstrap, Completion, InspectionCapabilities,
                     Invocation, KnowledgeCapabilities, KnowledgeHint, KnowledgePiece, Receipt, SearchResult,
                     SessionView, SystemInfo, TaskBinding, TaskControlCapabilities, TaskView, ToolDetail,
                     TurnContext, Workspace)
from .session_store import SessionStore

API = "/agent-api/v1"
AUDITS = f"{API}/conversation-audits"


class AgentClient:
    def __init__(self, store: SessionStore | Path | str, http: requests.Session | None = None):
        store = store if isinstance(store, SessionStore) else SessionStore(store, http)
        self.store = store
        self.conn = Connection(store, http)
        self._inspection: InspectionCapabilities | None = None

    @property
    def hub_url(self) -> str:
        return self.conn.hub_url

    @property
    def session_id(self) -> str:
        return self.conn.session_id

    @property
    def client_app_id(self) -> str:
        return self.conn.client_app_id

    def _get(self, path: str, params: dict | None = None) -> tuple[dict, str]:
        endpoint = f"GET {path}"
        return self.conn.call("GET", path, endpoint, params=params), endpoint

    def _post(self, path: str, body=NO_BODY) -> tuple[dict, str]:
        endpoint = f"POST {path}"
        return self.conn.call("POST", path, endpoint, body=body), endpoint

    # ------------------------------------------------------------ Agent Auth
    def session(self) -> SessionView:
        data, endpoint = self._get(auth.SESSION_PATH)
        view = auth.parse_session(data, endpoint)
        if view.session_id != self.session_id:
            Reader(endpoint).fail("session_id", "must be this connection's session")
        return view

    def refresh(self) -> dict:
        return self.store.refresh()

    def revoke(self) -> None:
        """Revoke this session (refresh-token body and access bearer) and forget it."""
        from .login import revoke_stored

        revoke_stored(self.store)

    # ------------------------------------------------------------ Runtime
    def workspaces(self) -> list[Workspace]:
        return runtime.parse_workspaces(*self._get(f"{API}/workspaces"))

    def bootstrap(self, route: str) -> Bootstrap:
        runtime.route_key(route)
        return runtime.parse_bootstrap(*self._get(f"{API}/workspaces/{route}/bootstrap"), route)

    def system_info(self, route: str) -> SystemInfo:
        runtime.route_key(route)
        path = f"{API}/workspaces/{route}/system-info"
        response = self.conn.raw("GET", path, f"GET {path}")
        if response.status_code == 404 and self.conn.refused(response, path).code == "not_found":
            raise Unsupported("this hub does not describe its systems")  # an older hub's router 404
        return system.parse_system_info(answer(response, f"GET {path}"), f"GET {path}", route=route,
                                        session_id=self.session_id, client_app_id=self.client_app_id)

    def turn(self, route: str, *, client_conversation_id: str, client_turn_id: str, user_message_id: str,
             user_input: str, page_context: dict | None = None, renderers: list[str] | None = None,
             task_binding: TaskBinding | None = None, knowledge_delivery: str | None = None) -> TurnContext:
        runtime.route_key(route)
        body: dict[str, Any] = {
            "client_conversation_id": runtime.client_id(client_conversation_id, "client_conversation_id"),
            "client_turn_id": runtime.client_id(client_turn_id, "client_turn_id"),
            "user_message_id": runtime.client_id(user_message_id, "user_message_id"),
            "user_input": runtime.client_text(user_input, "user_input", c.USER_INPUT_MAX)}
        if page_context is not None:
            if not isinstance(page_context, dict):
                raise RequestRefused("page_context", "must be an object")
            body["page_context"] = page_context
        if renderers is not None:
            if (not isinstance(renderers, list) or len(renderers) > c.RENDERERS_MAX
                    or len(set(renderers)) != len(renderers)
                    or not all(isinstance(x, str) and c.RENDERER.fullmatch(x) for x in renderers)):
                raise RequestRefused("renderers", f"must be at most {c.RENDERERS_MAX} unique renderer names")
            body["renderers"] = renderers
        if task_binding is not None:
            body["task_binding"] = task_binding.wire()
        if knowledge_delivery is not None:
            if knowledge_delivery not in c.KNOWLEDGE_DELIVERY:
                raise RequestRefused("knowledge_delivery", "must be inline or on_demand")
            body["knowledge_delivery"] = knowledge_delivery
        data, endpoint = self._post(f"{API}/workspaces/{route}/turns", body)
        return runtime.parse_turn(data, endpoint, task_binding, knowledge_delivery)

    def search(self, route: str, query: str | None = None, *, run_id: str | None = None,
               limit: int = c.SEARCH_LIMIT_DEFAULT) -> SearchResult:
        runtime.route_key(route)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= c.ACTIVE_TOOLS_MAX:
            raise RequestRefused("limit", f"must be 1-{c.ACTIVE_TOOLS_MAX}")
        body: dict = {"limit": limit}  # always sent, as the official SDK does
        if query is not None:
            body["query"] = runtime.client_text(query, "query", c.SEARCH_QUERY_MAX, non_blank=False)
        if run_id is not None:
            if not c.UUID.fullmatch(run_id):
                raise RequestRefused("run_id", "must be a UUID")
            body["run_id"] = run_id
        if not (query or "").strip() and run_id is None:
            raise RequestRefused("query", "a non-blank query or a run_id is required")
        data, endpoint = self._post(f"{API}/workspaces/{route}/capabilities/search", body)
        return runtime.parse_search(data, endpoint, route, limit)

    def tool_detail(self, route: str, name: str, capability_revision: str) -> ToolDetail:
        runtime.route_key(route)
        if not c.TOOL_NAME.fullmatch(name):
            raise RequestRefused("name", "must be a tool name")
        data, endpoint = self._get(f"{API}/tools/{quote(name)}",
                                   {"route": route, "capability_revision": capability_revision})
        return runtime.parse_tool_detail(data, endpoint, route, name, capability_revision)

    def complete(self, run_id: str, *, assistant_message_id: str, status: str, content: str,
                 model: str | None = None, runtime_name: str | None = None, usage: dict | None = None) -> Completion:
        if not c.UUID.fullmatch(run_id):
            raise RequestRefused("run_id", "must be a UUID")
        if status not in c.RUN_STATUSES:
            raise RequestRefused("status", "must be completed, failed or cancelled")
        body: dict[str, Any] = {
            "assistant_message_id": runtime.client_id(assistant_message_id, "assistant_message_id"),
            "status": status, "content": runtime.client_text(content, "content", c.CONTENT_MAX)}
        for key, value in (("model", model), ("runtime", runtime_name)):
            if value is not None:
                body[key] = runtime.client_text(value, key, c.MODEL_MAX, non_blank=False)
        if usage is not None:
            for key, value in usage.items() if isinstance(usage, dict) else [("usage", None)]:
                if key not in c.USAGE_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not math.isfinite(value) or value < 0:
                    raise RequestRefused(f"usage.{key}", "must be a known counter, a finite number >= 0")
            body["usage"] = usage
        data, endpoint = self._post(f"{API}/runs/{run_id}/complete", body)
        return runtime.parse_completion(data, endpoint, run_id, status)

    # ------------------------------------------------------------ knowledge on demand
    def knowledge_capabilities(self, route: str) -> KnowledgeCapabilities:
        runtime.route_key(route)
        return knowledge.parse_capabilities(*self._get(f"{API}/workspaces/{route}/knowledge/capabilities"), route)

    def knowledge_search(self, route: str, query: str, *, limit: int | None = None) -> list[KnowledgeHint]:
        runtime.route_key(route)
        body: dict = {"query": runtime.client_text(query, "query", c.KNOWLEDGE_QUERY_MAX)}
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= c.KNOWLEDGE_RESULTS_MAX:
                raise RequestRefused("limit", f"must be 1-{c.KNOWLEDGE_RESULTS_MAX}")
            body["limit"] = limit
        data, endpoint = self._post(f"{API}/workspaces/{route}/knowledge/search", body)
        return knowledge.parse_search(data, endpoint, route, limit)

    def knowledge_read(self, route: str, chunk_id: int, *, offset: int = 0) -> KnowledgePiece:
        runtime.route_key(route)
        for field, value, lowest in (("chunk_id", chunk_id, 1), ("offset", offset, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise RequestRefused(field, f"must be an integer of at least {lowest}")
        body = {"chunk_id": chunk_id} if offset == 0 else {"chunk_id": chunk_id, "offset": offset}
        data, endpoint = self._post(f"{API}/workspaces/{route}/knowledge/read", body)
        return knowledge.parse_read(data, endpoint, route, chunk_id, offset)

    # ------------------------------------------------------------ tool invocations
    def invoke(self, route: str, *, capability_revision: str, agent_run_id: str, tool: str, arguments: dict,
               invocation_id: str | None = None) -> Invocation:
        invocation_id = invocation_id or invocations.new_invocation_id()
        body = invocations.invoke_body(invocation_id=invocation_id, route=route,
                                       capability_revision=capability_revision, agent_run_id=agent_run_id,
                                       tool=tool, arguments=arguments)
        data, endpoint = self._post(f"{API}/tool-invocations", body)
        return invocations.parse_invocation(Reader(endpoint), data, "", invocation_id, route, tool)

    def resume(self, invocation_id: str, *, route: str | None = None, tool: str | None = None) -> Invocation:
        if not c.HEX64.fullmatch(invocation_id):
            raise RequestRefused("invocation_id", "must be 64 lowercase hex digits")
        data, endpoint = self._post(f"{API}/tool-invocations/{invocation_id}/resume")  # no body at all
        return invocations.parse_invocation(Reader(endpoint), data, "", invocation_id, route, tool)

    def inspection_capabilities(self) -> InspectionCapabilities:
        path = f"{API}/tool-invocations/inspection-capabilities"
        response = self.conn.raw("GET", path, f"GET {path}")
        if response.status_code == 404:
            raise Unsupported("this hub does not offer invocation receipts")
        self._inspection = invocations.parse_inspection(answer(response, f"GET {path}"), f"GET {path}")
        return self._inspection

    def receipt(self, invocation_id: str) -> Receipt:
        """The read-only receipt; the hub's inspection capabilities are probed first."""
        if not c.HEX64.fullmatch(invocation_id):
            raise RequestRefused("invocation_id", "must be 64 lowercase hex digits")
        if self._inspection is None:
            self.inspection_capabilities()
        data, endpoint = self._get(f"{API}/tool-invocations/{invocation_id}/receipt")
        return invocations.parse_receipt(data, endpoint, invocation_id)

    # ------------------------------------------------------------ task control
    def task_control_capabilities(self) -> TaskControlCapabilities:
        path = f"{API}/task-control/capabilities"
        response = self.conn.raw("GET", path, f"GET {path}")
        if response.status_code in (404, 405, 501):
            code = self.conn.refused(response, path).code
            if code in (None, "not_found", "method_not_allowed", "TASK_UNSUPPORTED"):
                raise Unsupported("this hub has no task control")
        return system.parse_task_capabilities(answer(response, f"GET {path}"), f"GET {path}")

    def task(self, task_id: str, *, workspace: str, client_conversation_id: str) -> TaskView:
        if not c.UUID.fullmatch(task_id):
            raise RequestRefused("task_id", "must be a UUID")
        runtime.route_key(workspace, "workspace")
        runtime.client_id(client_conversation_id, "client_conversation_id")
        data, endpoint = self._get(f"{API}/tasks/{task_id}",
                                   {"workspace": workspace, "client_conversation_id": client_conversation_id})
        return system.parse_task(data, endpoint, task_id=task_id, session_id=self.session_id,
                                 client_app_id=self.client_app_id, workspace=workspace,
                                 client_conversation_id=client_conversation_id)

    # ------------------------------------------------------------ conversation audit
    def audit_capabilities(self) -> AuditCapabilities:
        path = f"{AUDITS}/capabilities"
        response = self.conn.raw("GET", path, f"GET {path}")
        if response.status_code == 404:  # an older hub: no cross-binding
            return AuditCapabilities(False, None)
        return audit.parse_capabilities(answer(response, f"GET {path}"), f"GET {path}")

    def create_archive(self, route: str, *, client_archive_id: str, client_conversation_id: str,
                       member_session_ids: list[str], member_labels: dict[str, str] | None = None) -> ArchiveHeader:
        body = audit.create_v1_body(client_archive_id=client_archive_id, client_conversation_id=client_conversation_id,
                                    route=route, member_session_ids=member_session_ids, member_labels=member_labels)
        data, endpoint = self._post(AUDITS, body)
        return audit.parse_header(data, endpoint, len(body["member_session_ids"]))

    def create_cross_archive(self, route: str, *, client_archive_id: str, client_conversation_id: str,
                             others: list[tuple[AgentClient, str, str | None]], label: str | None = None
                             ) -> ArchiveHeader:
        """A v2 archive written by this connection on `route`; `others` are the other members'
        own connections, each with its route and label. Capabilities are probed first."""
        if any(other.hub_url != self.hub_url for other, _, _ in others):
            raise RequestRefused("members", "every member must be a connection to the same hub")
        if not self.audit_capabilities().cross_binding_members:
            raise Unsupported("this hub does not support cross-system archives")
        members = [Member(self.session_id, self.client_app_id, route, label)]  # the writer first
        members += [Member(other.session_id, other.client_app_id, other_route, other_label)
                    for other, other_route, other_label in others]
        for member, connection in zip(members, [self] + [o[0] for o in others]):
            view = connection.session()  # each connection's own authorization, app and route
            if view.client_app_id != member.client_app_id or (
                    member.route not in view.allowed_routes and "*" not in view.allowed_routes):
                raise RequestRefused("members", f"the session of {member.client_app_id} does not hold {member.route}")
        body = audit.create_v2_body(client_archive_id=client_archive_id,
                                    client_conversation_id=client_conversation_id, members=members)
        data, endpoint = self._post(AUDITS, body)
        header = audit.parse_header(data, endpoint, len(members))
        if (header.client_app_id, header.route_key) != (self.client_app_id, route):
            Reader(endpoint).fail("client_app_id", "must describe the writer's own binding")
        return header

    def confirm_archive(self, conversation_id: str, member_count: int | None = None) -> ArchiveHeader:
        if not c.UUID.fullmatch(conversation_id):
            raise RequestRefused("conversation_id", "must be a UUID")
        data, endpoint = self._post(f"{AUDITS}/{conversation_id}/confirm", {})
        return audit.parse_header(data, endpoint, member_count, conversation_id)

    def append_events(self, conversation_id: str, events: list[dict], on_batch=None) -> AuditAck | None:
        """Every event, in batches under the limits; returns the last ACK (None for no events)."""
        if not c.UUID.fullmatch(conversation_id):
            raise RequestRefused("conversation_id", "must be a UUID")
        ack = None
        for batch in list(audit.batches(events)):  # all checked before the first batch leaves
            data, endpoint = self._post(f"{AUDITS}/{conversation_id}/events", {"events": batch})
            ack = audit.parse_ack(data, endpoint, conversation_id, batch[-1]["sequence"])
            if on_batch is not None:
                on_batch(batch, ack)
        return ack


__all__ = ["AgentClient"]
