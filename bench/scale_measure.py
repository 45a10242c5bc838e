"""Every console and admin read, and the append, on a year's volume beside a nearly empty
database, in one run: the two databases made by `bench/scale.py` (a full one and a small one),
each served by its own gunicorn hub, every case timed in alternating rounds on both, then the
ratio big/empty of the medians. A last pass serves the big database again with `auto_explain`
(`PGOPTIONS`) and keeps `EXPLAIN (ANALYZE, BUFFERS)` of every statement over 20 ms.

    python bench/scale.py --data-dir var/scale --json var/scale.json
    python bench/scale.py --data-dir var/scale --database bailing_small --scale 0.002 \
        --json var/scale-small.json
    python bench/scale_measure.py --big var/scale.json --empty var/scale-small.json \
        --json var/scale-measure.json --explain var/scale-explain.txt

Cases are found from the data themselves (the archive of 20,000 events, the biggest archive, a
run, an invocation, an app, a route, a principal, a tenant, a reader of the access log, a term
rare and a term common in messages), so that both databases are asked the same questions.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (PASSWORD, LeanClient, Operator, bearer, console_login, events,
                    finish, percentile, ratio)

from tests.gunicorn_hub import GunicornHub

ADMIN = "scale-measure"
TRANSCRIPT_EVENTS = 20_000
SLOW_MS = 20  # statements slower than this get their plan kept


def auto_explain(slow_ms: int) -> str:
    """libpq options that make each connection log the plan of every statement over `slow_ms`."""
    return (f"-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration={slow_ms} "
            "-c auto_explain.log_analyze=on -c auto_explain.log_buffers=on "
            "-c auto_explain.log_timing=on -c auto_explain.log_nested_statements=on")
# Targets of the issue: a page's median on the server, and the ratio big/empty.
PAGE_MS, SEARCH_MS, RATIO_MAX, APPEND_DROP = 100.0, 300.0, 2.0, 0.10


@dataclass
class Side:
    """One database: its URL, what its data hold, and the hub serving it."""
    label: str
    url: str
    facts: dict = field(default_factory=dict)
    hub: GunicornHub | None = None
    cookie: str = ""
    token: str = ""
    agent: dict = field(default_factory=dict)


def _url(path: str) -> str:
    return json.loads(Path(path).read_text("utf-8"))["database_url"]


def _one(conn: psycopg.Connection, sql: str, params: tuple = ()):
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def discover(url: str) -> dict:
    """The values each case asks about, read from the data (the same choice on both sides)."""
    with psycopg.connect(url) as conn:
        transcript = _one(conn, """SELECT id FROM bz_agent_conversation_archives
                                   WHERE last_sequence <= %s ORDER BY last_sequence DESC, id LIMIT 1""",
                          (TRANSCRIPT_EVENTS,))
        biggest = _one(conn, "SELECT id FROM bz_agent_conversation_archives ORDER BY last_sequence DESC, id LIMIT 1")
        run = conn.execute("""SELECT id, session_id, client_conversation_id, client_turn_id, client_app_id,
                                     route_key FROM bz_runs ORDER BY created_at DESC, id DESC
                              OFFSET 100 LIMIT 1""").fetchone()
        linked = _one(conn, """SELECT run_id FROM bz_agent_conversation_events
                               WHERE run_id IS NOT NULL ORDER BY run_id LIMIT 1""")
        call = conn.execute("""SELECT id, invocation_id, tool FROM bz_tool_invocations
                               ORDER BY created_at DESC, id DESC OFFSET 100 LIMIT 1""").fetchone()
        member = conn.execute("""SELECT principal ->> 'id', principal ->> 'tenant' FROM bz_agent_conversation_members
                                 WHERE principal IS NOT NULL ORDER BY archive_id LIMIT 1""").fetchone()
        approval = conn.execute("""SELECT id, tool, route_key, risk, on_behalf_of FROM bz_tool_approvals
                                   WHERE status = 'pending' ORDER BY created_at, id LIMIT 1""").fetchone()
        # A reader and the most read target of the data set's own log (not of this script's reads,
        # nor of the generator's check through the hub), so that both sides show a full page.
        reader = _one(conn, "SELECT username FROM bz_access_log WHERE username <> %s ORDER BY id DESC LIMIT 1",
                      (ADMIN,))
        target = _one(conn, """SELECT target FROM bz_access_log WHERE username NOT IN (%s, 'scale-admin')
                               GROUP BY target ORDER BY count(*) DESC, target LIMIT 1""", (ADMIN,))
        span = conn.execute("""SELECT min(updated_at)::date, max(updated_at)::date
                               FROM bz_agent_conversation_archives""").fetchone()
        app_route = conn.execute("""SELECT client_app_id, route_key FROM bz_agent_conversation_archives
                                    ORDER BY updated_at DESC LIMIT 1""").fetchone()
    middle = span[0] + (span[1] - span[0]) / 2
    return {"transcript": str(transcript), "biggest": str(biggest), "run": str(run[0]), "linked_run": str(linked),
            "run_session": str(run[1]), "run_conversation": run[2], "run_turn": run[3], "run_app": run[4],
            "run_route": run[5], "job": str(call[0]), "invocation": call[1], "tool": call[2],
            "principal": member[0], "tenant": member[1], "approval": str(approval[0]), "approval_tool": approval[1],
            "approval_route": approval[2], "approval_risk": approval[3], "requester": approval[4] or "",
            "reader": reader, "target": target, "day": middle.isoformat(), "app": app_route[0], "route": app_route[1]}


def cases(f: dict, rare: str, common: str) -> dict[str, tuple[str, str]]:
    """name -> (kind, path): `console` pages (signed-in cookie) and `api` reads (admin token)."""
    conv = "/console/conversations/"
    t = f"/console/conversations/{f['transcript']}"
    q = urlencode
    return {
        "conversations: first page": ("console", conv),
        "conversations: state": ("console", conv + "?" + q({"state": "ready"})),
        "conversations: app": ("console", conv + "?" + q({"app": f["app"]})),
        "conversations: route": ("console", conv + "?" + q({"route": f["route"]})),
        "conversations: last turn failed": ("console", conv + "?" + q({"status": "failed"})),
        "conversations: principal": ("console", conv + "?" + q({"principal": f["principal"]})),
        "conversations: tenant": ("console", conv + "?" + q({"tenant": f["tenant"]})),
        "conversations: one day": ("console", conv + "?" + q({"from": f["day"], "to": f["day"]})),
        "conversations: created, oldest first": ("console", conv + "?" + q({"sort": "created", "dir": "asc"})),
        "conversations: most events": ("console", conv + "?" + q({"sort": "events", "dir": "desc"})),
        "conversations: id prefix": ("console", conv + "?" + q({"q": f["transcript"][:8]})),
        "search: rare term": ("console", conv + "?" + q({"q": rare})),
        "search: common term": ("console", conv + "?" + q({"q": common})),
        "transcript: first page": ("console", t),
        "transcript: middle": ("console", t + "?at=10000"),
        "transcript: last page": ("console", t + "?at=end"),
        "transcript: next 200 (htmx)": ("console", t + "/events?after=9800"),
        "transcript: search inside": ("console", t + "/search?" + q({"q": common})),
        "runs: first page": ("console", "/console/runs/"),
        "runs: status failed": ("console", "/console/runs/?status=failed"),
        "runs: app and route": ("console", "/console/runs/?" + q({"app": f["run_app"], "route": f["run_route"]})),
        "runs: one day": ("console", "/console/runs/?" + q({"from": f["day"], "to": f["day"]})),
        "runs: id prefix": ("console", "/console/runs/?" + q({"q": f["run"][:8]})),
        "runs: session": ("console", "/console/runs/?" + q({"session": f["run_session"]})),
        "runs: conversation": ("console", "/console/runs/?" + q({"conversation": f["run_conversation"]})),
        "runs: invocation prefix": ("console", "/console/runs/?" + q({"q": f["invocation"][:12]})),
        "runs: unresolved": ("console", "/console/runs/unresolved"),
        "run trace": ("console", f"/console/runs/{f['linked_run']}"),
        "approvals: queue": ("console", "/console/approvals/"),
        "approvals: queue by tool": ("console", "/console/approvals/?" + q({"tool": f["approval_tool"]})),
        "approvals: queue by risk": ("console", "/console/approvals/?" + q({"risk": f["approval_risk"]})),
        "approvals: history": ("console", "/console/approvals/history"),
        "approvals: count": ("console", "/console/approvals/count"),
        "approval page": ("console", f"/console/approvals/{f['approval']}"),
        "access log: first page": ("console", "/console/access-log"),
        "access log: person": ("console", "/console/access-log?" + q({"person": f["reader"]})),
        "access log: action": ("console", "/console/access-log?" + q({"action": "transcript_view"})),
        "access log: target": ("console", "/console/access-log?" + q({"target": f["target"]})),
        "access log: one day": ("console", "/console/access-log?" + q({"from": f["day"], "to": f["day"]})),
        "api: audits list": ("api", "/admin/api/conversation-audits?limit=50"),
        "api: audit first page": ("api", f"/admin/api/conversation-audits/{f['transcript']}?limit=200"),
        "api: audit last page": ("api", (f"/admin/api/conversation-audits/{f['transcript']}"
                                        f"?after_sequence={TRANSCRIPT_EVENTS - 200}&limit=200")),
        "api: run lookup": ("api", f"/admin/api/agent-runs/{f['linked_run']}"),
        "api: invocation lookup": ("api", f"/admin/api/tool-jobs/{f['job']}"),
        "api: approvals pending": ("api", "/admin/api/tool-approvals?status=pending&limit=50"),
        "api: approvals decided": ("api", "/admin/api/tool-approvals?status=decided&limit=50"),
    }


SEARCHES = ("search: rare term", "search: common term", "transcript: search inside")


def prepare(side: Side, scratch: Path) -> None:
    """An admin who can sign in and an agent session that can append, made through the CLI, for
    the first client app of the data set's configuration and its first route."""
    operator = Operator(side.url, scratch / side.label)
    try:
        with psycopg.connect(side.url) as conn:
            exists = _one(conn, "SELECT 1 FROM bz_admins WHERE username = %s", (ADMIN,))
            app, routes = conn.execute("SELECT app_id, allowed_routes FROM bz_client_apps "
                                       "WHERE enabled ORDER BY app_id LIMIT 1").fetchone()
        if not exists:
            operator("admins", "create", ADMIN, "--role", "admin", "--password-stdin", input=PASSWORD + "\n")
        side.token = operator("admins", "token", ADMIN)["token"]
        side.agent = {**operator.session(app, routes[0]), "route": routes[0]}
    finally:
        operator.close()


def sign_in(side: Side) -> None:
    assert side.hub is not None
    http = console_login(side.hub.url, ADMIN)
    side.cookie = "; ".join(f"{c.name}={c.value}" for c in http.cookies)


def timed(client: LeanClient, side: Side, kind: str, path: str) -> tuple[float, int]:
    headers = {"Cookie": side.cookie} if kind == "console" else bearer(side.token)
    started = time.perf_counter()
    status, body = client.request("GET", path, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        raise RuntimeError(f"{side.label}: GET {path} -> {status}: {body[:500]!r}")
    return elapsed, len(body)


def measure_pages(sides: list[Side], table: dict[str, dict[str, tuple[str, str]]], repetitions: int,
                  rounds: int) -> dict[str, dict]:
    """Each case on each side in alternating rounds (after 2 warm-up calls each)."""
    clients = {s.label: LeanClient(s.hub.url) for s in sides}  # type: ignore[union-attr]
    times: dict[str, dict[str, list[float]]] = {name: {s.label: [] for s in sides} for name in table[sides[0].label]}
    sizes: dict[str, dict[str, int]] = {name: {} for name in times}
    for side in sides:
        for kind, path in table[side.label].values():
            for _ in range(2):
                timed(clients[side.label], side, kind, path)
    for _ in range(rounds):
        for name in times:
            for side in sides:
                kind, path = table[side.label][name]
                for _ in range(max(1, repetitions // rounds)):
                    ms, size = timed(clients[side.label], side, kind, path)
                    times[name][side.label].append(ms)
                    sizes[name][side.label] = size
    return {name: {label: {"median_ms": round(statistics.median(v), 2), "p95_ms": round(percentile(v, 95), 2),
                           "bytes": sizes[name][label], "n": len(v)} for label, v in per.items()}
            for name, per in times.items()}


def append_rate(side: Side, total: int) -> float:
    """Events per second into a new archive of this side, batches of 50 through the agent API."""
    assert side.hub is not None
    client = LeanClient(side.hub.url)
    headers = {**bearer(side.agent["access_token"]), "Content-Type": "application/json"}
    body = {"client_archive_id": str(uuid.uuid4()), "client_conversation_id": f"scale-{uuid.uuid4().hex[:8]}",
            "route": side.agent["route"], "member_session_ids": [side.agent["session_id"]]}
    status, raw = client.request("POST", "/agent-api/v1/conversation-audits", json.dumps(body).encode(), headers)
    if status != 200:
        raise RuntimeError(f"archive: {status} {raw[:300]!r}")
    archive = json.loads(raw)["conversation"]["conversation_id"]
    path = f"/agent-api/v1/conversation-audits/{archive}/events"
    bodies = [json.dumps({"events": events(first, 50)}).encode() for first in range(1, total + 1, 50)]
    started = time.perf_counter()
    for payload in bodies:
        status, raw = client.request("POST", path, payload, headers)
        if status != 200:
            raise RuntimeError(f"append: {status} {raw[:300]!r}")
    return total / (time.perf_counter() - started)


def measure_appends(sides: list[Side], total: int, rounds: int) -> dict[str, dict]:
    rates: dict[str, list[float]] = {s.label: [] for s in sides}
    for _ in range(rounds):
        for side in sides:
            rates[side.label].append(append_rate(side, total))
    return {label: {"median_events_per_s": round(statistics.median(r), 1), "rounds": [round(x) for x in r]}
            for label, r in rates.items()}


def measure_export(side: Side, repetitions: int) -> dict:
    assert side.hub is not None
    client = LeanClient(side.hub.url, timeout=600)
    path = f"/console/conversations/{side.facts['biggest']}/export.json"
    runs = [timed(client, side, "console", path) for _ in range(repetitions)]
    return {"median_ms": round(statistics.median(ms for ms, _ in runs), 1), "bytes": runs[-1][1]}


def log_file(url: str) -> Path | None:
    """The embedded server's log (pg_ctl -l <pgdata>/log); None for a server logging elsewhere."""
    with psycopg.connect(url) as conn:
        data = Path(_one(conn, "SHOW data_directory"))
        collector = _one(conn, "SELECT pg_current_logfile()")
    if collector:
        return data / collector
    candidate = data / "log"
    return candidate if candidate.exists() else None


def explain_pass(side: Side, table: dict[str, tuple[str, str]], scratch: Path, slow_ms: int) -> str:
    """Every case once more on a hub whose connections run auto_explain; the plans it logged."""
    log = log_file(side.url)
    if log is None:
        return "(the server's log is not readable here: no plans kept)\n"
    start = log.stat().st_size
    env = {"PGOPTIONS": auto_explain(slow_ms), "DEMO_CRM_SECRET": "x", "DEMO_ERP_SECRET": "x"}
    out = []
    with GunicornHub(side.url, workers=1, data_dir=scratch / "explain", env=env) as hub:
        side.hub = hub
        sign_in(side)
        client = LeanClient(hub.url)
        for name, (kind, path) in table.items():
            mark = log.stat().st_size
            ms, _ = timed(client, side, kind, path)
            out.append((name, path, ms, mark))
    text = log.read_bytes()[start:].decode("utf-8", "replace")
    sections = []
    for i, (name, path, ms, mark) in enumerate(out):
        end = out[i + 1][3] if i + 1 < len(out) else log.stat().st_size
        chunk = log.read_bytes()[mark:end].decode("utf-8", "replace")
        plans = [p for p in chunk.split("LOG:  duration: ")[1:] if "plan:" in p]
        if plans:
            sections.append(f"### {name}\n\n`GET {path}` ({ms:.0f} ms with instrumentation)\n\n"
                            + "\n".join("```\nduration: " + p.strip() + "\n```" for p in plans))
    return ("\n\n".join(sections) + "\n") if sections else f"(no statement over {slow_ms} ms; log {len(text)} bytes)\n"


def report(pages: dict, appends: dict, exports: dict) -> tuple[list[str], bool]:
    lines = ["| case | big median / p95 ms | empty median / p95 ms | big/empty | met |",
             "| --- | --- | --- | --- | --- |"]
    ok = True
    for name, per in pages.items():
        big, empty = per["big"], per["empty"]
        r = ratio(big["median_ms"], empty["median_ms"])
        limit = SEARCH_MS if name in SEARCHES else PAGE_MS
        met = big["median_ms"] < limit and (name in SEARCHES or r < RATIO_MAX)
        ok &= met
        lines.append(f"| {name} | {big['median_ms']} / {big['p95_ms']} | {empty['median_ms']} / {empty['p95_ms']} "
                     f"| {r} | {'yes' if met else 'NO'} |")
    big_rate, empty_rate = appends["big"]["median_events_per_s"], appends["empty"]["median_events_per_s"]
    append_met = big_rate >= (1 - APPEND_DROP) * empty_rate
    ok &= append_met
    lines.append(f"| append (events/s, median of rounds) | {big_rate} | {empty_rate} | {ratio(big_rate, empty_rate)} "
                 f"| {'yes' if append_met else 'NO'} |")
    lines.append(f"| export of the biggest archive | {exports['big']['median_ms']} ms, {exports['big']['bytes']} B "
                 f"| {exports['empty']['median_ms']} ms, {exports['empty']['bytes']} B | | |")
    return lines, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", required=True, help="scale.py's JSON of the full data set")
    parser.add_argument("--empty", required=True, help="scale.py's JSON of the small data set")
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--append-events", type=int, default=2000)
    parser.add_argument("--append-rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rare", default="Ishikawa", help="a term few messages hold")
    parser.add_argument("--common", default="invoice", help="a term many messages hold")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--explain", help="write the plans of slow statements here")
    parser.add_argument("--slow-ms", type=int, default=SLOW_MS, help="what a slow statement is (ms)")
    parser.add_argument("--only", help="only the cases whose name holds this text")
    parser.add_argument("--scratch", default="var/scale-measure")
    args = parser.parse_args()
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    sides = [Side("big", _url(args.big)), Side("empty", _url(args.empty))]
    started = time.perf_counter()
    for side in sides:
        prepare(side, scratch)
        side.facts = discover(side.url)
    table = {s.label: {name: case for name, case in cases(s.facts, args.rare, args.common).items()
                       if not args.only or args.only in name} for s in sides}
    env = {"DEMO_CRM_SECRET": "x", "DEMO_ERP_SECRET": "x"}
    with GunicornHub(sides[0].url, workers=args.workers, data_dir=scratch / "big", env=env) as big_hub, \
            GunicornHub(sides[1].url, workers=args.workers, data_dir=scratch / "empty", env=env) as empty_hub:
        sides[0].hub, sides[1].hub = big_hub, empty_hub
        for side in sides:
            sign_in(side)
        pages = measure_pages(sides, table, args.repetitions, args.rounds)
        appends = measure_appends(sides, args.append_events, args.append_rounds)
        exports = {s.label: measure_export(s, 3) for s in sides}
    lines, ok = report(pages, appends, exports)
    print("\n".join(lines))
    if args.explain:
        Path(args.explain).write_text(explain_pass(sides[0], table["big"], scratch, args.slow_ms), "utf-8")
        print(f"plans of statements over {args.slow_ms} ms: {args.explain}")
    figures = {"pages": pages, "appends": appends, "exports": exports, "facts": {s.label: s.facts for s in sides},
               "all_met": ok, "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1), "utf-8")
    finish("scale_measure", {"all_met": ok, "seconds": figures["seconds"]})


if __name__ == "__main__":
    main()
