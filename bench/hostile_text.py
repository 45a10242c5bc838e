"""Console pages of hostile text: bytes, server time and Chromium load time.

Archives filled through the agent API, each of 40 messages of 64,000 characters (20 turns):
`nel_runs` all U+0085 NEXT LINE (one marker each), `alternating` "a" and U+0085 by turns (a
marker per character: the page stops at its byte budget), `bracket_bombs` 64,000 "[" (Markdown
that parses slowly: shown plain) and `heavy_markdown` 16,000 "*a*" emphasis spans (Markdown at
the per-message limit: the page renders its share). For each: the transcript page in the plain
and the Markdown view through the console (signed in through the login form), the search inside
the transcript and the content search across archives for a word in every message, then each
transcript page loaded in Chromium (navigation timing: response end, DOMContentLoaded and load,
from the navigation's start).

Targets: every page under 2 MB; the nel_runs page, plain and Markdown, under 1 s on the server
and in Chromium.

    python bench/hostile_text.py [--repetitions 10] [--workers 2]
"""
from __future__ import annotations

import argparse

import requests
from common import (EXAMPLES, PASSWORD, bearer, bench_hub, console_login, create_archive, expect, finish,
                    interleaved, target)
from console_browser import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from playwright.sync_api import sync_playwright

from admin_app import limits

UNITS = limits.AUDIT_TEXT_MAX_UNITS
TURNS = 20
WORD = "pallet"
MESSAGES = {
    "nel_runs": "\x85" * UNITS,
    "alternating": "a\x85" * (UNITS // 2),
    "bracket_bombs": "[" * UNITS,
    "heavy_markdown": ("*a* " * (limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE // 4))[:UNITS],
}
TWO_MB = 2 * limits.MIB
TIMING = """() => { const n = performance.getEntriesByType('navigation')[0];
  return {response_end_ms: n.responseEnd, dom_content_loaded_ms: n.domContentLoadedEventEnd,
          load_ms: n.loadEventEnd, transfer_bytes: n.transferSize}; }"""


def fill(url: str, session: dict, content: str) -> str:
    """An archive of TURNS turns, both messages `content` (the word prepended, for the searches)."""
    archive = create_archive(url, session, "customers")
    message = (WORD + content)[:UNITS]
    with requests.Session() as http:
        for n in range(TURNS):
            first, turn = 4 * n + 1, f"turn-{n + 1}"
            events = [{"kind": "turn_start"}, {"kind": "user_message", "content": message},
                      {"kind": "assistant_message", "content": message}, {"kind": "turn_end", "status": "completed"}]
            for offset, event in enumerate(events):
                event.update(event_id=f"{turn}-{offset}", sequence=first + offset, client_turn_id=turn)
            expect(http.post(f"{url}/agent-api/v1/conversation-audits/{archive}/events", json={"events": events},
                             headers=bearer(session["access_token"]), timeout=60))
    return archive


def in_chromium(url: str, pages: dict[str, str], repetitions: int) -> dict[str, dict]:
    """Median navigation timings of each page, a fresh signed-in context per load (cold cache)."""
    figures: dict[str, dict] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.goto(f"{url}/console/login")
        page.fill("input[name=username]", "auditor-one")
        page.fill("input[name=password]", PASSWORD)
        with page.expect_navigation():
            page.click("button[type=submit]")
        state = context.storage_state()
        context.close()
        for name, path in pages.items():
            runs = []
            for _ in range(repetitions):
                context = browser.new_context(viewport=VIEWPORT, storage_state=state)
                page = context.new_page()
                page.goto(url + path, wait_until="load", timeout=120_000)
                runs.append(page.evaluate(TIMING))
                context.close()
            figures[name] = {key: round(sorted(r[key] for r in runs)[len(runs) // 2], 1) for key in runs[0]}
        browser.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with bench_hub(args.workers) as (_db_url, operator, hub, _folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        operator.admin("auditor-one", "auditor")
        archives = {name: fill(hub.url, session, content) for name, content in MESSAGES.items()}
        console = console_login(hub.url, "auditor-one")
        paths = {}
        for name, archive in archives.items():
            paths[f"{name}/plain"] = f"/console/conversations/{archive}"
            paths[f"{name}/markdown"] = f"/console/conversations/{archive}?view=markdown"
            paths[f"{name}/search_inside"] = f"/console/conversations/{archive}/search?q={WORD}"
        paths["all/content_search"] = f"/console/conversations/?q={WORD}"

        def get(path: str):
            return lambda: console.get(hub.url + path, timeout=120)

        server = interleaved({name: get(path) for name, path in paths.items()}, args.repetitions)
        browser = in_chromium(hub.url, {name: path for name, path in paths.items()
                                        if name.endswith(("/plain", "/markdown"))}, args.repetitions)

    print(f"console pages of hostile text: {TURNS * 2} messages of {UNITS:,} characters an archive "
          f"(gunicorn, {args.workers} workers)")
    print(f"  {'page':30} {'bytes':>10} {'server median':>14} {'p95':>9} {'Chromium DCL':>13} {'load':>9}")
    for name, figures in server.items():
        seen = browser.get(name, {})
        print(f"  {name:30} {figures['bytes']:>10,} {figures['median_ms']:>11.1f} ms {figures['p95_ms']:>6.1f} ms"
              + (f" {seen['dom_content_loaded_ms']:>10.1f} ms {seen['load_ms']:>6.1f} ms" if seen else ""))
    small = all(f["bytes"] < TWO_MB for f in server.values())
    fast = all(server[n]["median_ms"] < 1000 and browser[n]["load_ms"] < 1000
               for n in ("nel_runs/plain", "nel_runs/markdown"))
    print(f"  {target('every page < 2 MB', small)}; {target('nel_runs < 1 s on the server and in Chromium', fast)}")
    finish("hostile_text", {"repetitions": args.repetitions, "workers": args.workers, "server": server,
                            "chromium": browser, "target_met": small and fast})


if __name__ == "__main__":
    main()
