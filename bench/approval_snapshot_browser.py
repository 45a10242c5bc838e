"""The approval page's snapshot viewer measured in a real browser: Debian's Chromium, driven by
Playwright, on the demo hub (`bailing-admin demo`: its order import holds a ~900 KiB CSV), started
and stopped as bench/console_browser.py does it, whose helpers this reuses.

Measured, several repetitions each in a fresh context (median and max): the time from the end of
the snapshot's response to the first table rows in view, and the longest animation frame (Long
Animation Frames API) while the page loads, while the snapshot is shown, while its table scrolls,
while it is searched and stepped through, and when the exact text is shown.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from console_browser import (CHROMIUM, CHROMIUM_ARGS, NOT_AVAILABLE, Console, collect, demo_arguments, demo_hub,
                             discover, frames, spread, table, verdict, wait_seen)

TARGETS = {"rows_visible_ms": 500, "frame_ms": 200}
FIRST_ROW = ".snap-grid tbody tr[aria-rowindex]"
SNAPSHOT = "/snapshot.json?view=1"
PHASES = ("load", "show", "scroll", "search", "raw")


def snapshot_entry(figures: dict) -> dict | None:
    """The Resource Timing entry of the viewer's one fetch of the snapshot."""
    found = [r for r in figures["resources"] if SNAPSHOT in r["name"]]
    return found[0] if found else None


def scroll_table(page, steps: int) -> None:
    """The table scrolled down a screen at a time, a frame drawn after each step, then to its end."""
    scroller = page.locator(".snap-grid-scroll").first
    for _ in range(steps):
        scroller.evaluate("box => new Promise(done => { box.scrollTop += box.clientHeight; "
                          "requestAnimationFrame(() => requestAnimationFrame(done)); })")
    scroller.evaluate("box => new Promise(done => { box.scrollTop = box.scrollHeight; "
                      "requestAnimationFrame(() => requestAnimationFrame(done)); })")


def search_table(page, queries: list[str], steps: int) -> dict:
    """Each query typed into the table's search box, then Next `steps` times; the status shown."""
    box = page.locator(".snap-table-tools input[type=search]").first
    hits = page.locator(".snap-hits").first
    shown = {}
    for query in queries:
        box.fill(query)
        box.press("Enter")  # searches at once (no wait for the typing pause)
        for _ in range(steps):
            box.press("Enter")
        # Until the search has gone through every row (no "+" on its counts any more).
        page.wait_for_function("el => /^\\d/.test(el.textContent) && !el.textContent.includes('+')",
                               arg=hits.element_handle())
        shown[query] = hits.text_content()
    return shown


def sample(console: Console, url: str, args) -> dict:
    """One cold visit: load, show, scroll, search, raw text; the figures of each phase."""
    out: dict = {"frames": {}}
    with console.page("demo-approver", ("first_row",)) as page:
        page.goto(url, wait_until="load")
        loaded = collect(page)
        out["frames"]["load"] = frames(loaded["bench"])

        # As a reader who has come down to the snapshot: its heading at the top of the window.
        page.locator("#snapshot-title").evaluate("title => title.scrollIntoView({block: 'start'})")
        start = page.evaluate("performance.now()")
        page.get_by_role("button", name="Show the snapshot").click()
        if not wait_seen(page, "first_row_visible", 30000):
            out["error"] = "no table row came into view"
            return out
        shown = collect(page)
        out["frames"]["show"] = frames(shown["bench"], since=start)
        entry = snapshot_entry(shown)
        visible = shown["bench"]["seen"]["first_row_visible"]
        out["rows_visible_ms"] = visible - entry["end"] if entry else None
        out["click_to_rows_ms"] = visible - start
        out["response_ms"] = entry and entry["end"] - entry["start"]
        out["bytes"] = entry and {"encoded": entry["encoded"], "decoded": entry["decoded"]}
        out["rows_in_dom"] = page.locator(FIRST_ROW).count()

        start = shown["now"]
        scroll_table(page, args.scroll_steps)
        scrolled = collect(page)
        out["frames"]["scroll"] = frames(scrolled["bench"], since=start)
        out["rows_in_dom_after_scroll"] = page.locator(FIRST_ROW).count()

        start = scrolled["now"]
        out["search"] = search_table(page, args.query, args.search_steps)
        searched = collect(page)
        out["frames"]["search"] = frames(searched["bench"], since=start)

        start = searched["now"]
        page.get_by_role("button", name="Raw (exact bytes)").click()
        page.wait_for_selector("pre[data-snapshot]")
        raw = collect(page)
        out["frames"]["raw"] = frames(raw["bench"], since=start)
        out["fetches"] = len([r for r in raw["resources"] if SNAPSHOT in r["name"]])
    return out


def report(samples: list[dict]) -> tuple[str, dict]:
    ok = [s for s in samples if "error" not in s]
    summary: dict = {}
    rows = []
    timings = (("rows_visible_ms", "response end -> first table rows visible", TARGETS["rows_visible_ms"]),
               ("click_to_rows_ms", "click -> first table rows visible", None),
               ("response_ms", "  the snapshot's response (request start -> end)", None))
    for key, label, limit in timings:
        figure = summary[key] = spread([s.get(key) for s in ok])
        rows.append((label, figure["median"], figure["max"], figure["n"], f"< {limit}" if limit else "",
                     verdict(figure["median"], limit) if limit else ""))
    frame_rows = []
    for phase in PHASES:
        runs = [s["frames"][phase] for s in ok if phase in s["frames"]]
        if not runs or runs[0].get("api") == NOT_AVAILABLE:
            frame_rows.append((phase, NOT_AVAILABLE, 0, None, None, None, NOT_AVAILABLE))
            continue
        longest = spread([r["max_duration_ms"] for r in runs])
        blocking = spread([r.get("max_blocking_ms") for r in runs])
        worst = (max(runs, key=lambda r: r["max_duration_ms"]).get("longest") or {})
        summary[f"frames:{phase}"] = {"api": runs[0]["api"], "longest_median_ms": longest["median"],
                                      "longest_max_ms": longest["max"], "blocking_max_ms": blocking["max"],
                                      "worst": worst}
        where = f"{worst['script_ms']} / {worst['before_layout_ms']} / {worst['style_layout_ms']}" if worst else ""
        frame_rows.append((phase, runs[0]["api"], longest["n"], longest["median"], longest["max"], where,
                           verdict(longest["max"], TARGETS["frame_ms"])))
    first = ok[0] if ok else {}
    summary["rows_in_dom_max"] = max((max(s["rows_in_dom"], s["rows_in_dom_after_scroll"]) for s in ok), default=None)
    summary["fetches_per_page_max"] = max((s["fetches"] for s in ok), default=None)
    summary["bytes"] = first.get("bytes")
    summary["search"] = first.get("search")
    summary["errors"] = [s["error"] for s in samples if "error" in s]
    text = "\n\n".join([
        table(("timing (ms)", "median", "max", "n", "target", "median vs target"), rows),
        table(("long animation frames", "api", "n", "longest median ms", "longest max ms",
               "worst: script / callbacks / style+layout ms", f"max < {TARGETS['frame_ms']}"), frame_rows),
        (f"snapshot bytes: {summary['bytes']}; table rows in the DOM at most {summary['rows_in_dom_max']}; "
         f"fetches per page at most {summary['fetches_per_page_max']}; search: {summary['search']}")])
    return text, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=5, help="cold visits measured (default 5)")
    parser.add_argument("--scroll-steps", type=int, default=20, help="screens scrolled in the table (default 20)")
    parser.add_argument("--query", action="append", default=None,
                        help="searched in the table (repeatable; default: a note of every fifth row, a word in all)")
    parser.add_argument("--search-steps", type=int, default=3, help="Next pressed after each search (default 3)")
    demo_arguments(parser)
    args = parser.parse_args()
    args.query = args.query or ["配送は金曜日まで", "EUR"]
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium (a downloaded browser is never used)")
    started = time.monotonic()
    with demo_hub(args.data_dir, args.demo_timeout) as demo, sync_playwright() as p:
        print(f"demo ready at {demo['url']} after {time.monotonic() - started:.0f} s", flush=True)
        ids = discover(demo["url"], demo["admin_token"])
        url = f"{demo['url']}/console/approvals/{ids['approval']}"
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            console = Console(browser, demo["url"], ids["last_sequence"])
            console.selectors["first_row"] = FIRST_ROW
            console.sign_in("demo-approver", demo["passwords"]["approver"])
            version = browser.version
            samples = [sample(console, url, args) for _ in range(args.repetitions)]
        finally:
            browser.close()
    text, summary = report(samples)
    document = {"benchmark": "approval_snapshot_browser", "chromium": version, "repetitions": args.repetitions,
                "approval_bytes": ids["approval_bytes"], "seconds": round(time.monotonic() - started),
                "summary": summary, "raw": samples}
    print(f"approval {ids['approval']}: snapshot of {ids['approval_bytes']:,} bytes")
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2))
    print(json.dumps({k: v for k, v in document.items() if k != "raw"}))


if __name__ == "__main__":
    main()
