"""A year's volume in a fresh, migrated database, loaded with COPY: the data set other scripts
measure on. Not a benchmark of its own; it keeps its database.

What it makes (`--scale F` multiplies every count): 100,000 conversation audit archives (v1 with
one member, v2 with 2-4 confirmed members) holding 10,000,000 events in turns shaped like the
real ones (turn_start, user_message, run_link, assistant_message(s), turn_end), each archive's
sequences contiguous, its body_sha256 computed by the hub's own `canonical.sha256_json` and its
header counters consistent with its events; one archive of exactly 20,000 events (the limit) and
one as large as the limits allow (20,000 events and about 15 MiB of text) for export. 100,000
runs (most linked from an archive's run_link), their threads and visible messages, tool
invocations with their journal and 10,000 approvals (200 pending, 20 of them with 100 KiB - 1 MiB
snapshots), a 1,000,000-row access log, and the client apps, routes, sessions and admins all of
it names. Times spread over the last ~4 months, relative to when the script runs; everything
else comes from a seeded random.Random, so two runs make the same data.

Configuration and admins go through the operator CLI (in-process), as an operator makes them;
everything else is written with COPY into tables whose keys, indexes and foreign keys are dropped
for the load and rebuilt after it (the index and constraint definitions are compared with the
migrations' and the run fails on any difference). Tables are truncated and loaded in the same
transaction with COPY FREEZE, so their pages are all-visible at once (index-only scans) without a
VACUUM; ANALYZE ends the load.

    python bench/scale.py --data-dir var/scale --json var/scale.json       # embedded server
    BAILING_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test python bench/scale.py \\
        --database bailing_scale --fresh                                    # next to that database
    python bench/scale.py --scale 0.01 --database scale_small --fresh --check-hub  # then read by the hub
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import requests
from psycopg.copy import QueuedLibpqWriter
from sqlalchemy.engine import make_url

from common import DEMO_SECRETS, EXAMPLES, PASSWORD, PROJECT_ROOT, SQL_DIR, Operator, bearer, console_login

from admin_app import embedded_pg, limits, migrations
from admin_app.canonical import canonical_json, sha256_json
from admin_app.catalog.projection import forced_approval, project
from admin_app.catalog.search import rank
from admin_app.conversation_audit.archives import CREATE_V2
from admin_app.evidence import leaves, merkle
from admin_app.identity import tokens
from admin_app.identity.models import AgentSession, Route
from admin_app.identity.sessions import identity_hash
from admin_app.invocations import dispatch
from admin_app.invocations.policy import TypeMismatch, approval_policy
from admin_app.invocations.service import sha256_bytes
from admin_app.invocations.service import summary as approval_summary
from admin_app.runtime import profile as runtime_profile
from admin_app.runtime.turns import TURN_SCHEMA

DEFAULTS = {"archives": 100_000, "events": 10_000_000, "runs": 100_000, "approvals": 10_000,
            "access_log": 1_000_000}
BIG_EVENTS = limits.AUDIT_ARCHIVE_MAX_EVENTS       # the "big transcript": exactly the limit
TEXT_LIMIT = limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES
SPAN_DAYS = 120                                    # archives and reads spread over ~4 months
CHUNK_EVENTS = 50_000                              # events generated (and sorted by time) per block
DAY = 86400.0
ADMIN_USER = "scale-admin"
BUSINESS_URL = "http://127.0.0.1:9"                # the providers' base URL: never called

# Tables loaded with COPY: their keys, indexes and foreign keys are rebuilt after the load.
BULK = ("bz_agent_conversation_archives", "bz_agent_conversation_members", "bz_agent_conversation_events",
        "bz_threads", "bz_runs", "bz_messages", "bz_tool_invocations", "bz_tool_approvals",
        "bz_tool_journal", "bz_access_log", "bz_evidence_leaves", "bz_evidence_nodes")

COLUMNS = {
    "bz_agent_sessions": ("id", "client_app_id", "principal", "on_behalf_of", "allowed_routes", "device_label",
                          "access_token_hash", "access_expires_at", "refresh_token_hash", "refresh_expires_at",
                          "identity_hash", "created_at", "refreshed_at", "revoked_at", "task_enrolled"),
    "bz_agent_conversation_archives": ("id", "client_archive_id", "client_conversation_id", "creator_session_id",
                                       "client_app_id", "route_key", "input_hash", "state", "member_count",
                                       "confirmed_count", "last_sequence", "message_count", "turn_count",
                                       "text_bytes", "running_turn_id", "last_turn_status", "created_at",
                                       "updated_at", "membership_version"),
    "bz_agent_conversation_members": ("archive_id", "session_id", "position", "label", "confirmed_at",
                                      "principal", "on_behalf_of", "identity_hash", "client_app_id",
                                      "route_key", "client_name"),
    "bz_agent_conversation_events": ("archive_id", "sequence", "event_id", "client_turn_id", "kind", "content",
                                     "status", "run_id", "member_session_id", "thread_id", "body_sha256",
                                     "created_at", "content_salt"),
    "bz_evidence_leaves": ("idx", "kind", "ref", "leaf_hash", "created_at"),
    "bz_evidence_nodes": ("level", "idx", "hash"),
    "bz_threads": ("id", "session_id", "route_key", "client_conversation_id", "created_at"),
    "bz_runs": ("id", "thread_id", "session_id", "client_app_id", "route_key", "client_conversation_id",
                "client_turn_id", "user_message_id", "request_hash", "context", "profile_revision",
                "capability_revision", "status", "completion_hash", "completion", "created_at", "completed_at"),
    "bz_messages": ("id", "thread_id", "run_id", "role", "message_id", "content", "created_at"),
    "bz_tool_invocations": ("id", "session_id", "invocation_id", "route_key", "run_id", "tool", "provider", "scope",
                            "request_hash", "args_hash", "argument_keys", "execution_fingerprint",
                            "capability_revision", "on_behalf_of", "status", "reason", "business_status",
                            "result_body", "created_at", "updated_at"),
    "bz_tool_approvals": ("id", "job_id", "tool", "route_key", "risk", "policy", "prompt", "snapshot", "args_hash",
                          "snapshot_bytes", "argument_keys", "summary", "principal", "on_behalf_of", "status",
                          "decided_by", "decided_at", "decision_reason", "consumed_at", "created_at", "number",
                          "expires_at"),
    "bz_tool_journal": ("job_id", "state", "idempotency_key", "method", "path", "body_sha256", "http_status",
                        "failure", "started_at", "finished_at"),
    "bz_access_log": ("id", "admin_id", "username", "action", "target", "at", "channel", "admin_token_id",
                      "first_sequence", "last_sequence"),
}


# ---------------------------------------------------------------- sizes

@dataclass(frozen=True)
class Sizes:
    archives: int
    events: int
    runs: int
    approvals: int
    access_log: int
    sessions: int
    admins: int
    pending: int
    large_pending: int
    special_events: int

    @classmethod
    def of(cls, args: argparse.Namespace) -> Sizes:
        s = args.scale
        archives, events = max(4, round(args.archives * s)), max(40, round(args.events * s))
        approvals = round(args.approvals * s)
        pending = min(approvals, max(1, round(approvals / 50))) if approvals else 0  # 200 of 10,000
        # The special archives keep the limit's 20,000 events while the data set can hold them.
        special = BIG_EVENTS if events >= 5 * BIG_EVENTS else max(8, events // 10)
        return cls(archives=archives, events=events, runs=round(args.runs * s), approvals=approvals,
                   access_log=round(args.access_log * s), sessions=max(20, round(300 * math.sqrt(s))),
                   admins=max(6, min(30, round(90 * math.sqrt(s)))), pending=pending,
                   large_pending=min(pending, max(1, round(pending / 10))), special_events=special)


# ---------------------------------------------------------------- COPY text

def esc(value: str) -> str:
    """A value in COPY's text format."""
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def jsonb(value) -> str:
    return "\\N" if value is None else esc(json.dumps(value, ensure_ascii=False))


def opt(value) -> str:
    return "\\N" if value is None else esc(str(value))


def ts(epoch: float | None) -> str:
    return "\\N" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(sep=" ")


def iso_z(epoch: float) -> str:
    """As the hub writes times on the wire (canonical.iso)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def text_array(values) -> str:
    return "{" + ",".join(values) + "}"


def bytea(value: bytes | None) -> str:
    return "\\N" if value is None else "\\\\x" + value.hex()


def row(*values) -> str:
    return "\t".join(values) + "\n"


def new_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class EvidenceStream:
    """The evidence log's leaves (in the order given) and every complete subtree they make, as
    bz_evidence_append (sql/084) stores them, streamed into their tables with COPY: a compact
    range of at most one subtree per level is kept in memory. It starts the log empty (the leaves
    of the configuration and admins made before are dropped: the backfill after the load gives
    them new ones)."""

    def __init__(self, url: str):
        self.leaves = Stream(url, "bz_evidence_leaves")
        self.nodes = Stream(url, "bz_evidence_nodes")
        self.size = 0
        self.stack: list[tuple[int, int, bytes]] = []  # (level, index, hash), largest first
        self.seconds = 0.0

    def write(self, items: list[tuple[str, str, bytes, float]]) -> None:
        """(kind, ref, leaf hash, time) in log order."""
        started = time.perf_counter()
        leaf_lines, node_lines = [], []
        stack, node = self.stack, merkle.node_hash
        for kind, ref, leaf, at in items:
            index = self.size
            self.size += 1
            leaf_lines.append(row(str(index), kind, esc(ref), bytea(leaf), ts(at)))
            node_lines.append(f"0\t{index}\t\\\\x{leaf.hex()}\n")
            level, hashed = 0, leaf
            while stack and stack[-1][0] == level:
                _, left_index, left = stack.pop()
                level, index, hashed = level + 1, left_index >> 1, node(left, hashed)
                node_lines.append(f"{level}\t{index}\t\\\\x{hashed.hex()}\n")
            stack.append((level, index, hashed))
        self.seconds += time.perf_counter() - started
        self.leaves.write(leaf_lines)
        self.nodes.write(node_lines)

    def close(self) -> dict[str, Stream]:
        self.leaves.close()
        self.nodes.close()
        return {"bz_evidence_leaves": self.leaves, "bz_evidence_nodes": self.nodes}


class Stream:
    """One table's COPY ... FROM STDIN, open for the whole load on a connection of its own, in the
    transaction that truncated the table (so COPY FREEZE applies); blocks are written whole."""

    def __init__(self, url: str, table: str, freeze: bool = True):
        self.table, self.rows, self.bytes, self.write_seconds = table, 0, 0, 0.0
        self.conn = psycopg.connect(url)
        self.cur = self.conn.cursor()
        if freeze:
            self.cur.execute(f"TRUNCATE {table}")
        cols = ", ".join(COLUMNS[table])
        options = " WITH (FREEZE)" if freeze else ""
        self._copy_cm = self.cur.copy(f"COPY {table} ({cols}) FROM STDIN{options}",
                                      writer=QueuedLibpqWriter(self.cur))
        self.copy = self._copy_cm.__enter__()

    def write(self, lines: list[str]) -> None:
        if not lines:
            return
        started = time.perf_counter()
        block = "".join(lines)
        self.copy.write(block)
        self.rows += len(lines)
        self.bytes += len(block)
        self.write_seconds += time.perf_counter() - started

    def close(self) -> None:
        started = time.perf_counter()
        self._copy_cm.__exit__(None, None, None)
        self.conn.commit()
        self.conn.close()
        self.write_seconds += time.perf_counter() - started


# ---------------------------------------------------------------- text

EN = """account invoice order customer credit limit payment delivery shipment warehouse stock
reservation approval refund discount contract renewal quote price tax VAT currency EUR USD JPY
balance overdue reminder statement address postal code city country contact email phone billing
shipping tracking carrier pallet carton SKU quantity unit backorder return damaged replacement
supplier purchase receipt goods inbound outbound picking packing dispatch schedule deadline Friday
Monday tomorrow yesterday morning afternoon week month quarter year report summary export CSV file
import update change check confirm cancel verify review approve deny escalate assign close open
pending completed failed missing duplicate merged segment enterprise retail wholesale partner
region Hamburg Munich Osaka Tokyo Lyon Madrid Chicago the a an of for with from to in on at by and
or but not if when then also already still please thanks could would should can will may need
want asked told said found noticed seems looks customer's team manager clerk agent system portal
record note history timeline status level risk limit threshold amount total net gross line item
lines batch run job ticket case issue problem error timeout retry again later now today soon""".split()
JA = ["請求書を確認しました", "在庫が不足しています", "納期は来週の金曜日です", "お客様から問い合わせがありました",
      "与信限度額を変更してください", "出荷が遅れています", "注文をキャンセルしたいそうです", "支払いが確認できません",
      "担当者に連絡します", "住所の変更をお願いします", "見積書を送付しました", "返品の手続きを進めます",
      "倉庫の在庫を再確認してください", "承認をお待ちしています", "東京の倉庫から発送します", "大阪支店の案件です",
      "契約の更新について", "割引率を確認中です", "明日の午前中に対応します", "システムの状態を確認しました"]
SKUS = [f"{p}-{n:04d}" for p in ("CHR", "DSK", "LMP", "ABC", "TBL", "SHF") for n in range(1000, 1040)]


class TextSource:
    """Messages drawn from a pool of sentences (mostly English, some Japanese, some mixed), with
    fresh ids mixed in, so that a content search finds common words everywhere and an id in a
    handful of messages."""

    def __init__(self, rng: random.Random, pool_size: int = 20_000):
        self.rng = rng
        self.pool = [self._sentence() for _ in range(pool_size)]
        self.mean = sum(len(s) for s in self.pool) / len(self.pool) + 1

    def _sentence(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.12:
            return "、".join(rng.sample(JA, rng.randint(1, 3))) + "。"
        words = rng.choices(EN, k=rng.randint(3, 20))
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(".?.!.")
        if kind < 0.15:
            sentence += " " + rng.choice(JA) + "。"
        return sentence

    def _id(self) -> str:
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            return f"ORD-{rng.randrange(1_000_000):06d}"
        if pick < 0.55:
            return f"C-{rng.randrange(100_000, 1_000_000)}"
        if pick < 0.7:
            return f"INV-{rng.randrange(100_000):05d}"
        if pick < 0.85:
            return rng.choice(SKUS)
        return f"ticket {rng.getrandbits(32):08x}"

    def message(self, chars: int, paragraphs: bool) -> str:
        rng = self.rng
        parts = rng.choices(self.pool, k=max(1, round(chars / self.mean)))
        if rng.random() < 0.5:
            parts.insert(rng.randrange(len(parts) + 1), f"({self._id()})")
        if paragraphs and len(parts) > 4:
            step = rng.randint(3, 5)
            return "\n\n".join(" ".join(parts[i:i + step]) for i in range(0, len(parts), step))
        return " ".join(parts)

    def user(self) -> str:
        return self.message(min(1500, max(12, int(self.rng.lognormvariate(math.log(90), 0.8)))), False)

    def assistant(self, long: bool = False) -> str:
        chars = self.rng.randint(2400, 3400) if long else \
            min(6000, max(60, int(self.rng.lognormvariate(math.log(550), 0.75))))
        return self.message(chars, True)


# ---------------------------------------------------------------- configuration

def hub_config() -> dict:
    """Two providers (the examples' CRM and ERP), five routes, five client apps."""
    crm, erp = str(EXAMPLES / "crm.openapi.json"), str(EXAMPLES / "erp.openapi.json")
    tenants = [f"tenant-{n}" for n in range(1, 13)]

    def route(key, name, provider, allow, writes, **extra):
        return {"route_key": key, "name": name, "description": f"{name} of the scale data set.",
                "enabled": True, "audience": extra.pop("audience", {"enabled": False}),
                "target_config": {"system_prompt": f"You help the {name.lower()}."},
                "agent_client": {"enabled": True, "instructions": "Be brief. Ask before changing anything.",
                                 "memory": {"recent_messages": 12}, "knowledge": {"enabled": False}},
                "tools": {"sources": [{"provider": provider, "allow": allow}],
                          "agent_direct": {"enabled": True, "write_tools": writes,
                                           "force_approval_tools": extra.pop("forced", [])}},
                **extra}

    return {
        "tool_providers": [
            {"name": "demo-crm", "base_url": BUSINESS_URL + "/crm", "openapi": crm, "secret_env": "DEMO_CRM_SECRET"},
            {"name": "demo-erp", "base_url": BUSINESS_URL + "/erp", "openapi": erp, "secret_env": "DEMO_ERP_SECRET"},
        ],
        "routes": [
            route("customers", "Customer desk", "demo-crm", ["customer.read", "customer.write"],
                  ["customer_update_credit_limit", "customer_note_add", "customer_update_email", "customer_merge"],
                  forced=["customer_update_email"], audience={"enabled": True, "tenants": tenants}),
            route("support", "Support desk", "demo-crm", ["customer.read"], []),
            route("orders", "Order desk", "demo-erp", ["order.read", "order.write", "inventory.read"],
                  ["order_create", "order_cancel", "order_update_shipping_address"],
                  approvals={"ttl_seconds": 7 * 86400}),
            route("inventory", "Stock desk", "demo-erp", ["inventory.read", "inventory.write"],
                  ["inventory_adjust", "inventory_reserve"]),
            route("imports", "Order imports", "demo-erp", ["order.read", "order.write"], ["order_import"]),
        ],
        "client_apps": [
            {"app_id": "crm-web", "name": "CRM", "allowed_routes": ["customers", "support"], "enabled": True},
            {"app_id": "erp-web", "name": "ERP", "allowed_routes": ["orders", "inventory", "imports"],
             "enabled": True},
            {"app_id": "helpdesk", "name": "Helpdesk", "allowed_routes": ["support", "customers"], "enabled": True},
            {"app_id": "warehouse", "name": "Warehouse app", "allowed_routes": ["inventory"], "enabled": True},
            {"app_id": "mobile", "name": "Field sales", "allowed_routes": ["customers", "orders"], "enabled": True},
        ],
    }


APP_WEIGHTS = {"crm-web": 35, "erp-web": 30, "helpdesk": 15, "warehouse": 10, "mobile": 10}


def tool_examples() -> dict[str, list[dict]]:
    """Each tool's argument examples, from its ACC guidance in the example documents."""
    found: dict[str, list[dict]] = {}
    for name in ("crm.openapi.json", "erp.openapi.json"):
        doc = json.loads((EXAMPLES / name).read_text("utf-8"))
        for ops in doc["paths"].values():
            for op in ops.values():
                if isinstance(op, dict) and "operationId" in op:
                    acc = op.get("x-agent-capability") or {}
                    found[op["operationId"]] = list((acc.get("guidance") or {}).get("examples") or [])
    found["order_import"] = [{"file_name": "orders.csv", "csv": ""}]
    return found


IDS = re.compile(r"\b(C-1\d{5}|ORD-\d{6})\b")


def vary(value, rng: random.Random):
    """An example's arguments with fresh customer and order ids."""
    if isinstance(value, dict):
        return {k: vary(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [vary(v, rng) for v in value]
    if isinstance(value, str):
        return IDS.sub(lambda m: f"C-{rng.randrange(100000, 1000000)}" if m.group(1).startswith("C-")
                       else f"ORD-{rng.randrange(1_000_000):06d}", value)
    return value


def order_csv(rng: random.Random, size: int) -> str:
    """An order file of about `size` bytes, with notes in several scripts."""
    notes = ["Lieferung bis Freitag", "livraison express", "请在周五前送达", "配送は金曜日まで", "entrega urgente", ""]
    lines, length = ["customer_id,sku,quantity,unit_price,currency,note"], 50
    while length < size:
        line = (f"C-{rng.randrange(100000, 1000000)},{rng.choice(SKUS)},{rng.randint(1, 40)},"
                f"{rng.randrange(100, 50000) / 100:.2f},EUR,{rng.choice(notes)}")
        lines.append(line)
        length += len(line.encode()) + 1
    return "\n".join(lines)


@dataclass
class ToolFacts:
    visible: object                    # catalog.projection.Visible
    examples: list[dict]
    forced: bool


@dataclass
class RouteFacts:
    key: str
    ttl: dict                          # the route's `approvals`
    profile_revision: str
    memory: dict
    static_context: dict[bool, dict]   # by "acts for a subject": instructions, governance, tools
    revision: dict[bool, str]
    tools: dict[bool, dict[str, ToolFacts]]


def route_facts(app, examples: dict[str, list[dict]]) -> dict[str, RouteFacts]:
    """What the hub would answer each route's turns with, computed once by its own code."""
    found = {}
    with app.extensions["bailing"].db.session() as db:
        for route in db.query(Route).order_by(Route.route_key):
            prof = runtime_profile.build_profile(db, route)
            forced = forced_approval((route.tools or {}).get("agent_direct") or {})
            facts = RouteFacts(route.route_key, dict(route.approvals or {}), prof["revision"],
                               runtime_profile.memory_settings(route), {}, {}, {})
            for obo in (True, False):
                probe = AgentSession(on_behalf_of="tenant-1:user-1" if obo else None, principal=None)
                projection = project(db, route, probe)
                active = [v.projection() for v in rank(projection, "customer order invoice stock")
                          [:runtime_profile.active_tool_limit(route)]]
                facts.revision[obo] = projection.revision
                facts.static_context[obo] = {"instructions": prof["instructions"], "governance": prof["governance"],
                                             "active_tools": active}
                facts.tools[obo] = {name: ToolFacts(v, examples.get(name) or [{}], name in forced)
                                    for name, v in projection.tools.items()}
            found[route.route_key] = facts
    return found


# ---------------------------------------------------------------- sessions and admins

@dataclass
class Sess:
    id: str
    app: str
    routes: list[str]
    principal: dict | None
    obo: str | None
    created: float
    revoked: float | None
    label: str
    access: str
    refresh: str
    identity: str = ""

    def __post_init__(self):
        self.identity = identity_hash(self.app, self.principal, self.obo)


def make_sessions(rng: random.Random, count: int, apps: dict[str, list[str]], start: float,
                  now: float) -> list[Sess]:
    users = max(8, count * 2 // 5)
    out = []
    for i in range(count):
        user = rng.randrange(users)
        tenant = f"tenant-{1 + user % 12}"
        app = rng.choices(list(APP_WEIGHTS), weights=list(APP_WEIGHTS.values()))[0]
        principal = {"id": f"user-{user:04d}", "tenant": tenant, "roles": [rng.choice(["clerk", "lead", "sales"])]}
        obo = f"{tenant}:user-{user:04d}" if rng.random() < 0.9 else None
        created = start - rng.uniform(0, 30 * DAY)
        revoked = now - rng.uniform(DAY, 20 * DAY) if i >= 8 and rng.random() < 0.03 else None
        out.append(Sess(new_uuid(rng), app, list(apps[app]), principal, obo, created, revoked,
                        f"{app}-user{user:04d}-{i}", tokens.new_token(tokens.ACCESS)[0],
                        tokens.new_token(tokens.REFRESH)[0]))
    return out


def session_line(s: Sess, now: float) -> str:
    refreshed = now - 3600
    return row(s.id, s.app, jsonb(s.principal), opt(s.obo), text_array(s.routes), esc(s.label),
               tokens.hash_token(s.access), ts(refreshed + 86399), tokens.hash_token(s.refresh),
               ts(s.created + 365 * DAY), s.identity, ts(s.created), ts(refreshed), ts(s.revoked), "f")


@dataclass
class AdminUser:
    id: int
    username: str
    role: str
    token_id: int | None


ADMIN_NAMES = ["a.tanaka", "m.schmidt", "j.garcia", "l.martin", "k.suzuki", "s.okafor", "p.rossi", "e.nilsson",
               "h.yamamoto", "c.dubois", "r.kowalski", "t.nguyen", "f.costa", "d.murphy", "y.sato", "b.weber",
               "n.ivanova", "o.haddad", "g.lopez", "i.moreau", "u.kim", "v.novak", "w.chen", "x.silva",
               "z.fischer", "q.ali", "ai.ito", "ben.ott", "cy.roy"]


def make_admins(operator: Operator, count: int) -> str:
    """Admins of every role, each with a personal API token, through the CLI (the console admin
    first); returns the console admin's token."""
    roles = ["auditor", "approver", "support", "admin"]
    wanted = [(ADMIN_USER, "admin")] + [(ADMIN_NAMES[i], roles[i % 4]) for i in range(count - 1)]
    api_token = ""
    for i, (name, role) in enumerate(wanted):
        token = operator.admin(name, role)
        if i == 0:
            api_token = token
    return api_token


def load_admins(url: str) -> list[AdminUser]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("""SELECT a.id, a.username, a.role, min(t.id) FROM bz_admins a
                               LEFT JOIN bz_admin_tokens t ON t.admin_id = a.id
                               GROUP BY a.id ORDER BY a.id""").fetchall()
    return [AdminUser(*r) for r in rows]


# ---------------------------------------------------------------- archives: the plan

@dataclass
class Member:
    sess: Sess
    route: str
    label: str | None


@dataclass
class Plan:
    id: str
    client_archive_id: str
    conversation: str
    created: float
    duration: float
    size: int
    version: int
    members: list[Member]
    special: str | None = None
    running_end: bool = False


def archive_sizes(rng: random.Random, count: int, total: int) -> list[int]:
    """`count` sizes summing to `total`: heavy-tailed (lognormal), within 2..the limit."""
    raw = [rng.lognormvariate(0, 1.1) for _ in range(count)]
    scale = total / sum(raw)
    sizes = [min(BIG_EVENTS, max(2, int(r * scale))) for r in raw]
    gap, i = total - sum(sizes), 0
    while gap:
        step = 1 if gap > 0 else -1
        j = i % count
        if 2 <= sizes[j] + step <= BIG_EVENTS:
            sizes[j] += step
            gap -= step
        i += 1
    return sizes


def pick_members(rng: random.Random, sessions: list[Sess], version: int, live: list[Sess]) -> list[Member]:
    creator = rng.choice(live)
    if version == 1:
        return [Member(creator, rng.choice(creator.routes), None)]
    members = [Member(creator, rng.choice(creator.routes), _label(rng, creator))]
    others = [s for s in rng.sample(sessions, min(len(sessions), 8)) if s.id != creator.id]
    for other in others[:rng.randint(1, 3)]:
        members.append(Member(other, rng.choice(other.routes), _label(rng, other) if rng.random() < 0.8 else None))
    return members


def _label(rng: random.Random, s: Sess) -> str:
    name = rng.choice(["Alice", "Bob", "Chen", "Dana", "Emre", "Fumiko", "Gita", "Hiro", "佐藤", "田中"])
    return f"{name} ({s.app})"


def plan_archives(rng: random.Random, sizes: Sizes, sessions: list[Sess], start: float, end: float) -> list[Plan]:
    live = [s for s in sessions if s.revoked is None]
    regular = sizes.archives - 2
    counts = archive_sizes(rng, regular, sizes.events - 2 * sizes.special_events)
    counts += [sizes.special_events, sizes.special_events]
    plans = []
    for i, size in enumerate(counts):
        special = {regular: "big", regular + 1: "biggest"}.get(i)
        version = 1 if special or rng.random() < 0.7 else 2
        members = pick_members(rng, sessions, version, live)
        # About 3 minutes between turns, on average; long archives span days to weeks.
        duration = min(end - start - DAY, (size / 4.6) * rng.uniform(60, 300))
        created = rng.uniform(start, end - duration - 60)
        plans.append(Plan(new_uuid(rng), new_uuid(rng), f"conv-{rng.getrandbits(48):012x}", created, duration,
                          size, version, members, special, running_end=not special and rng.random() < 0.03))
    plans.sort(key=lambda p: p.created)
    return plans


def input_hash(plan: Plan) -> str:
    """As archives.create freezes it: the normalised creation input, hashed."""
    if plan.version == 1:
        creator = plan.members[0]
        normalised = {"client_archive_id": plan.client_archive_id, "client_conversation_id": plan.conversation,
                      "route": creator.route, "member_session_ids": [creator.sess.id], "member_labels": {}}
    else:
        members = [{"session_id": m.sess.id, "client_app_id": m.sess.app, "route": m.route,
                    **({"label": m.label} if m.label is not None else {})} for m in plan.members]
        normalised = {"schema": CREATE_V2, "client_archive_id": plan.client_archive_id,
                      "client_conversation_id": plan.conversation,
                      "members": sorted(members, key=lambda m: m["session_id"])}
    return sha256_json({"version": plan.version, "input": normalised})


# ---------------------------------------------------------------- archives: turns, runs, messages

@dataclass
class Turn:
    link: bool
    extra: int               # assistant messages beyond the first
    partial: int = 0         # a running turn's events (1-6: no turn_end); 0 for a whole turn

    @property
    def length(self) -> int:
        return self.partial or 4 + self.link + self.extra


@dataclass
class RunRef:
    """What the invocation phase needs of a run."""
    id: str
    sess: Sess
    route: str
    created: float
    completed: float | None
    status: str


@dataclass
class World:
    """Everything the generation shares: its random source, the hub's facts, the counters."""
    rng: random.Random
    text: TextSource
    routes: dict[str, RouteFacts]
    app_names: dict[str, str]
    now: float
    link_p: float
    runs_left: int
    next_thread: int = 1
    next_message: int = 1
    threads: dict[tuple, tuple[int, deque]] = field(default_factory=dict)
    runs: list[RunRef] = field(default_factory=list)


def turn_shapes(rng: random.Random, size: int, link_p: float, running_end: bool, plain: bool) -> list[Turn]:
    """Turns whose events add up to exactly `size`; the last is a running turn when asked, or
    when fewer than four events remain."""
    turns: list[Turn] = []
    remaining = size
    tail = min(remaining, rng.randint(1, 3)) if running_end else 0
    remaining -= tail
    while remaining >= 10:
        link = not plain and rng.random() < link_p
        extra = 0 if plain else rng.choices((0, 1, 2), (85, 12, 3))[0]
        turns.append(Turn(link, extra))
        remaining -= turns[-1].length
    if remaining >= 8:
        turns.append(Turn(False, 0))
        remaining -= 4
    if remaining >= 4:
        link = not plain and remaining >= 5 and rng.random() < link_p
        turns.append(Turn(link, remaining - 4 - link))
        remaining = 0
    tail += remaining
    if tail:
        turns.append(Turn(tail >= 3 and rng.random() < link_p, 0, partial=tail))
    return turns


def turn_times(rng: random.Random, plan: Plan, count: int) -> list[float]:
    """Start times of `count` turns spread over the plan's duration (irregular gaps)."""
    gaps = [rng.expovariate(1.0) ** 1.5 for _ in range(count)]
    scale = plan.duration / (sum(gaps) or 1)
    first = plan.created + 60
    times, t = [], first
    for g in gaps:
        times.append(t)
        t += g * scale
    return times


class ArchiveWriter:
    """One archive's rows: header, members, events (with their times, for sorting), and the
    threads, runs and messages of its run links."""

    def __init__(self, world: World, plan: Plan):
        self.w, self.plan = world, plan
        self.events: list[tuple[float, str, str, bytes]] = []  # (time, COPY line, leaf ref, leaf hash)
        self.runs: list[str] = []
        self.threads: list[str] = []
        self.messages: list[tuple[float, str]] = []
        self.seq = self.messages_count = self.turns = self.text_bytes = 0
        self.salts = random.Random(plan.id)  # apart from the world's: the rest stays as it was
        self.last_status: str | None = None
        self.running: str | None = None
        self.updated = plan.created

    def build(self) -> tuple[str, list[str]]:
        plan, rng = self.plan, self.w.rng
        plain = plan.special == "biggest"
        shapes = turn_shapes(rng, plan.size, 0 if plain else self.w.link_p, plan.running_end, plain)
        for n, (turn, start) in enumerate(zip(shapes, turn_times(rng, plan, len(shapes)))):
            self._turn(f"t{n + 1}-{rng.getrandbits(32):08x}", turn, start, long=plain)
        return self._header(), self._members()

    def _event(self, at: float, turn_id: str, kind: str, thread: int | None = None, **extra) -> None:
        self.seq += 1
        event = {"event_id": f"e{self.seq}-{self.w.rng.getrandbits(40):010x}", "sequence": self.seq,
                 "client_turn_id": turn_id, "kind": kind, **extra}
        digest = sha256_json(event)
        content = extra.get("content")
        # The message's salt and the event's leaf, as conversation_audit.events.write_batch makes them.
        salt = None if content is None else self.salts.randbytes(leaves.SALT_BYTES)
        commitment = None if salt is None else leaves.commitment(salt, content)
        leaf = merkle.leaf_hash(leaves.event_data(self.plan.id, {**event, "thread_id": thread}, commitment))
        self.events.append((at, row(self.plan.id, str(self.seq), event["event_id"], turn_id, kind,
                                    "\\N" if content is None else esc(content), opt(extra.get("status")),
                                    opt(extra.get("run_id")), opt(extra.get("member_session_id")),
                                    opt(thread), digest, ts(at), bytea(salt)),
                            leaves.event_ref(self.plan.id, self.seq), leaf))
        self.updated = max(self.updated, at)

    def _content(self, text: str) -> str:
        """The text, cut if the archive's text limit would be passed."""
        size = len(text.encode())
        room = TEXT_LIMIT - self.text_bytes
        if size > room:
            text = text.encode()[:max(1, room - 4)].decode("utf-8", "ignore") or "."
            size = len(text.encode())
        self.text_bytes += size
        self.messages_count += 1
        return text

    def _turn(self, turn_id: str, turn: Turn, start: float, long: bool) -> None:
        rng, text = self.w.rng, self.w.text
        end = start + rng.uniform(3, 90)
        self.turns += 1
        self._event(start, turn_id, "turn_start")
        if turn.partial == 1:
            return self._still_running(turn_id)
        user = self._content(text.user())
        self._event(start, turn_id, "user_message", content=user)
        run = self._link(turn_id, turn, start, end, user) if turn.link else None
        # The events left for answers: a link with no run left to take gives its place to one.
        answers = [self._content(text.assistant(long))
                   for _ in range((turn.partial or turn.length - 1) - 2 - (run is not None))]
        for answer in answers:
            self._event(end, turn_id, "assistant_message", content=answer)
        if turn.partial:
            return self._still_running(turn_id, run)
        status = rng.choices(("completed", "failed", "cancelled"), (93, 4, 3))[0]
        self._event(end, turn_id, "turn_end", status=status)
        self.last_status, self.running = status, None
        if run:
            self._finish_run(run, status, answers[0], end)

    def _still_running(self, turn_id: str, run: dict | None = None) -> None:
        self.last_status, self.running = "running", turn_id
        if run:
            self.runs.append(finish_run(self.w, run, "prepared", None, None, self.messages))

    def _link(self, turn_id: str, turn: Turn, start: float, end: float, user: str) -> dict | None:
        if self.w.runs_left <= 0:
            return None
        self.w.runs_left -= 1
        rng = self.w.rng
        members = self.plan.members
        member = members[0] if len(members) == 1 or rng.random() < 0.6 else rng.choice(members[1:])
        run = start_run(self.w, member.sess, member.route, self.plan.conversation, turn_id, user, start + 0.5,
                        self.threads, self.messages)
        self._event(start if turn.partial else end, turn_id, "run_link", run_id=run["id"],
                    member_session_id=member.sess.id, thread=run["thread"])
        return run

    def _finish_run(self, run: dict, turn_status: str, answer: str, end: float) -> None:
        status = {"completed": "completed" if self.w.rng.random() < 0.98 else "prepared"}.get(turn_status, turn_status)
        self.runs.append(finish_run(self.w, run, status, answer, end - 0.2, self.messages))

    def _header(self) -> str:
        p = self.plan
        creator = p.members[0]
        return row(p.id, p.client_archive_id, p.conversation, creator.sess.id, creator.sess.app, creator.route,
                   input_hash(p), "ready", str(len(p.members)), str(len(p.members)), str(self.seq),
                   str(self.messages_count), str(self.turns), str(self.text_bytes), opt(self.running),
                   opt(self.last_status), ts(p.created), ts(self.updated), str(p.version))

    def _members(self) -> list[str]:
        p, out = self.plan, []
        for position, m in enumerate(p.members):
            confirmed = p.created + (0 if position == 0 else self.w.rng.uniform(1, 55))
            v2 = p.version == 2
            out.append(row(p.id, m.sess.id, str(position), opt(m.label), ts(confirmed), jsonb(m.sess.principal),
                           opt(m.sess.obo), m.sess.identity, m.sess.app if v2 else "\\N",
                           m.route if v2 else "\\N", esc(self.w.app_names[m.sess.app]) if v2 else "\\N"))
        return out


def thread_of(world: World, sess: Sess, route: str, conversation: str, at: float, out: list[str]) -> tuple[int, deque]:
    key = (sess.id, route, conversation)
    found = world.threads.get(key)
    if found is None:
        found = (world.next_thread, deque(maxlen=12))
        world.next_thread += 1
        world.threads[key] = found
        out.append(row(str(found[0]), sess.id, route, conversation, ts(at)))
    return found


def start_run(world: World, sess: Sess, route: str, conversation: str, turn_id: str, user: str, at: float,
              threads_out: list[str], messages_out: list[tuple[float, str]]) -> dict:
    """A prepared turn as turns.prepare_turn freezes it: request hash, context, the user message."""
    thread_id, memory = thread_of(world, sess, route, conversation, at, threads_out)
    run_id = new_uuid(world.rng)
    user_message_id = f"{turn_id}:user"
    request = {"client_conversation_id": conversation, "client_turn_id": turn_id,
               "user_message_id": user_message_id, "user_input": user}
    facts = world.routes[route]
    obo = sess.obo is not None
    static = facts.static_context[obo]
    recent = recent_memory(memory, facts.memory)
    context = {"schema_version": TURN_SCHEMA, "run_id": run_id, "route": route, "client_conversation_id": conversation,
               "client_turn_id": turn_id, "user_message_id": user_message_id,
               "profile_revision": facts.profile_revision, "capability_revision": facts.revision[obo],
               "context": {"instructions": static["instructions"], "page_context": {}, "renderers": [],
                           "memory": recent,
                           "memory_refs": [{"thread_id": thread_id, "summary_upto_id": 0,
                                            "prior_messages": len(recent["recent"])}],
                           "knowledge": [], "knowledge_refs": [], "governance": static["governance"]},
               "active_tools": static["active_tools"]}
    memory.append(("user", user_message_id, user, iso_z(at)))
    messages_out.append((at, f"\t{thread_id}\t{run_id}\tuser\t{esc(user_message_id)}\t{esc(user)}\t{ts(at)}\n"))
    return {"id": run_id, "thread": thread_id, "sess": sess, "route": route, "conversation": conversation,
            "turn": turn_id, "user_message_id": user_message_id, "created": at,
            "request_hash": sha256_json({"route": route, "request": request}), "context": context,
            "memory": memory}


def recent_memory(memory: deque, settings: dict) -> dict:
    """memory.recent over the thread's last messages: newest kept first, within the budget."""
    budget, per_message = settings["recent_budget_chars"], settings["per_message_chars"]
    entries, used = [], 0
    for role, message_id, content, created in reversed(memory):
        text = content[:per_message]
        if used + len(text) > budget:
            break
        used += len(text)
        entries.append({"role": role, "message_id": message_id, "content": text, "created_at": created,
                        "truncated": len(text) < len(content)})
    entries.reverse()
    return {"summary": None, "recent": entries, "omitted_messages": len(memory) - len(entries),
            "limits": {"recent_messages": settings["recent_messages"], "recent_budget_chars": budget,
                       "per_message_chars": per_message}}


def finish_run(world: World, run: dict, status: str, answer: str | None, at: float | None,
               messages_out: list[tuple[float, str]]) -> str:
    """The run's row; a completed (or failed, cancelled) one with its completion and answer."""
    completion = completion_hash = None
    if status != "prepared" and answer is not None and at is not None:
        rng = world.rng
        message_id = f"{run['turn']}:assistant"
        tokens_in, tokens_out = rng.randint(800, 12000), rng.randint(50, 1500)
        completion = {"assistant_message_id": message_id, "status": status, "content": answer,
                      "model": rng.choice(["local-8b", "local-32b", "gpt-oss-20b"]), "runtime": "bailing-agent/0.7",
                      "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                                "total_tokens": tokens_in + tokens_out}}
        completion_hash = sha256_json(completion)
        run["memory"].append(("assistant", message_id, answer, iso_z(at)))
        line = f"\t{run['thread']}\t{run['id']}\tassistant\t{esc(message_id)}\t{esc(answer)}\t{ts(at)}\n"
        messages_out.append((at, line))
    else:
        status, at = "prepared", None
    sess, facts = run["sess"], world.routes[run["route"]]
    world.runs.append(RunRef(run["id"], sess, run["route"], run["created"], at, status))
    return row(run["id"], str(run["thread"]), sess.id, sess.app, run["route"], run["conversation"], run["turn"],
               run["user_message_id"], run["request_hash"], jsonb(run["context"]), facts.profile_revision,
               facts.revision[sess.obo is not None], status, opt(completion_hash), jsonb(completion),
               ts(run["created"]), ts(at))


def unlinked_runs(world: World, sessions: list[Sess], count: int, start: float, end: float,
                  threads_out: list[str], runs_out: list[str], messages_out: list[tuple[float, str]]) -> None:
    """Runs of agents that keep no archive: a few turns per conversation, in [start, end)."""
    rng = world.rng
    while count > 0:
        sess = rng.choice(sessions)
        route, conversation = rng.choice(sess.routes), f"chat-{rng.getrandbits(48):012x}"
        at = rng.uniform(start, end)
        for n in range(min(count, rng.randint(1, 5))):
            user = world.text.user()
            run = start_run(world, sess, route, conversation, f"turn-{n + 1}", user, at, threads_out, messages_out)
            done = at + rng.uniform(3, 60)
            status = rng.choices(("completed", "failed", "cancelled", "prepared"), (92, 3, 3, 2))[0]
            runs_out.append(finish_run(world, run, status, world.text.assistant(), done, messages_out))
            at = done + rng.uniform(30, 900)
            count -= 1


# ---------------------------------------------------------------- phase: conversations

def numbered(items: list[tuple[float, str]], first: int) -> list[str]:
    """Rows whose line starts at their id column, numbered in time order from `first`."""
    items.sort(key=lambda item: item[0])
    return [f"{first + i}{line}" for i, (_, line) in enumerate(items)]


def chunks(plans: list[Plan]) -> Iterator[list[Plan]]:
    block, events = [], 0
    for plan in plans:
        block.append(plan)
        events += plan.size
        if events >= CHUNK_EVENTS:
            yield block
            block, events = [], 0
    if block:
        yield block


def load_conversations(url: str, world: World, plans: list[Plan], sessions: list[Sess], sizes: Sizes,
                       report: Callable[[str], None]) -> dict[str, Stream]:
    names = ("bz_agent_conversation_archives", "bz_agent_conversation_members", "bz_agent_conversation_events",
             "bz_threads", "bz_runs", "bz_messages")
    streams = {name: Stream(url, name) for name in names}
    evidence = EvidenceStream(url)
    live = [s for s in sessions if s.revoked is None]
    unlinked_total = sizes.runs // 10
    unlinked_done, archives_done = 0, 0
    for block in chunks(plans):
        headers, members, events, threads, runs, messages = [], [], [], [], [], []
        for plan in block:
            writer = ArchiveWriter(world, plan)
            header, rows_ = writer.build()
            headers.append(header)
            members += rows_
            events += writer.events
            threads += writer.threads
            runs += writer.runs
            messages += writer.messages
        archives_done += len(block)
        # Agents without archives, as many as this block's share of them.
        share = round(unlinked_total * archives_done / len(plans)) - unlinked_done
        unlinked_runs(world, live, share, block[0].created, block[-1].created + 60, threads, runs, messages)
        unlinked_done += share
        events.sort(key=lambda item: item[0])   # archives interleave on the heap, as appended
        streams["bz_agent_conversation_archives"].write(headers)
        streams["bz_agent_conversation_members"].write(members)
        streams["bz_agent_conversation_events"].write([line for _, line, _, _ in events])
        evidence.write([(leaves.EVENT, ref, leaf, at) for at, _, ref, leaf in events])
        streams["bz_threads"].write(threads)
        streams["bz_runs"].write(runs)
        streams["bz_messages"].write(numbered(messages, world.next_message))
        world.next_message += len(messages)
        world.threads.clear()  # conversations are one archive's each: no later block continues them
        report(f"{archives_done}/{len(plans)} archives, {streams['bz_agent_conversation_events'].rows} events")
    extra: list[str] = []
    threads, messages = [], []
    top_up = sizes.runs - len(world.runs)   # links the archives could not take
    unlinked_runs(world, live, top_up, plans[0].created, world.now - 3600, threads, extra, messages)
    streams["bz_threads"].write(threads)
    streams["bz_runs"].write(extra)
    streams["bz_messages"].write(numbered(messages, world.next_message))
    for stream in streams.values():
        stream.close()
    return {**streams, **evidence.close()}


# ---------------------------------------------------------------- phase: invocations and approvals

STATUS_DIRECT = (("executed", 93.0), ("business_rejected", 3.0), ("rejected_before_dispatch", 2.5),
                 ("reconciliation_required", 0.45), ("in_progress", 0.05))
REJECTIONS = ("provider_secret_unavailable", "invalid_arguments: arguments: required",
              "invalid_arguments: quantity: minimum", "invalid_arguments: customer_id: pattern")


@dataclass
class Call:
    """One invocation being made: its run, tool, arguments and (maybe) approval outcome."""
    run: RunRef
    tool: ToolFacts
    args: dict
    policy: dict | None
    created: float
    approval: str | None = None        # pending, approved, denied
    large: bool = False


def approvable(world: World, run: RunRef) -> list[tuple[ToolFacts, dict, dict]]:
    """(tool, arguments, policy) whose call needs approval in this run's route."""
    out = []
    for facts in world.routes[run.route].tools[run.sess.obo is not None].values():
        for example in facts.examples:
            args = dict(example)
            try:
                policy = approval_policy(facts.visible.tool, facts.forced, args)
            except TypeMismatch:
                continue
            if policy is not None:
                out.append((facts, args, policy))
    return out


def direct_choices(world: World, run: RunRef) -> list[tuple[ToolFacts, dict]]:
    out = []
    for facts in world.routes[run.route].tools[run.sess.obo is not None].values():
        for example in facts.examples:
            try:
                if approval_policy(facts.visible.tool, facts.forced, example) is None:
                    out.append((facts, example))
            except TypeMismatch:
                continue
    return out


def plan_calls(world: World, sizes: Sizes) -> list[Call]:
    """Calls for every run (readonly lookups mostly), then the approvals: the pending ones on
    the most recent runs that may still be decided, the rest decided."""
    rng, calls = world.rng, []
    direct_cache: dict[tuple, list] = {}
    for run in world.runs:
        key = (run.route, run.sess.obo is not None)
        options = direct_cache.setdefault(key, direct_choices(world, run))
        for _ in range(rng.choices((0, 1, 2, 3, 4), (45, 30, 15, 6, 4))[0] if options else 0):
            facts, example = rng.choice(options)
            calls.append(Call(run, facts, vary(example, rng), None, run.created + rng.uniform(1, 40)))
    calls += approval_calls(world, sizes)
    calls.sort(key=lambda c: c.created)
    return calls


def approval_calls(world: World, sizes: Sizes) -> list[Call]:
    rng = world.rng
    cache: dict[tuple, list] = {}

    def options(run: RunRef) -> list:
        return cache.setdefault((run.route, run.sess.obo is not None), approvable(world, run))

    eligible = [r for r in world.runs if options(r)]
    eligible.sort(key=lambda r: r.created, reverse=True)
    pending: list[Call] = []
    used: set[str] = set()
    for large in (True, False):
        want = sizes.large_pending if large else sizes.pending - sizes.large_pending
        # The most recent runs that may take one: pending approvals are the newest, and spread.
        pool = [r for r in eligible if r.id not in used
                and (not large or r.route == "imports") and decidable(world, r, world.now)][:max(want * 6, 60)]
        for run in rng.sample(pool, min(want, len(pool))):
            used.add(run.id)
            pending.append(make_approval_call(world, run, options(run), "pending", large))
    decided = []
    rest = [r for r in eligible if r.id not in used]
    for run in rng.choices(rest, k=sizes.approvals - len(pending)) if rest else []:
        outcome = "denied" if rng.random() < 0.12 else "approved"
        decided.append(make_approval_call(world, run, options(run), outcome, False))
    return pending + decided


def decidable(world: World, run: RunRef, now: float) -> bool:
    ttl = world.routes[run.route].ttl.get("ttl_seconds")
    return ttl is None or run.created + ttl > now + 3600


def make_approval_call(world: World, run: RunRef, options: list, outcome: str, large: bool) -> Call:
    rng = world.rng
    if large:
        facts = world.routes[run.route].tools[True]["order_import"]
        args = {"file_name": f"orders-{rng.getrandbits(24):06x}.csv",
                "csv": order_csv(rng, rng.randint(100 * 1024, 1000 * 1000 - 2000))}
        policy = approval_policy(facts.visible.tool, facts.forced, args)
    else:
        facts, example, policy = rng.choice(options)
        args = vary(example, rng)
        if facts.visible.tool.name == "order_import":
            args = {"file_name": f"orders-{rng.getrandbits(24):06x}.csv",
                    "csv": order_csv(rng, rng.randint(200, 30_000))}
    return Call(run, facts, args, policy, run.created + rng.uniform(1, 40), outcome, large)


def load_invocations(url: str, world: World, calls: list[Call], admins: list[AdminUser],
                     out: dict) -> dict[str, Stream]:
    streams = {name: Stream(url, name) for name in ("bz_tool_invocations", "bz_tool_approvals", "bz_tool_journal")}
    approvers = [a.username for a in admins if a.role in ("admin", "approver")]
    number = 0
    for start in range(0, len(calls), 20_000):
        inv_lines, approval_lines, journal_lines = [], [], []
        for call in calls[start:start + 20_000]:
            number += call.approval is not None
            write_call(world, call, approvers, number, inv_lines, approval_lines, journal_lines, out)
        streams["bz_tool_invocations"].write(inv_lines)
        streams["bz_tool_approvals"].write(approval_lines)
        streams["bz_tool_journal"].write(journal_lines)
    for stream in streams.values():
        stream.close()
    return streams


def write_call(world: World, call: Call, approvers: list[str], number: int, inv_lines: list[str],
               approval_lines: list[str], journal_lines: list[str], out: dict) -> None:
    """One invocation as invoke/resume leave it, with its approval and journal rows."""
    rng, run, tool = world.rng, call.run, call.tool.visible.tool
    inv_id = new_uuid(rng)
    args_hash = sha256_json(call.args)
    created = call.created
    dispatched_at = created + rng.uniform(0.01, 0.2)
    reason = business = result = None
    if call.approval is None:
        status = rng.choices([s for s, _ in STATUS_DIRECT], [w for _, w in STATUS_DIRECT])[0]
        if status == "rejected_before_dispatch":
            reason = rng.choice(REJECTIONS)
    else:
        status, dispatched_at, reason = approval_row(world, call, inv_id, args_hash, approvers, number,
                                                     approval_lines, out)
    finished = None
    if status in ("executed", "business_rejected", "reconciliation_required", "in_progress"):
        finished, business, result = journal_row(world, call, inv_id, args_hash, status, dispatched_at,
                                                 journal_lines)
        if status == "reconciliation_required":
            reason = "transport_failure"
    updated = finished or (dispatched_at if status in ("awaiting_approval", "in_progress") else created + 0.05)
    if call.approval == "denied":
        updated = dispatched_at
    request_hash = sha256_json({"route": run.route, "tool": tool.name, "run_id": run.id, "args_hash": args_hash})
    inv_lines.append(row(inv_id, run.sess.id, f"{rng.getrandbits(256):064x}", run.route, run.id, tool.name,
                         tool.provider, tool.scope, request_hash, args_hash, text_array(sorted(call.args)),
                         tool.execution_fingerprint, world.routes[run.route].revision[run.sess.obo is not None],
                         opt(run.sess.obo), status, opt(reason), opt(business), jsonb(result), ts(created),
                         ts(updated)))
    if len(out["invocation_ids"]) < 5 and status == "executed":
        out["invocation_ids"].append(inv_id)


def approval_row(world: World, call: Call, inv_id: str, args_hash: str, approvers: list[str], number: int,
                 lines: list[str], out: dict) -> tuple[str, float, str | None]:
    """The approval and the state it leaves its invocation in: (status, when dispatched, reason)."""
    rng, run, facts = world.rng, call.run, call.tool
    tool = facts.visible.tool
    snapshot = canonical_json(call.args)
    ttl = world.routes[run.route].ttl.get("ttl_seconds")
    expires = call.created + ttl if ttl else None
    decided_at = consumed = decided_by = decision_reason = None
    status, dispatched, reason = "awaiting_approval", call.created, None
    if call.approval != "pending":
        wait = min(rng.lognormvariate(math.log(1200), 1.2), (ttl or 30 * DAY) - 120, world.now - call.created - 60)
        decided_at = call.created + max(5.0, wait)
        decided_by = rng.choice(approvers)
        if call.approval == "denied":
            decision_reason = rng.choice(["Amount too high without a signed contract.", "Wrong customer.",
                                          "Duplicate of an earlier request.", "Please ask the account owner first."])
            status, dispatched, reason = "denied", decided_at, "approval_denied"
        elif rng.random() < 0.99:
            consumed = min(decided_at + rng.uniform(2, 600), world.now - 30)
            status = rng.choices(("executed", "business_rejected", "reconciliation_required"), (95, 4, 1))[0]
            dispatched = consumed
    approval_id = new_uuid(rng)
    if call.approval == "pending" and (call.large or len(out["pending_approval_ids"]) < 5):
        out["large_pending_approval_ids" if call.large else "pending_approval_ids"].append(approval_id)
    lines.append(row(approval_id, inv_id, tool.name, run.route, tool.risk, jsonb(call.policy),
                     opt(tool.approval_prompt), esc(snapshot), args_hash, str(len(snapshot.encode())),
                     text_array(sorted(call.args)),
                     esc(approval_summary(facts.visible, snapshot, call.args)), jsonb(run.sess.principal),
                     opt(run.sess.obo), call.approval, opt(decided_by), ts(decided_at), opt(decision_reason),
                     ts(consumed), ts(call.created), str(number), ts(expires)))
    return status, dispatched, reason


def journal_row(world: World, call: Call, inv_id: str, args_hash: str, status: str, started: float,
                lines: list[str]) -> tuple[float | None, int | None, dict | None]:
    """The dispatch journal as _reserve and _send_and_record write it: (finished, business
    status, result body)."""
    rng, tool = world.rng, call.tool.visible.tool
    prepared = dispatch.prepare(tool, BUSINESS_URL, call.args)
    key = sha256_json({"invocation": inv_id, "tool": tool.name, "args_hash": args_hash,
                       "on_behalf_of": call.run.sess.obo})
    finished = http = failure = result = None
    state = "dispatching"
    if status != "in_progress":
        finished = started + rng.lognormvariate(math.log(0.25), 0.8)
        if status == "reconciliation_required":
            state, failure = "uncertain", rng.choice(["ReadTimeout", "ConnectionError", "ChunkedEncodingError"])
        else:
            state = "completed"
            http = rng.choice((200, 200, 200, 201)) if status == "executed" else rng.choice((404, 409, 422))
            result = ({"ok": True, "id": f"R-{rng.getrandbits(32):08x}"} if status == "executed"
                      else {"error": {"code": "rejected", "message": "The business system refused the request."}})
    lines.append(row(inv_id, state, key, prepared.method, tool.path, sha256_bytes(prepared.body), opt(http),
                     opt(failure), ts(started), ts(finished)))
    return finished, http, result


# ---------------------------------------------------------------- phase: access log

ACTIONS = (("transcript_view", 70), ("run_trace_view", 12), ("snapshot_view", 6), ("job_trace_view", 4),
           ("message_search", 4), ("transcript_export", 2), ("snapshot_download", 1), ("access_log_export", 1))
MAY = {"transcript_view": ("admin", "auditor", "support"), "transcript_export": ("admin", "auditor", "support"),
       "run_trace_view": ("admin", "auditor", "support"), "job_trace_view": ("admin", "auditor", "support"),
       "message_search": ("admin", "auditor", "support"), "snapshot_view": ("admin", "approver"),
       "snapshot_download": ("admin", "approver"), "access_log_export": ("admin", "auditor")}
SEARCHES = ("q=invoice", "q=ORD-00", "q=credit+limit", "q=%E5%9C%A8%E5%BA%AB", "tenant=tenant-3",
            "q=refund&route=orders",
            "q=Hamburg", "principal=user-0042", "q=%E8%AB%8B%E6%B1%82%E6%9B%B8&status=failed")


@dataclass
class Targets:
    archives: list[tuple[str, int]]    # (id, last_sequence)
    runs: list[str]
    approvals: list[str]
    jobs: list[str]


def read_targets(url: str) -> Targets:
    with psycopg.connect(url) as conn:
        return Targets(
            conn.execute("SELECT id::text, last_sequence FROM bz_agent_conversation_archives ORDER BY id").fetchall(),
            [r[0] for r in conn.execute("SELECT id::text FROM bz_runs ORDER BY id")],
            [r[0] for r in conn.execute("SELECT id::text FROM bz_tool_approvals ORDER BY id")],
            [r[0] for r in conn.execute("SELECT id::text FROM bz_tool_invocations ORDER BY id")])


def reading_burst(rng: random.Random, admin: AdminUser, action: str, targets: Targets, at: float,
                  channel: str) -> list[tuple[float, str]]:
    """One sitting of one admin: a scroll through a transcript is many page reads of one target,
    a few seconds apart, each naming its range; other reads are single."""
    token = str(admin.token_id) if channel == "api" else "\\N"
    head = f"{admin.id}\t{admin.username}\t{action}\t"
    if action == "transcript_view" and targets.archives:
        archive, last = rng.choice(targets.archives)
        page = 200 if channel == "console" else 100
        out, first = [], 1
        for _ in range(rng.choices((1, 2, 3, 5, 10, 40), (40, 20, 15, 12, 10, 3))[0]):
            if first > last:
                break
            end = min(last, first + page - 1)
            out.append((at, f"{head}{archive}\t{ts(at)}\t{channel}\t{token}\t{first}\t{end}\n"))
            first, at = end + 1, at + rng.uniform(2, 40)
        return out
    target = {"run_trace_view": targets.runs, "job_trace_view": targets.jobs, "snapshot_view": targets.approvals,
              "snapshot_download": targets.approvals,
              "transcript_export": [a for a, _ in targets.archives[:5000]]}.get(action)
    if action == "message_search":
        value = rng.choice(SEARCHES)
    elif action == "access_log_export":
        value = rng.choice(("all", f"person={rng.choice(ADMIN_NAMES)}", "action=transcript_export"))
    elif target:
        value = rng.choice(target)
    else:
        return []
    return [(at, f"{head}{esc(value)}\t{ts(at)}\t{channel}\t{token}\t\\N\t\\N\n")]


def load_access_log(url: str, rng: random.Random, admins: list[AdminUser], count: int, start: float,
                    end: float) -> Stream:
    stream = Stream(url, "bz_access_log")
    targets = read_targets(url)
    kinds, weights = [a for a, _ in ACTIONS], [w for _, w in ACTIONS]
    readers = {action: [a for a in admins if a.role in roles] for action, roles in MAY.items()}
    made, next_id, slices = 0, 1, max(1, count // 50_000)
    for n in range(slices):
        low, high = start + (end - start) * n / slices, start + (end - start) * (n + 1) / slices
        want = round(count * (n + 1) / slices) - made
        block: list[tuple[float, str]] = []
        while len(block) < want:
            action = rng.choices(kinds, weights)[0]
            admin = rng.choice(readers[action])
            channel = "api" if admin.token_id is not None and rng.random() < 0.15 else "console"
            block += reading_burst(rng, admin, action, targets, rng.uniform(low, high), channel)
        block = block[:want]
        block.sort(key=lambda item: item[0])
        stream.write([f"{next_id + i}\t{line}" for i, (_, line) in enumerate(block)])
        next_id += len(block)
        made += len(block)
    stream.close()
    return stream


# ---------------------------------------------------------------- schema: drop and rebuild

SCHEMA_SQL = """
    SELECT 'index', tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
    UNION ALL
    SELECT 'constraint', conrelid::regclass::text, conname,
           contype::text || ' ' || pg_get_constraintdef(c.oid) || ' ' || convalidated::text
      FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public'
    ORDER BY 1, 2, 3"""


def schema_of(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(SCHEMA_SQL).fetchall()


@dataclass
class Dropped:
    keys: list[tuple[str, str, str]] = field(default_factory=list)       # (table, name, definition)
    indexes: list[tuple[str, str]] = field(default_factory=list)         # (name, CREATE INDEX ...)
    foreign: list[tuple[str, str, str]] = field(default_factory=list)


def drop_for_load(url: str) -> Dropped:
    """Every key, index and foreign key of the bulk tables (and foreign keys into them) goes; the
    definitions are kept to rebuild them exactly."""
    dropped = Dropped()
    with psycopg.connect(url) as conn:
        bulk = list(BULK)
        dropped.foreign = conn.execute("""
            SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
             WHERE contype = 'f' AND (conrelid::regclass::text = ANY(%s) OR confrelid::regclass::text = ANY(%s))
             ORDER BY 1, 2""", (bulk, bulk)).fetchall()
        dropped.keys = conn.execute("""
            SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
             WHERE contype IN ('p', 'u') AND conrelid::regclass::text = ANY(%s) ORDER BY 1, 2""", (bulk,)).fetchall()
        keys = {name for _, name, _ in dropped.keys}
        dropped.indexes = [(name, definition) for name, definition in conn.execute("""
            SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = ANY(%s)
             ORDER BY 1""", (bulk,)) if name not in keys]
        for table, name, _ in dropped.foreign + dropped.keys:
            conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for name, _ in dropped.indexes:
            conn.execute(f'DROP INDEX "{name}"')
    return dropped


def rebuild(url: str, dropped: Dropped, report: Callable[[str], None]) -> dict[str, float]:
    """Keys, then indexes, then foreign keys (validated), one statement at a time with the
    server's parallel maintenance workers; the seconds of each."""
    seconds = {}
    statements = ([(name, f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {d}') for table, name, d in dropped.keys]
                  + list(dropped.indexes)
                  + [(name, f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {d}') for table, name, d in dropped.foreign])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for name, statement in statements:
            started = time.perf_counter()
            conn.execute(statement)
            seconds[name] = round(time.perf_counter() - started, 2)
            if seconds[name] > 5:
                report(f"{name}: {seconds[name]} s")
    return seconds


def reset_sequences(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table, column in (("bz_threads", "id"), ("bz_messages", "id"), ("bz_access_log", "id"),
                              ("bz_tool_approvals", "number")):
            conn.execute(f"""SELECT setval(pg_get_serial_sequence('{table}', '{column}'),
                                           coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)""")  # noqa: S608 - constant names


# ---------------------------------------------------------------- checks

CHECKS = {
    "archive counters match events": """
        SELECT count(*) FROM bz_agent_conversation_archives a LEFT JOIN (
            SELECT archive_id, count(*) n, min(sequence) lo, max(sequence) hi,
                   count(*) FILTER (WHERE kind IN ('user_message', 'assistant_message')) msgs,
                   count(*) FILTER (WHERE kind = 'turn_start') turns,
                   coalesce(sum(octet_length(content)), 0) bytes
              FROM bz_agent_conversation_events GROUP BY archive_id) e ON e.archive_id = a.id
         WHERE coalesce(e.n, 0) <> a.last_sequence OR coalesce(e.hi, 0) <> a.last_sequence
            OR coalesce(e.lo, 1) <> 1 OR coalesce(e.msgs, 0) <> a.message_count
            OR coalesce(e.turns, 0) <> a.turn_count OR coalesce(e.bytes, 0) <> a.text_bytes""",
    "archives past the limits": f"""
        SELECT count(*) FROM bz_agent_conversation_archives
         WHERE last_sequence > {BIG_EVENTS} OR text_bytes > {TEXT_LIMIT}""",  # noqa: S608 - constants
    "last turn status mismatches": """
        SELECT count(*) FROM bz_agent_conversation_archives a
          JOIN bz_agent_conversation_events e ON e.archive_id = a.id AND e.sequence = a.last_sequence
         WHERE (a.last_turn_status = 'running') <> (e.kind <> 'turn_end')
            OR (e.kind = 'turn_end' AND e.status IS DISTINCT FROM a.last_turn_status)
            OR (a.running_turn_id IS NOT NULL) <> (a.last_turn_status = 'running')""",
    "member counts mismatch": """
        SELECT count(*) FROM bz_agent_conversation_archives a
          JOIN (SELECT archive_id, count(*) n, count(confirmed_at) c FROM bz_agent_conversation_members
                GROUP BY archive_id) m ON m.archive_id = a.id
         WHERE m.n <> a.member_count OR m.c <> a.confirmed_count""",
    "run links not matching their run": """
        SELECT count(*) FROM bz_agent_conversation_events e
          JOIN bz_agent_conversation_archives a ON a.id = e.archive_id
          LEFT JOIN bz_runs r ON r.id = e.run_id
         WHERE e.kind = 'run_link' AND (r.id IS NULL OR r.session_id <> e.member_session_id
            OR r.client_conversation_id <> a.client_conversation_id OR r.client_turn_id <> e.client_turn_id
            OR r.thread_id <> e.thread_id)""",
    "access-log ranges past their transcript": """
        SELECT count(*) FROM bz_access_log l JOIN bz_agent_conversation_archives a ON a.id::text = l.target
         WHERE l.last_sequence > a.last_sequence""",
    "events without exactly one leaf (by count)": """
        SELECT abs((SELECT count(*) FROM bz_agent_conversation_events)
                   - (SELECT count(*) FROM bz_evidence_leaves WHERE kind = 'conversation_event'))""",
    "evidence leaves not contiguous from 0": """
        SELECT count(*) - coalesce(max(idx) + 1, 0) FROM bz_evidence_leaves""",
    "messages without a salt": """
        SELECT count(*) FROM bz_agent_conversation_events
         WHERE kind IN ('user_message', 'assistant_message') AND content IS NOT NULL AND content_salt IS NULL""",
    "approvals whose snapshot does not hash to args_hash": """
        SELECT count(*) FROM bz_tool_approvals
         WHERE encode(sha256(convert_to(snapshot, 'UTF8')), 'hex') <> args_hash""",
}


def backfill_others(url: str) -> dict:
    """The leaves of everything but the events (which the loader gave theirs), appended by the
    hub's own backfill (`bailing-admin evidence backfill`), as an upgraded hub would get them."""
    from admin_app.integrity import backfill

    with tempfile.TemporaryDirectory(prefix="bailing-scale-") as scratch:
        operator = Operator(url, Path(scratch) / "var")
        try:
            kinds = tuple(k for k in backfill.WALKS if k != leaves.EVENT)
            return backfill.run(operator.app.extensions["bailing"].db.session, 10_000, kinds)
        finally:
            operator.close()


def run_checks(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        conn.execute("SET max_parallel_workers_per_gather = 2")
        return {name: conn.execute(sql).fetchone()[0] for name, sql in CHECKS.items()}


def planned_events(url: str, plans: list[Plan]) -> int:
    """How far the events stored (in all, and in each special archive) are from the plan."""
    with psycopg.connect(url) as conn:
        stored = dict(conn.execute("SELECT id::text, last_sequence FROM bz_agent_conversation_archives").fetchall())
    return sum(abs(stored.get(p.id, 0) - p.size) for p in plans)


def event_dict(r) -> dict:
    """A stored event as its writer sent it (the fields its kind has)."""
    sequence, event_id, turn, kind, content, status, run_id, member = r
    event = {"event_id": event_id, "sequence": sequence, "client_turn_id": turn, "kind": kind}
    if kind in ("user_message", "assistant_message"):
        event["content"] = content
    elif kind == "turn_end":
        event["status"] = status
    elif kind == "run_link":
        event.update(run_id=str(run_id), member_session_id=str(member))
    return event


def stored_events(url: str, archive_id: str) -> list[tuple[dict, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("""SELECT sequence, event_id, client_turn_id, kind, content, status, run_id,
                                      member_session_id, body_sha256 FROM bz_agent_conversation_events
                                WHERE archive_id = %s ORDER BY sequence""", (archive_id,)).fetchall()
    return [(event_dict(r[:8]), r[8]) for r in rows]


def digest_mismatches(url: str, archive_ids: list[str]) -> int:
    """Events whose stored body_sha256 differs from the hub's hash of the event."""
    return sum(sha256_json(event) != digest for a in archive_ids for event, digest in stored_events(url, a))


# ---------------------------------------------------------------- the hub reads it

def replay_batches(events: list[dict]) -> Iterator[list[dict]]:
    """Batches within the append limits (events and bytes of text)."""
    batch, size = [], 0
    for event in events:
        length = len(event.get("content", "").encode())
        if batch and (len(batch) == limits.AUDIT_BATCH_MAX_EVENTS or size + length > 200 * 1024):
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += length
    if batch:
        yield batch


def check_hub(url: str, info: dict, report: Callable[[str], None]) -> dict[str, dict]:
    """Serve the database with gunicorn and read it as an admin and as the archives' writer:
    every page and API answer must be a 200, and replaying stored events must be accepted as
    identical retries (the hub's own check of their body_sha256)."""
    from tests.gunicorn_hub import GunicornHub

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bailing-scale-") as scratch, \
            GunicornHub(url, workers=2, data_dir=Path(scratch), env=DEMO_SECRETS, timeout=300) as hub:
        console = console_login(hub.url, info["admin"]["username"])
        api = requests.Session()
        api.headers.update(bearer(info["admin"]["api_token"]))
        big, biggest = info["archives"]["big"], info["archives"]["biggest"]
        run, pending, large = (next(iter(info[k]), None) for k in ("run_ids", "pending_approval_ids",
                                                                      "large_pending_approval_ids"))
        last_page = max(0, info["archives"]["big_events"] - 200)
        pages = {
            "console conversation list": (console, "/console/conversations/"),
            "console content search": (console, "/console/conversations/?q=invoice"),
            "console transcript": (console, f"/console/conversations/{big}"),
            "console transcript end": (console, f"/console/conversations/{big}?at=end"),
            "console runs": (console, "/console/runs/"),
            "console unresolved calls": (console, "/console/runs/unresolved"),
            "console run trace": (console, f"/console/runs/{run}"),
            "console approvals queue": (console, "/console/approvals/"),
            "console pending approval": (console, f"/console/approvals/{pending}"),
            "console large pending approval": (console, f"/console/approvals/{large}"),
            "console access log": (console, "/console/access-log"),
            "admin api archive": (api, f"/admin/api/conversation-audits/{big}"),
            "admin api archive last page": (api, f"/admin/api/conversation-audits/{big}?after_sequence={last_page}"),
            "admin api run trace": (api, f"/admin/api/agent-runs/{run}"),
            "admin api approvals": (api, "/admin/api/tool-approvals"),
            "console export of the biggest": (console, f"/console/conversations/{biggest}/export.json"),
        }
        for name, (http, path) in pages.items():
            if "None" in path:
                continue
            started = time.perf_counter()
            response = http.get(hub.url + path, timeout=600)
            results[name] = {"status": response.status_code, "ms": round((time.perf_counter() - started) * 1000, 1),
                             "bytes": len(response.content)}
            report(f"{name}: {results[name]}")
        for name, (archive, writer) in info["replay"].items():
            results[f"replay {name}"] = replay(hub.url, url, archive, writer)
            report(f"replay {name}: {results[f'replay {name}']}")
    return results


def replay(hub_url: str, db_url: str, archive_id: str, writer: dict) -> dict:
    """Send every stored event of the archive again, as its writer: identical retries answer 200."""
    http = requests.Session()
    http.headers.update(bearer(writer["access_token"]))
    statuses: dict[int, int] = {}
    events = [event for event, _ in stored_events(db_url, archive_id)]
    started = time.perf_counter()
    for batch in replay_batches(events):
        response = http.post(f"{hub_url}/agent-api/v1/conversation-audits/{archive_id}/events",
                             json={"events": batch}, timeout=120)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        if response.status_code != 200:
            return {"status": response.status_code, "body": response.text[:500], "events": len(events)}
    return {"status": 200 if set(statuses) == {200} else min(statuses or {0: 0}), "events": len(events),
            "batches": sum(statuses.values()), "seconds": round(time.perf_counter() - started, 1)}


# ---------------------------------------------------------------- database

def with_database(url: str, name: str) -> str:
    return make_url(url).set(drivername="postgresql", database=name).render_as_string(hide_password=False)


def server_url(args: argparse.Namespace) -> str:
    """A URL on the server (its maintenance database), embedded or BAILING_DATABASE_URL's."""
    external = os.environ.get("BAILING_DATABASE_URL")
    if external and not args.data_dir:
        return external
    return embedded_pg.ensure_running(PROJECT_ROOT / (args.data_dir or "var/scale"))


def fresh_database(server: str, name: str, fresh: bool) -> str:
    """The database to fill: created (dropped first with --fresh); an existing one only while it
    holds no data."""
    admin = with_database(server, make_url(server).database or "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or fresh:
            conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server, name)
    with psycopg.connect(url) as conn:
        migrated = conn.execute("SELECT to_regclass('bz_agent_sessions')").fetchone()[0]
        used = migrated and conn.execute("SELECT EXISTS (SELECT 1 FROM bz_agent_sessions)").fetchone()[0]
    if used:
        raise SystemExit(f"database {name} already holds data: pass --fresh to drop and recreate it")
    migrations.upgrade(url, SQL_DIR)
    return url


# ---------------------------------------------------------------- main

class Clock:
    def __init__(self):
        self.started = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        started = time.perf_counter()
        print(f"-- {name}", flush=True)
        yield
        self.phases[name] = round(time.perf_counter() - started, 1)
        print(f"   {name}: {self.phases[name]} s", flush=True)

    def total(self) -> float:
        return round(time.perf_counter() - self.started, 1)


def say(message: str) -> None:
    print(f"   {message}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="embedded PostgreSQL's data folder (default var/scale, unless "
                                           "BAILING_DATABASE_URL names a server)")
    parser.add_argument("--database", default="bailing_scale", help="the database to create and fill")
    parser.add_argument("--fresh", action="store_true", help="drop the database first if it exists")
    for name, value in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=value)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    parser.add_argument("--seed", type=int, default=20250101)
    parser.add_argument("--json", default="var/scale.json", help="where to write the figures and ids")
    parser.add_argument("--no-check", action="store_true", help="skip the consistency checks in SQL")
    parser.add_argument("--check-hub", action="store_true", help="then serve it and read it through the hub")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    sizes = Sizes.of(args)
    rng = random.Random(args.seed)
    clock = Clock()
    now = time.time()
    end, start = now - 600, now - 600 - SPAN_DAYS * DAY
    info: dict = {"sizes": sizes.__dict__, "seed": args.seed}
    streams: dict[str, Stream] = {}
    print(f"scale data set: {sizes}", flush=True)
    with clock.phase("database"):
        url = fresh_database(server_url(args), args.database, args.fresh)
        info["database_url"] = url
        before = schema_of(url)
    with clock.phase("configuration and admins"), tempfile.TemporaryDirectory(prefix="bailing-scale-") as scratch:
        operator = Operator(url, Path(scratch) / "var")
        try:
            operator.apply(hub_config(), Path(scratch))
            api_token = make_admins(operator, sizes.admins)
            facts = route_facts(operator.app, tool_examples())
        finally:
            operator.close()
        admins = load_admins(url)
        info["admin"] = {"username": ADMIN_USER, "password": PASSWORD, "api_token": api_token}
    with clock.phase("sessions"):
        config = hub_config()
        apps = {a["app_id"]: a["allowed_routes"] for a in config["client_apps"]}
        sessions = make_sessions(rng, sizes.sessions, apps, start, now)
        stream = Stream(url, "bz_agent_sessions", freeze=False)
        stream.write([session_line(s, now) for s in sessions])
        stream.close()
        streams["bz_agent_sessions"] = stream
    with clock.phase("drop keys and indexes"):
        dropped = drop_for_load(url)
    with clock.phase("plan"):
        text = TextSource(random.Random(args.seed + 1))
        plans = plan_archives(rng, sizes, sessions, start, end)
        turns_estimate = sum(p.size for p in plans if p.special != "biggest") / 4.6
        world = World(rng, text, facts, {a["app_id"]: a["name"] for a in config["client_apps"]}, now,
                      link_p=min(1.0, 0.9 * sizes.runs / max(1.0, turns_estimate)),
                      runs_left=sizes.runs - sizes.runs // 10)
    with clock.phase("conversations (archives, members, events, threads, runs, messages)"):
        streams.update(load_conversations(url, world, plans, sessions, sizes, say))
    with clock.phase("invocations, approvals, journal"):
        ids: dict[str, list] = {"invocation_ids": [], "pending_approval_ids": [], "large_pending_approval_ids": []}
        calls = plan_calls(world, sizes)
        streams.update(load_invocations(url, world, calls, admins, ids))
    with clock.phase("access log"):
        streams["bz_access_log"] = load_access_log(url, rng, admins, sizes.access_log, start, end)
    with clock.phase("keys, indexes, foreign keys"):
        info["rebuild_seconds"] = rebuild(url, dropped, say)
        reset_sequences(url)
    with clock.phase("evidence: leaves of reads, decisions, admin events, configuration (backfill)"):
        info["evidence_backfill"] = backfill_others(url)
        say(json.dumps(info["evidence_backfill"]))
    with clock.phase("analyze"), psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    after = schema_of(url)
    if after != before:
        missing, extra = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        raise SystemExit(f"the schema differs from the migrations'; missing {missing}, extra {extra}")
    info["schema_identical"] = True
    describe(info, url, plans, sessions, world, ids, streams)
    if not args.no_check:
        with clock.phase("checks"):
            info["checks"] = run_checks(url)
            info["checks"]["events other than asked for"] = planned_events(url, plans)
            info["checks"]["events whose body_sha256 differs (special and sample archives)"] = digest_mismatches(
                url, [info["archives"]["big"], *[p.id for p in plans[:: max(1, len(plans) // 50)]]])
            say(json.dumps(info["checks"], indent=1))
            if any(info["checks"].values()):
                raise SystemExit("consistency checks failed")
    info["phases"] = clock.phases
    info["total_seconds"] = clock.total()
    with psycopg.connect(url) as conn:
        info["database_bytes"] = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    if args.check_hub:
        with clock.phase("hub reads"):
            info["hub"] = check_hub(url, info, say)
        info["phases"] = clock.phases
        if any(r["status"] != 200 for r in info["hub"].values()):
            finish(info, streams, args.json)
            raise SystemExit("the hub refused some reads")
    finish(info, streams, args.json)
    return info


def describe(info: dict, url: str, plans: list[Plan], sessions: list[Sess], world: World, ids: dict,
             streams: dict[str, Stream]) -> None:
    """The ids other scripts start from, and the writers' tokens for replaying their archives."""
    big = next(p for p in plans if p.special == "big")
    biggest = next(p for p in plans if p.special == "biggest")
    tokens_of = {s.id: {"session_id": s.id, "access_token": s.access, "refresh_token": s.refresh} for s in sessions}
    live = {s.id for s in sessions if s.revoked is None}
    sample = [p for p in plans if p.version == 2 and all(m.sess.id in live for m in p.members)][:2]
    sample += [p for p in plans if p.version == 1 and p.members[0].sess.id in live and not p.special][:1]
    info["archives"] = {"big": big.id, "big_events": big.size, "biggest": biggest.id,
                        "biggest_events": biggest.size}
    info["replay"] = {"big": (big.id, tokens_of[big.members[0].sess.id])}
    info["replay"].update({f"sample {p.id}": (p.id, tokens_of[p.members[0].sess.id]) for p in sample})
    info["run_ids"] = [r.id for r in world.runs if r.status == "completed"][:5]
    info.update(ids)
    info["tables"] = {name: {"rows": s.rows, "mb": round(s.bytes / 2**20, 1),
                             "write_seconds": round(s.write_seconds, 1)} for name, s in streams.items()}
    with psycopg.connect(url) as conn:
        info["counts"] = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 - constant names
                          for t in ("bz_agent_sessions", "bz_admins", "bz_client_apps", "bz_routes", *BULK)}


def finish(info: dict, streams: dict[str, Stream], path: str) -> None:
    print("\nper table (rows, MB sent, seconds in COPY writes):")
    for name, s in streams.items():
        print(f"  {name:32} {s.rows:>11,} rows {s.bytes / 2**20:>9.1f} MB {s.write_seconds:>8.1f} s")
    print("phases:", ", ".join(f"{k} {v} s" for k, v in info["phases"].items()))
    print(f"total {info['total_seconds']} s; database {info['database_bytes'] / 2**30:.2f} GiB "
          f"at {info['database_url']}")
    print(f"big transcript archive ({info['archives']['big_events']} events): {info['archives']['big']}")
    print(f"biggest archive (for export): {info['archives']['biggest']}")
    print(f"console: {info['admin']['username']} / {info['admin']['password']!r}")
    if path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(info, indent=1, default=str), "utf-8")
        print(f"figures and ids: {out}")


if __name__ == "__main__":
    main()
