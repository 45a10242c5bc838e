"""The approvals queue with fifty pending approvals of 1 MiB snapshots against fifty tiny ones.

Two hubs side by side, each on its own fresh database: in one, fifty invocations of the ERP
`order_import` write tool (approval required by its ACC) carry a CSV of about 1,000,000
characters; in the other, a CSV of one line. Both queues are read through the console page
(/console/approvals/, signed in as an approver through the login form) and the admin API list
(/admin/api/tool-approvals?status=pending), in alternating rounds.

Targets: huge/tiny median time under 1.5 for both faces; the console page under 100 KB.

    python bench/approvals.py [--approvals 50] [--repetitions 40] [--workers 2]
"""
from __future__ import annotations

import hashlib
import argparse
import json
import re
from contextlib import ExitStack

import requests

from common import (EXAMPLES, DemoBusiness, bearer, bench_hub, console_login, expect, finish,
                    interleaved, ratio, target)

CSV_CHARS = 1_000_000  # the ERP document's maxLength of `csv`; the snapshot stays under 1 MiB
HTML_MAX = 100 * 1024


def config(business_url: str) -> dict:
    return {
        "tool_providers": [{"name": "demo-erp", "base_url": business_url + "/erp",
                            "openapi": str(EXAMPLES / "erp.openapi.json"), "secret_env": "DEMO_ERP_SECRET",
                            # the benchmark measures approvals, not the provider's rate gate
                            "rate_limit_per_min": 0}],
        "routes": [{"route_key": "desk", "name": "Operations desk", "enabled": True,
                    "audience": {"enabled": False},
                    "target_config": {"system_prompt": "You help the operations desk."},
                    "agent_client": {"enabled": True},
                    "tools": {"sources": [{"provider": "demo-erp", "allow": ["*"]}],
                              "agent_direct": {"enabled": True, "write_tools": ["order_import"]}}}],
        "client_apps": [{"app_id": "ops-app", "name": "Operations", "allowed_routes": ["desk"],
                         "enabled": True}],
    }


def order_file(chars: int, seed: int) -> str:
    """CSV lines (customer_id,sku,quantity,unit_price,currency) up to `chars` characters."""
    lines, size, i = [], 0, 0
    while True:
        line = f"C-{100000 + (seed * 7 + i) % 900000},ABC-{1000 + i % 9000},{1 + i % 40},{(i % 500) + 0.99:.2f},EUR"
        if size + len(line) + 1 > chars:
            break
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def fill_queue(hub_url: str, session: dict, count: int, chars: int) -> int:
    """`count` pending approvals through the agent API; returns the snapshot size of the last."""
    http = requests.Session()
    http.headers.update(bearer(session["access_token"]))
    revision = expect(http.get(hub_url + "/agent-api/v1/tools", params={"route": "desk"},
                               timeout=30)).json()["capability_revision"]
    snapshot_bytes = 0
    for i in range(count):
        csv = order_file(chars, i) if chars > 100 else "C-100234,ABC-1001,2,19.99,EUR\n"
        arguments = {"file_name": f"orders-{i}.csv", "csv": csv}
        invocation_id = hashlib.sha256(f"import-{i}".encode()).hexdigest()  # 64 lowercase hex, as the API wants
        envelope = {"invocation_id": invocation_id, "route": "desk", "capability_revision": revision,
                    "tool": "order_import", "arguments": arguments}
        out = expect(http.post(hub_url + "/agent-api/v1/tool-invocations", timeout=120,
                               data=json.dumps(envelope).encode("utf-8"),
                               headers={"Content-Type": "application/json"})).json()
        if out["status"] != "awaiting_approval" or out["approval"]["state"] != "pending":
            raise RuntimeError(f"invocation {i} is {out['status']}, not awaiting approval")
        snapshot_bytes = len(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    return snapshot_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=50)
    parser.add_argument("--repetitions", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    business = DemoBusiness()
    cases, sizes = {}, {}
    try:
        with ExitStack() as stack:
            for size, chars in (("tiny", 0), ("huge", CSV_CHARS)):
                _db_url, operator, hub, folder = stack.enter_context(bench_hub(args.workers))
                operator.apply(config(business.url), folder)
                session = operator.session("ops-app", "desk")
                sizes[size] = fill_queue(hub.url, session, args.approvals, chars)
                token = operator.admin("approver-one", "approver")
                console = console_login(hub.url, "approver-one")
                api = requests.Session()
                api.headers.update(bearer(token))
                page = expect(console.get(hub.url + "/console/approvals/", timeout=60)).text
                listed = expect(api.get(hub.url + "/admin/api/tool-approvals", params={"status": "pending"},
                                        timeout=60)).json()["items"]
                shown = len(set(re.findall(r"/console/approvals/([0-9a-f-]{36})", page)))
                if len(listed) != args.approvals or shown != args.approvals:
                    raise RuntimeError(f"{size}: the API lists {len(listed)}, the page links {shown} "
                                       f"approvals; expected {args.approvals}")
                cases[f"console_{size}"] = (lambda c=console, u=hub.url:
                                            c.get(u + "/console/approvals/", timeout=60))
                cases[f"api_{size}"] = (lambda a=api, u=hub.url:
                                        a.get(u + "/admin/api/tool-approvals", params={"status": "pending"},
                                              timeout=60))
            results = interleaved(cases, args.repetitions)
    finally:
        business.stop()

    print(f"approvals queue, {args.approvals} pending; snapshots of {sizes['huge']} bytes (huge) "
          f"and {sizes['tiny']} bytes (tiny) (gunicorn, {args.workers} workers)")
    figures = {"approvals": args.approvals, "snapshot_bytes": sizes, "workers": args.workers,
               "repetitions": args.repetitions}
    met_all = True
    for face in ("console", "api"):
        tiny, huge = results[f"{face}_tiny"], results[f"{face}_huge"]
        for size, c in (("tiny", tiny), ("huge", huge)):
            print(f"  {face:7} {size}: median {c['median_ms']} ms, p95 {c['p95_ms']} ms, {c['bytes']} bytes")
        r = ratio(huge["median_ms"], tiny["median_ms"])
        met_all &= r < 1.5
        print(f"  {face:7} huge/tiny time ratio {r} ({target('< 1.5', r < 1.5)}), "
              f"bytes ratio {ratio(huge['bytes'], tiny['bytes'])}")
        figures[face] = {"tiny": tiny, "huge": huge, "time_ratio": r,
                         "bytes_ratio": ratio(huge["bytes"], tiny["bytes"])}
    html_ok = results["console_huge"]["bytes"] < HTML_MAX
    met_all &= html_ok
    print(f"  console page with huge snapshots: {results['console_huge']['bytes']} bytes "
          f"({target('HTML < 100 KB', html_ok)})")
    figures["target_met"] = met_all
    finish("approvals", figures)


if __name__ == "__main__":
    main()
