"""Transcript pages at the start and at the end of a 20,000-event archive.

Pages of 200 events after sequence 0 and after sequence 19,800, read through the admin API
(GET /admin/api/conversation-audits/{id}?after_sequence=&limit=200 with a personal admin token)
and through the console's htmx transcript fragment (GET /console/conversations/{id}/events?after=,
signed in through the login form). The archive is filled through the agent API.

Target: deep/shallow median ratio under 1.2 for each face.

    python bench/transcript.py [--repetitions 200] [--workers 2]
"""
from __future__ import annotations

import argparse
import re

import requests

from common import (EXAMPLES, append_batches, bearer, bench_hub, console_login, create_archive,
                    finish, interleaved, ratio, target)

from admin_app import limits

TOTAL = limits.AUDIT_ARCHIVE_MAX_EVENTS
PAGE = limits.AUDIT_EVENTS_LIMIT[2]
DEEP = TOTAL - PAGE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with bench_hub(args.workers) as (_db_url, operator, hub, _folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        archive = create_archive(hub.url, session, "customers")
        append_batches(hub.url, session["access_token"], archive, TOTAL)
        token = operator.admin("auditor-one", "auditor")
        console = console_login(hub.url, "auditor-one")
        api = requests.Session()
        api.headers.update(bearer(token))

        def api_page(after: int):
            return lambda: api.get(f"{hub.url}/admin/api/conversation-audits/{archive}",
                                   params={"after_sequence": after, "limit": PAGE}, timeout=30)

        def fragment(after: int):
            return lambda: console.get(f"{hub.url}/console/conversations/{archive}/events",
                                       params={"after": after}, headers={"HX-Request": "true"}, timeout=30)

        # Check the pages hold what they should before timing them.
        for after in (0, DEEP):
            page = api_page(after)().json()
            sequences = [e["sequence"] for e in page["events"]]
            if sequences != list(range(after + 1, after + PAGE + 1)):
                raise RuntimeError(f"admin API page after {after} holds {sequences[:3]}..{sequences[-3:]}")
            html = fragment(after)().text
            shown = [int(n) for n in re.findall(r'id="seq-(\d+)"', html)]
            if shown != list(range(after + 1, after + PAGE + 1)):
                raise RuntimeError(f"console fragment after {after} does not show its events")

        cases = {}
        for face, make in (("admin_api", api_page), ("console_fragment", fragment)):
            cases[face] = interleaved({"shallow": make(0), "deep": make(DEEP)}, args.repetitions)

    figures = {"events": TOTAL, "page": PAGE, "repetitions": args.repetitions, "workers": args.workers}
    print(f"transcript pages of {PAGE} events, archive of {TOTAL} (gunicorn, {args.workers} workers)")
    met_all = True
    for face, case in cases.items():
        r = ratio(case["deep"]["median_ms"], case["shallow"]["median_ms"])
        met_all &= r < 1.2
        for depth in ("shallow", "deep"):
            c = case[depth]
            print(f"  {face:17} {depth:7} (after {0 if depth == 'shallow' else DEEP:>5}): median "
                  f"{c['median_ms']} ms, p95 {c['p95_ms']} ms, {c['bytes']} bytes")
        print(f"  {face:17} deep/shallow median ratio {r}  ({target('ratio < 1.2', r < 1.2)})")
        figures[face] = {**case, "deep_over_shallow": r}
    figures["target_met"] = met_all
    finish("transcript", figures)


if __name__ == "__main__":
    main()
