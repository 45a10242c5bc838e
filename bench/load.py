"""Load on Conversation Audit: gunicorn workers, concurrent writers and transcript readers.

Writers append batches (1 to 50 events, the spec's maximum) with unique event ids: several writer
threads race on each shared archive (a multi-member archive; the spec lets only its creator
append, so they share the creator's bearer, like several processes of one host), and each separate
archive has one writer of its own. Readers page transcripts through the admin API meanwhile.
Afterwards every archive is checked against what was acknowledged: sequences exactly 1..n, every
acknowledged event present once with its content, each batch contiguous and in order, nothing
stored that was not acknowledged, and every page a reader saw a consistent prefix.

The driver here is shared by tests/test_load.py (a few seconds, in CI) and by this script, run by
hand for longer:

    python bench/load.py --seconds 60 --workers 4

It makes its own database on BAILING_DATABASE_URL's server, or on the embedded PostgreSQL in
var/bench, and drops it at the end. The exit status is 1 when the integrity check fails.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

import psycopg  # noqa: E402
import requests  # noqa: E402

from admin_app import limits  # noqa: E402

AUDITS = "/agent-api/v1/conversation-audits"
ADMIN = "/admin/api/conversation-audits"
CREATE_V2 = "bailing.agent-conversation-audit-create.v2"
ACK = "bailing.agent-conversation-audit-ack.v1"
CONFLICT = "conversation_audit_conflict"
PASSWORD = "load test password, long enough"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}

# The spec's limits: events per batch, UTF-16 units per text, events and text per archive, events
# per page.
BATCH_MAX = limits.AUDIT_BATCH_MAX_EVENTS
TEXT_MAX_UNITS = limits.AUDIT_TEXT_MAX_UNITS
ARCHIVE_MAX_EVENTS = limits.AUDIT_ARCHIVE_MAX_EVENTS
ARCHIVE_MAX_TEXT = limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES
BATCH_TEXT_MAX = limits.AUDIT_BATCH_TEXT_MAX_BYTES
PAGE_MAX = limits.AUDIT_EVENTS_LIMIT[2]
# Sizes a writer picks from; 1 and the maximum are both common on purpose.
BATCH_SIZES = (1, 2, 3, 5, 8, 13, 21, 34, 49, 50, 50)
PAGE_LIMITS = (1, 7, 50, 100, 200)
TIMEOUT = 60


def hub_config() -> dict:
    """Two routes and two client apps, no tools: archives need nothing more."""
    route = {"enabled": True, "audience": {"enabled": False}, "agent_client": {"enabled": True}}
    return {
        "routes": [{"route_key": "customers", "name": "Customer desk", **route},
                   {"route_key": "orders", "name": "Order desk", **route}],
        "client_apps": [
            {"app_id": "crm-demo", "name": "CRM", "allowed_routes": ["customers"], "enabled": True},
            {"app_id": "erp-demo", "name": "ERP", "allowed_routes": ["orders"], "enabled": True},
        ],
    }


BINDINGS = {"crm": ("crm-demo", "customers"), "erp": ("erp-demo", "orders")}


@dataclass
class Plan:
    seconds: float = 6.0
    shared: int = 2               # archives appended to by several writer threads at once
    writers_per_shared: int = 3
    members: int = 3              # members of a shared archive, the writer included
    separate: int = 3             # archives with one writer each
    readers: int = 3
    rotate_at: int = 19000        # a writer moves on to a new archive before the 20,000 cap
    seed: int | None = None

    def check(self) -> None:
        # Writers that already picked the old archive may still land a batch each after the
        # threshold; the cap must hold all of them.
        if self.rotate_at + BATCH_MAX * (self.writers_per_shared + 1) > ARCHIVE_MAX_EVENTS:
            raise ValueError("rotate_at leaves no room under the 20,000 event cap")
        if self.members < 1 or self.members > 64:
            raise ValueError("members must be 1..64")


# ------------------------------------------------------------------ provisioning

def provision(run: Callable[..., dict], plan: Plan, folder: Path, access_ttl: int = 3600) -> dict:
    """Configuration, agent sessions and an auditor token through bailing-admin.
    `run(*args, input=None)` runs one command and returns its JSON output."""
    path = folder / "load-hub.json"
    path.write_text(json.dumps(hub_config()), "utf-8")
    run("config", "apply", str(path))

    def session(kind: str) -> dict:
        app, route = BINDINGS[kind]
        issued = run("sessions", "issue", "--client", app, "--routes", route,
                     "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", "tenant-7:user-42",
                     "--access-ttl", str(access_ttl))
        return {"kind": kind, **issued}

    groups = []
    for i in range(plan.shared):
        # Even groups are v1 archives of CRM sessions; odd ones are v2 archives whose ERP writer
        # is bound with CRM members (cross-system bindings).
        cross = i % 2 == 1
        writer = session("erp" if cross else "crm")
        others = [session("crm") for _ in range(plan.members - 1)]
        groups.append({"version": 2 if cross else 1, "writer": writer, "others": others})
    for _ in range(plan.separate):
        groups.append({"version": 1, "writer": session("crm"), "others": []})
    run("admins", "create", "load-auditor", "--role", "auditor", "--password-stdin", input=PASSWORD + "\n")
    token = run("admins", "token", "load-auditor")["token"]
    return {"groups": groups, "admin_token": token}


# ------------------------------------------------------------------ records

def digest(event: dict) -> str:
    """What identifies a visible event, as submitted and as the admin API shows it."""
    keys = ("event_id", "sequence", "client_turn_id", "kind", "content", "status")
    return hashlib.sha256(json.dumps([event.get(k) for k in keys]).encode()).hexdigest()


def text_bytes(events: list[dict]) -> int:
    return sum(len(e.get("content", "").encode("utf-8")) for e in events)


@dataclass
class Batch:
    events: list[dict]

    @property
    def first(self) -> int:
        return self.events[0]["sequence"]

    @property
    def last(self) -> int:
        return self.events[-1]["sequence"]


@dataclass
class Archive:
    id: str
    group: Group
    acked: list[Batch] = field(default_factory=list)
    lost: list[Batch] = field(default_factory=list)   # response never arrived; present or absent
    acked_max: int = 0
    text: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, batch: Batch) -> None:
        with self.lock:
            self.acked.append(batch)
            self.acked_max = max(self.acked_max, batch.last)
            self.text += text_bytes(batch.events)

    def nearly_full(self, plan: Plan, writers: int) -> bool:
        return (self.acked_max + BATCH_MAX > plan.rotate_at
                or self.text + BATCH_TEXT_MAX * (writers + 1) > ARCHIVE_MAX_TEXT)


class Stats:
    """Latencies and statuses per operation, from every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter] = defaultdict(Counter)
        self.problems: list[str] = []
        self.notes: Counter = Counter()

    def add(self, op: str, seconds: float, status: int | str) -> None:
        with self.lock:
            self.latency[op].append(seconds * 1000)
            self.statuses[op][status] += 1

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)

    def note(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.notes[key] += n


class Lost(Exception):
    """No HTTP response: a timeout or a dropped connection."""


class Client:
    """One thread's HTTP connection, timing every request."""

    def __init__(self, base: str, stats: Stats):
        self.base = base
        self.stats = stats
        self.http = requests.Session()

    def call(self, op: str, method: str, path: str, allowed: dict[int, str | None],
             **kwargs) -> requests.Response:
        """`allowed` maps each expected status to the error code it must carry (None: any body).
        Anything else is recorded as a problem; a missing response raises Lost."""
        started = time.perf_counter()
        try:
            response = self.http.request(method, self.base + path, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as exc:
            self.stats.add(op, time.perf_counter() - started, "lost")
            self.stats.problem(f"{op}: no response ({type(exc).__name__})")
            raise Lost() from exc
        self.stats.add(op, time.perf_counter() - started, response.status_code)
        code = error_code(response)
        if response.status_code not in allowed or allowed[response.status_code] not in (None, code):
            self.stats.problem(f"{op}: unexpected {response.status_code} {code}: {response.text[:300]}")
        return response

    def close(self) -> None:
        self.http.close()


def error_code(response: requests.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


OK = {200: None}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


# ------------------------------------------------------------------ archives and groups

class Group:
    """One writer identity (with its members) and the archive its writers append to now; when that
    archive is nearly full, the first writer to notice opens the next one with the same members."""

    def __init__(self, index: int, spec: dict, writers: int, registry: Registry):
        self.index = index
        self.spec = spec
        self.writers = writers
        self.registry = registry
        self.lock = threading.Lock()
        self.current: Archive | None = None

    @property
    def shared(self) -> bool:
        return self.writers > 1

    def create_body(self) -> dict:
        writer, others = self.spec["writer"], self.spec["others"]
        common = {"client_archive_id": str(uuid.uuid4()),
                  "client_conversation_id": f"load-{self.index}-{uuid.uuid4().hex[:8]}"}
        if self.spec["version"] == 1:
            return {**common, "route": BINDINGS[writer["kind"]][1],
                    "member_session_ids": [writer["session_id"]] + [o["session_id"] for o in others],
                    "member_labels": {writer["session_id"]: f"writer {self.index}"}}
        members = []
        for who in [writer] + others:
            app, route = BINDINGS[who["kind"]]
            members.append({"session_id": who["session_id"], "client_app_id": app, "route": route,
                            "label": f"{app} {who['session_id'][:8]}"})
        return {"schema": CREATE_V2, **common, "members": members}

    def open(self, client: Client) -> Archive:
        """Create the archive and have every other member confirm with its own bearer."""
        writer = self.spec["writer"]
        response = client.call("create", "POST", AUDITS, {200: None}, json=self.create_body(),
                               headers=bearer(writer["access_token"]))
        if response.status_code != 200:
            raise RuntimeError(f"create failed: {response.status_code} {response.text[:300]}")
        header = response.json()["conversation"]
        for other in self.spec["others"]:
            response = client.call("confirm", "POST", f"{AUDITS}/{header['conversation_id']}/confirm",
                                   OK, json={}, headers=bearer(other["access_token"]))
            if response.status_code != 200:
                raise RuntimeError(f"confirm failed: {response.status_code} {response.text[:300]}")
            header = response.json()["conversation"]
        if header["state"] != "ready" or header["confirmed_count"] != len(self.spec["others"]) + 1:
            raise RuntimeError(f"archive not ready after every confirmation: {header}")
        archive = Archive(header["conversation_id"], self)
        self.registry.add(archive)
        return archive

    def archive(self, client: Client, plan: Plan) -> Archive:
        with self.lock:
            if self.current is None or self.current.nearly_full(plan, self.writers):
                self.current = self.open(client)
            return self.current


class Registry:
    def __init__(self):
        self.lock = threading.Lock()
        self.archives: list[Archive] = []

    def add(self, archive: Archive) -> None:
        with self.lock:
            self.archives.append(archive)

    def snapshot(self) -> list[Archive]:
        with self.lock:
            return list(self.archives)


# ------------------------------------------------------------------ event content

EMOJI = "\U0001F642"  # two UTF-16 code units, four UTF-8 bytes


def content_for(rnd: random.Random, eid: str, room: int, longest: bool = False) -> str:
    """Visible text of various sizes, sometimes (or when `longest`) the 64,000 UTF-16 unit
    maximum, when the batch still has `room` bytes for it."""
    roll = rnd.random()
    if (longest or roll < 0.01) and room >= TEXT_MAX_UNITS * 2:
        # exactly the maximum in UTF-16 code units, with surrogate pairs counted twice
        head = f"{eid} " + EMOJI * 100
        return head + "x" * (TEXT_MAX_UNITS - len(head) - 100)
    if roll < 0.06 and room >= 8192:
        return f"{eid}: " + "Grüße, 你好, " * 400
    if roll < 0.3:
        return f"{eid}: Ünïcödé {EMOJI} 你好 — line\nsecond line\ttab"
    return f"{eid}: the customer asked about order {rnd.randint(1, 10**6)}."


class Writer:
    """Makes this writer's events: unique ids, turns that (on separate archives) run across
    batches, text of various sizes."""

    def __init__(self, name: str, rnd: random.Random):
        self.name = name
        self.rnd = rnd
        self.count = 0
        self.turns = 0
        self.batches = 0
        self.said = False
        self.running: str | None = None   # the open turn (separate archives only)
        self.left = 0                      # messages still to say in it

    def eid(self) -> str:
        self.count += 1
        return f"{self.name}-{self.count}"

    def reset(self) -> None:
        """A new archive: the open turn stays open in the old one."""
        self.running, self.left = None, 0

    def next_turn(self) -> str:
        self.turns += 1
        return f"{self.name}-t{self.turns}"

    def message(self, turn: str, seq: int, room: int) -> dict:
        eid = self.eid()
        kind = self.rnd.choice(("user_message", "assistant_message"))
        # Every writer's first message is the longest text allowed, so a short run has some.
        longest, self.said = not self.said, True
        return {"event_id": eid, "sequence": seq, "client_turn_id": turn, "kind": kind,
                "content": content_for(self.rnd, eid, room, longest)}

    def whole_turn(self, first: int, size: int) -> list[dict]:
        """turn_start, size-2 messages, turn_end: a batch that leaves no turn open, so several
        writers can interleave their batches on one archive."""
        turn = self.next_turn()
        events = [{"event_id": self.eid(), "sequence": first, "client_turn_id": turn, "kind": "turn_start"}]
        room = BATCH_TEXT_MAX
        for seq in range(first + 1, first + size - 1):
            events.append(self.message(turn, seq, room - 1024 * (size - len(events))))
            room -= len(events[-1]["content"].encode("utf-8"))
        status = self.rnd.choice(("completed", "completed", "failed", "cancelled"))
        events.append({"event_id": self.eid(), "sequence": first + size - 1, "client_turn_id": turn,
                       "kind": "turn_end", "status": status})
        return events

    def stream(self, first: int, size: int) -> list[dict]:
        """The next `size` events of one continuous conversation: turns span batches."""
        events, room = [], BATCH_TEXT_MAX
        for seq in range(first, first + size):
            if self.running is None:
                self.running, self.left = self.next_turn(), self.rnd.randint(0, 60)
                events.append({"event_id": self.eid(), "sequence": seq, "client_turn_id": self.running,
                               "kind": "turn_start"})
            elif self.left > 0:
                self.left -= 1
                events.append(self.message(self.running, seq, room - 1024 * (first + size - seq)))
                room -= len(events[-1]["content"].encode("utf-8"))
            else:
                status = self.rnd.choice(("completed", "failed", "cancelled"))
                events.append({"event_id": self.eid(), "sequence": seq, "client_turn_id": self.running,
                               "kind": "turn_end", "status": status})
                self.running = None
        return events


# ------------------------------------------------------------------ the load

class Load:
    def __init__(self, base_url: str, cast: dict, plan: Plan):
        plan.check()
        self.base = base_url
        self.plan = plan
        self.admin = bearer(cast["admin_token"])
        self.stats = Stats()
        self.registry = Registry()
        self.seed = plan.seed if plan.seed is not None else random.randrange(2**32)
        self.groups = []
        for i, spec in enumerate(cast["groups"]):
            writers = plan.writers_per_shared if i < plan.shared else 1
            self.groups.append(Group(i, spec, writers, self.registry))
        self.seen: dict[str, dict[int, str]] = defaultdict(dict)   # archive -> sequence -> digest
        self.ends: dict[str, set[int]] = defaultdict(set)          # where complete reads ended
        self.sizes: Counter = Counter()
        self.elapsed = 0.0
        self.stop_at = 0.0

    def header(self, client: Client, archive: Archive) -> int:
        """The archive's last_sequence, as the admin API shows it now."""
        response = client.call("cursor", "GET", f"{ADMIN}/{archive.id}", OK,
                               params={"limit": 1}, headers=self.admin)
        if response.status_code != 200:
            raise RuntimeError("cursor read failed")
        return response.json()["conversation"]["last_sequence"]

    # -------------------------------------------------------------- writers

    def post(self, client: Client, op: str, archive: Archive, batch: Batch, allowed: dict):
        token = archive.group.spec["writer"]["access_token"]
        return client.call(op, "POST", f"{AUDITS}/{archive.id}/events", allowed,
                           json={"events": batch.events}, headers=bearer(token))

    def deliver(self, client: Client, archive: Archive, batch: Batch) -> str:
        """'acked', 'conflict', 'absent', 'lost' or 'refused'. A lost response is retried
        unchanged, as the spec tells hosts to; a 409 to that retry proves the batch was not stored
        (another writer's events hold its sequences)."""
        shared = archive.group.shared
        # Several writers of one archive race for its next sequence: the loser's 409
        # conversation_audit_conflict is the refusal the spec documents for that. A lone writer
        # never gets one.
        allowed = {200: None, 409: CONFLICT} if shared else OK
        for attempt in range(4):
            try:
                response = self.post(client, "append" if attempt == 0 else "append_retry", archive,
                                     batch, allowed)
            except Lost:
                continue
            if response.status_code == 200:
                ack = response.json()
                if ack != {"schema": ACK, "conversation_id": archive.id, "last_sequence": batch.last}:
                    self.stats.problem(f"wrong acknowledgement {ack} for {batch.first}..{batch.last}")
                archive.record(batch)
                return "acked"
            if response.status_code == 409 and shared and error_code(response) == CONFLICT:
                return "conflict" if attempt == 0 else "absent"
            return "refused"  # already counted as a problem by Client.call
        archive.lost.append(batch)
        return "lost"

    def write(self, group: Group, name: str) -> None:
        rnd = random.Random(f"{self.seed}-{name}")
        client = Client(self.base, self.stats)
        writer = Writer(name, rnd)
        archive: Archive | None = None
        cursor = 0
        try:
            while time.monotonic() < self.stop_at:
                current = group.archive(client, self.plan)
                if current is not archive:
                    archive, cursor = current, (self.header(client, current) if group.shared else 0)
                    writer.reset()
                # The extremes first, so that even a short run acknowledges both.
                size = (BATCH_MAX, 1)[writer.batches] if writer.batches < 2 else rnd.choice(BATCH_SIZES)
                writer.batches += 1
                if group.shared:
                    batch = Batch(writer.whole_turn(cursor + 1, max(size, 2)))
                else:
                    batch = Batch(writer.stream(cursor + 1, size))
                outcome = self.deliver(client, archive, batch)
                if outcome == "acked":
                    with self.stats.lock:
                        self.sizes[len(batch.events)] += 1
                        self.stats.notes["longest_texts"] += sum(
                            len(e.get("content", "")) >= TEXT_MAX_UNITS - 100 for e in batch.events)
                    cursor = batch.last
                    if rnd.random() < 0.05:
                        self.replay(client, archive, batch)
                elif outcome in ("conflict", "absent", "lost"):
                    # Another writer took this sequence: the 409 the spec documents for a
                    # conflicting event sequence. It is only legitimate if the archive really
                    # holds that sequence by now (it never shrinks).
                    cursor = self.header(client, archive)
                    if outcome == "conflict":
                        self.stats.note("contention_409")
                        if cursor < batch.first:
                            self.stats.problem(f"409 for sequence {batch.first} of {archive.id}, "
                                               f"yet the archive ends at {cursor}")
                else:
                    return
        except (RuntimeError, Lost) as exc:
            self.stats.problem(f"writer {name} stopped: {exc}")
        finally:
            client.close()

    def replay(self, client: Client, archive: Archive, batch: Batch) -> None:
        """An identical retry of an acknowledged batch: 200, same acknowledgement, nothing new."""
        try:
            response = self.post(client, "replay", archive, batch, OK)
        except Lost:
            return
        if response.status_code == 200 and response.json()["last_sequence"] != batch.last:
            self.stats.problem(f"replay acknowledged {response.json()} instead of {batch.last}")

    # -------------------------------------------------------------- readers

    def read(self, name: str) -> None:
        rnd = random.Random(f"{self.seed}-{name}")
        client = Client(self.base, self.stats)
        known: dict[str, int] = {}      # the furthest sequence this reader knows exists
        seen: dict[str, dict[int, str]] = defaultdict(dict)
        ends: dict[str, set[int]] = defaultdict(set)
        try:
            while time.monotonic() < self.stop_at:
                archives = self.registry.snapshot()
                if not archives:
                    time.sleep(0.01)
                    continue
                archive = rnd.choice(archives)
                self.read_pages(client, rnd, archive, known, seen[archive.id], ends[archive.id])
        except (RuntimeError, Lost) as exc:
            self.stats.problem(f"reader {name} stopped: {exc}")
        finally:
            client.close()
            with self.stats.lock:
                for archive_id, events in seen.items():
                    for seq, value in events.items():
                        if self.seen[archive_id].setdefault(seq, value) != value:
                            self.stats.problems.append(f"readers saw two versions of {archive_id}#{seq}")
                    self.ends[archive_id] |= ends[archive_id]

    def read_pages(self, client: Client, rnd: random.Random, archive: Archive, known: dict,
                   seen: dict[int, str], ends: set[int]) -> None:
        """Page from 0 or from near the end this reader knows, checking every page."""
        mine = known.get(archive.id, 0)
        after = 0 if rnd.random() < 0.3 else max(0, mine - rnd.randint(0, 400))
        floor = archive.acked_max  # acknowledged before the first request: must be visible
        where = f"{archive.id} after {after}"
        for _ in range(10):
            if time.monotonic() >= self.stop_at:
                return
            limit = rnd.choice(PAGE_LIMITS)
            response = client.call("read_page", "GET", f"{ADMIN}/{archive.id}", OK,
                                   params={"after_sequence": after, "limit": limit}, headers=self.admin)
            if response.status_code != 200:
                return
            page = response.json()
            header = page["conversation"]
            last = header["last_sequence"]
            if header["state"] != "ready" or len(page["members"]) != header["member_count"] \
                    or not all(m["confirmed"] for m in page["members"]):
                self.stats.problem(f"{where}: header {header} with members {page['members']}")
            sequences = [e["sequence"] for e in page["events"]]
            if sequences != list(range(after + 1, after + 1 + len(sequences))) or len(sequences) > limit:
                self.stats.problem(f"{where}: page of {limit} has sequences "
                                   f"{sequences[:5]}..{sequences[-5:]}")
                return
            for event in page["events"]:
                value = digest(event)
                if seen.setdefault(event["sequence"], value) != value:
                    self.stats.problem(f"{where}: event {event['sequence']} changed between reads")
            if last < max(floor, known.get(archive.id, 0)):
                self.stats.problem(f"{where}: header last_sequence {last} is behind what was already "
                                   f"acknowledged ({floor}) or seen ({known.get(archive.id, 0)})")
            known[archive.id] = max(known.get(archive.id, 0), last)
            if sequences and sequences[-1] > last:
                # The header and the events are separate statements of one read: a batch committed
                # between them must not show in the events only.
                self.stats.note("header_behind_events")
                self.stats.problem(f"{where}: events up to {sequences[-1]} under a header ending at {last}")
            if page["has_more"]:
                if len(sequences) != limit or page["next_after_sequence"] != sequences[-1]:
                    self.stats.problem(f"{where}: has_more with {len(sequences)} of {limit} events, "
                                       f"next_after_sequence {page['next_after_sequence']}")
                    return
                after = sequences[-1]
                continue
            end = sequences[-1] if sequences else after
            if page["next_after_sequence"] != end:
                self.stats.problem(f"{where}: last page's next_after_sequence is not where it ended")
            if end != last:
                self.stats.problem(f"{where}: the last page ends at {end}, its header at {last}")
            if end < known[archive.id] or end < floor:
                self.stats.problem(f"{where}: transcript ends at {end}, but {max(floor, known[archive.id])} "
                                   "was already acknowledged or seen (a sequence went backwards)")
            known[archive.id] = max(known.get(archive.id, 0), end)
            ends.add(end)
            return

    # -------------------------------------------------------------- running

    def guard(self, target, *args) -> None:
        """A thread that dies of anything unforeseen (say a reply that is not JSON) is a problem
        to report, not a traceback lost on stderr."""
        try:
            target(*args)
        except Exception as exc:  # noqa: BLE001
            self.stats.problem(f"{threading.current_thread().name} died: {type(exc).__name__}: {exc}")

    def run(self) -> None:
        client = Client(self.base, self.stats)
        try:
            for group in self.groups:  # every archive exists before the clock starts
                group.archive(client, self.plan)
        finally:
            client.close()
        threads = []
        for group in self.groups:
            for w in range(group.writers):
                name = f"g{group.index}w{w}"
                threads.append(threading.Thread(target=self.guard, args=(self.write, group, name), name=name))
        for r in range(self.plan.readers):
            threads.append(threading.Thread(target=self.guard, args=(self.read, f"r{r}"), name=f"r{r}"))
        started = time.monotonic()
        self.stop_at = started + self.plan.seconds
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.elapsed = time.monotonic() - started


# ------------------------------------------------------------------ afterwards

def stored_archive(conn: psycopg.Connection, archive_id: str) -> tuple:
    header = conn.execute("""
        SELECT last_sequence, message_count, turn_count, text_bytes, running_turn_id, last_turn_status
        FROM bz_agent_conversation_archives WHERE id = %s""", (archive_id,)).fetchone()
    rows = conn.execute("""
        SELECT sequence, event_id, client_turn_id, kind, content, status
        FROM bz_agent_conversation_events WHERE archive_id = %s ORDER BY sequence""",
                        (archive_id,)).fetchall()
    events = [{"sequence": r[0], "event_id": r[1], "client_turn_id": r[2], "kind": r[3],
               **({"content": r[4]} if r[4] is not None else {}),
               **({"status": r[5]} if r[5] is not None else {})} for r in rows]
    return header, events


def verify(load: Load, db_url: str) -> list[str]:
    """Every archive against what was acknowledged and what readers saw; returns the problems."""
    problems = list(load.stats.problems)
    with psycopg.connect(db_url) as conn:
        for archive in load.registry.snapshot():
            problems += verify_archive(load, archive, *stored_archive(conn, archive.id))
    return problems


def verify_archive(load: Load, archive: Archive, header: tuple, events: list[dict]) -> list[str]:
    out = []
    name = archive.id
    last, messages, turns, text, running, status = header
    sequences = [e["sequence"] for e in events]
    if sequences != list(range(1, len(events) + 1)) or last != len(events):
        out.append(f"{name}: stored sequences are not 1..{last}")
        return out
    ids = Counter(e["event_id"] for e in events)
    out += [f"{name}: event_id {eid} stored {n} times" for eid, n in ids.items() if n > 1]
    by_seq = {e["sequence"]: e for e in events}
    claimed: dict[int, str] = {}
    boundaries = {0}
    for batch in archive.acked:
        for event in batch.events:
            if claimed.setdefault(event["sequence"], event["event_id"]) != event["event_id"]:
                out.append(f"{name}: two acknowledged batches hold sequence {event['sequence']}")
            stored = by_seq.get(event["sequence"])
            if stored is None or digest(stored) != digest(event):
                out.append(f"{name}: acknowledged event {event['event_id']} at {event['sequence']} "
                           f"is {'missing' if stored is None else 'different'}")
        boundaries.add(batch.last)
    for batch in archive.lost:
        present = [by_seq.get(e["sequence"]) is not None and digest(by_seq[e["sequence"]]) == digest(e)
                   for e in batch.events]
        if any(present) and not all(present):
            out.append(f"{name}: a batch whose response was lost is partly stored")
        if all(present):
            claimed.update({e["sequence"]: e["event_id"] for e in batch.events})
            boundaries.add(batch.last)
    unacknowledged = sorted(set(by_seq) - set(claimed))
    if unacknowledged:
        out.append(f"{name}: {len(unacknowledged)} stored events were never acknowledged "
                   f"(from sequence {unacknowledged[0]})")
    if messages != sum(e["kind"].endswith("_message") for e in events) \
            or turns != sum(e["kind"] == "turn_start" for e in events) or text != text_bytes(events):
        out.append(f"{name}: header counts {messages}/{turns}/{text} disagree with the stored events")
    open_turn, last_status = None, None
    for e in events:
        if e["kind"] == "turn_start":
            open_turn, last_status = e["client_turn_id"], "running"
        elif e["kind"] == "turn_end":
            open_turn, last_status = None, e["status"]
    if (running, status) != (open_turn, last_status):
        out.append(f"{name}: header says turn {running} {status}, events say {open_turn} {last_status}")
    for seq, value in load.seen.get(name, {}).items():
        if seq not in by_seq or digest(by_seq[seq]) != value:
            out.append(f"{name}: a reader saw event {seq} that is not what is stored")
    bad_ends = sorted(load.ends.get(name, set()) - boundaries)
    if bad_ends:
        out.append(f"{name}: readers saw transcripts ending inside a batch, at {bad_ends[:5]}")
    return out


def final_read(load: Load) -> list[str]:
    """Each archive read whole through the admin API once the load is over, compared with what
    was acknowledged (a read path without contention, for contrast)."""
    out = []
    client = Client(load.base, load.stats)
    try:
        for archive in load.registry.snapshot():
            events, after, more = [], 0, True
            while more:
                response = client.call("final_read", "GET", f"{ADMIN}/{archive.id}", OK,
                                       params={"after_sequence": after, "limit": PAGE_MAX},
                                       headers=load.admin)
                page = response.json()
                events += page["events"]
                after, more = page["next_after_sequence"], page["has_more"]
            expected = sorted((e for b in archive.acked for e in b.events), key=lambda e: e["sequence"])
            if [digest(e) for e in events] != [digest(e) for e in expected]:
                out.append(f"{archive.id}: the admin API transcript differs from the acknowledged events")
    finally:
        client.close()
    return out


# ------------------------------------------------------------------ figures

def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def figures(load: Load, problems: list[str]) -> dict:
    stats = load.stats
    ops = {}
    load_ops = [op for op in stats.latency if op != "final_read"]
    for op, values in sorted(stats.latency.items()):
        ops[op] = {"n": len(values), "p50_ms": round(percentile(values, 50), 1),
                   "p95_ms": round(percentile(values, 95), 1), "p99_ms": round(percentile(values, 99), 1),
                   "max_ms": round(max(values), 1),
                   "statuses": {str(k): v for k, v in sorted(stats.statuses[op].items(), key=str)}}
    requests_total = sum(len(stats.latency[op]) for op in load_ops)
    archives = load.registry.snapshot()
    events = sum(len(b.events) for a in archives for b in a.acked)
    batches = sum(len(a.acked) for a in archives)
    server_errors = sum(n for counter in stats.statuses.values() for status, n in counter.items()
                        if isinstance(status, int) and status >= 500)
    return {
        "seconds": round(load.elapsed, 1),
        "requests": requests_total,
        "requests_per_s": round(requests_total / load.elapsed, 1) if load.elapsed else 0,
        "batches_acked": batches,
        "events_acked": events,
        "events_per_s": round(events / load.elapsed, 1) if load.elapsed else 0,
        "archives": len(archives),
        "batch_sizes": {"1": load.sizes[1], "50": load.sizes[50], "all": sum(load.sizes.values())},
        "server_errors_5xx": server_errors,
        "lost_responses": sum(c["lost"] for c in stats.statuses.values()),
        "contention_409": stats.notes["contention_409"],
        "longest_texts": stats.notes["longest_texts"],
        "header_behind_events": stats.notes["header_behind_events"],
        "reader_events_checked": sum(len(v) for v in load.seen.values()),
        "integrity": "ok" if not problems else f"{len(problems)} problems",
        "ops": ops,
    }


def report(fig: dict, problems: list[str], out=sys.stdout) -> None:
    print(f"\nload: {fig['seconds']} s, {fig['requests']} requests ({fig['requests_per_s']}/s), "
          f"{fig['batches_acked']} batches / {fig['events_acked']} events acknowledged "
          f"({fig['events_per_s']} events/s) in {fig['archives']} archives", file=out)
    print(f"  5xx: {fig['server_errors_5xx']}, lost responses: {fig['lost_responses']}, "
          f"409 under contention: {fig['contention_409']}, header behind events: "
          f"{fig['header_behind_events']}, batches of 1 / 50: {fig['batch_sizes']['1']} / "
          f"{fig['batch_sizes']['50']}, 64,000-unit texts: {fig['longest_texts']}, events checked by "
          f"readers: {fig['reader_events_checked']}", file=out)
    print(f"  {'operation':<13}{'n':>7}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}  statuses",
          file=out)
    for op, row in fig["ops"].items():
        print(f"  {op:<13}{row['n']:>7}{row['p50_ms']:>9}{row['p95_ms']:>9}{row['p99_ms']:>9}"
              f"{row['max_ms']:>9}  {row['statuses']}", file=out)
    print(f"  integrity: {fig['integrity']}", file=out)
    for problem in problems[:30]:
        print(f"    - {problem}", file=out)


# ------------------------------------------------------------------ by hand

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--shared", type=int, default=2, help="archives with several writers")
    parser.add_argument("--writers", type=int, default=3, help="writer threads per shared archive")
    parser.add_argument("--members", type=int, default=3, help="members of a shared archive")
    parser.add_argument("--separate", type=int, default=4, help="archives with one writer each")
    parser.add_argument("--readers", type=int, default=4, help="transcript reader threads")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    plan = Plan(seconds=args.seconds, shared=args.shared, writers_per_shared=args.writers,
                members=args.members, separate=args.separate, readers=args.readers, seed=args.seed)

    from bench import common

    with common.bench_hub(args.workers) as (db_url, operator, hub, folder):
        # The access tokens must outlive the run (at most one day).
        cast = provision(operator, plan, folder, access_ttl=min(24 * 3600, int(args.seconds) + 3600))
        load = Load(hub.url, cast, plan)
        print(f"load: {args.workers} gunicorn workers ({common.server_label()} PostgreSQL), "
              f"{plan.shared} shared archives x {plan.writers_per_shared} writers, {plan.separate} "
              f"separate writers, {plan.readers} readers, {plan.seconds:g} s, seed {load.seed}", flush=True)
        load.run()
        problems = verify(load, db_url) + final_read(load)
        fig = figures(load, problems)
        report(fig, problems)
        common.finish("load", {**{k: v for k, v in fig.items() if k != "ops"},
                               "workers": args.workers, "ops": fig["ops"]})
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
