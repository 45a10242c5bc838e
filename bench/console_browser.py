"""The console measured in a real browser: Debian's Chromium, driven by Playwright, against the
demo hub (`bailing-admin demo`, started here on free ports with a scratch data folder and its own
embedded PostgreSQL, stopped at the end whatever happens).

Measured, several repetitions each (median and max): the first paint of the 20,000-event
`long-shift` transcript, the jump to its last event, the search inside it, a content search across
all archives, the bytes on the wire of every console page, and the long animation frames of each.
A feature the console does not serve yet is reported as "not available" rather than failing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

CHROMIUM = "/usr/bin/chromium"
# As tests/browser.py launches it (not imported: that module needs pytest and the test helpers).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}
LONG_ARCHIVE = "long-shift"
TARGETS = {"jump_to_end_ms": 500, "transcript_search_server_ms": 200, "content_search_server_ms": 300,
           "transcript_compression_ratio": 4, "frame_ms": 200}
NOT_AVAILABLE = "not available"
# The searches measured, each with its target: the transcript's search as a page of its own and
# through the page's search box (htmx), and the content search across every archive.
SEARCHES = {"transcript_search": "transcript_search_server_ms", "transcript_search_box": "transcript_search_server_ms",
            "content_search": "content_search_server_ms"}

# Installed before every document: observers of long animation frames (the longtask, layout-shift
# and event-timing entries too, as a labelled fallback where that API is missing), and a per-frame
# check of when the first event, the last event or the first search hit is in the DOM and then in
# the viewport (milliseconds since this document's navigation started).
INIT_SCRIPT = """(() => {
  const bench = window.__bench = {loaf: [], longtask: [], shifts: [], events: [], seen: {}};
  const types = (window.PerformanceObserver && PerformanceObserver.supportedEntryTypes) || [];
  bench.supported = Array.from(types);
  function watch(type, sink, pick, extra) {
    if (!types.includes(type)) return;
    new PerformanceObserver(list => { for (const e of list.getEntries()) sink.push(pick(e)); })
      .observe(Object.assign({type: type, buffered: true}, extra || {}));
  }
  watch('long-animation-frame', bench.loaf, e => ({start: e.startTime, duration: e.duration,
    blocking: e.blockingDuration, render: e.renderStart, layout: e.styleAndLayoutStart,
    scripts: e.scripts.map(s => ({invoker: s.invoker, source: s.sourceURL, duration: s.duration}))}));
  watch('longtask', bench.longtask, e => ({start: e.startTime, duration: e.duration}));
  watch('layout-shift', bench.shifts, e => ({start: e.startTime, value: e.value}));
  watch('event', bench.events, e => ({start: e.startTime, name: e.name, duration: e.duration}),
        {durationThreshold: 16});
  const selectors = __SELECTORS__;
  // Once per frame, only a querySelector (no layout forced); the time an element is in view
  // comes from an IntersectionObserver (entry.time: when the rendering step computed it).
  function poll() {
    let pending = false;
    for (const [name, selector] of Object.entries(selectors)) {
      if (bench.seen[name + '_dom'] !== undefined) continue;
      pending = true;
      const el = document.querySelector(selector);
      if (!el) continue;
      bench.seen[name + '_dom'] = performance.now();
      new IntersectionObserver((entries, observer) => {
        for (const entry of entries) {
          if (entry.isIntersecting && bench.seen[name + '_visible'] === undefined) {
            bench.seen[name + '_visible'] = entry.time;
            observer.disconnect();
          }
        }
      }).observe(el);
    }
    if (pending && performance.now() < 60000) requestAnimationFrame(poll);
  }
  if (Object.keys(selectors).length) requestAnimationFrame(poll);
})();"""

# What a page tells about itself: its navigation and resource timings, paints and the observers'.
COLLECT = """() => {
  const timing = e => ({name: e.name, type: e.initiatorType, start: e.startTime, request: e.requestStart,
    response: e.responseStart, end: e.responseEnd, transfer: e.transferSize, encoded: e.encodedBodySize,
    decoded: e.decodedBodySize, status: e.responseStatus,
    server: (e.serverTiming || []).map(s => ({name: s.name, duration: s.duration}))});
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = {};
  for (const p of performance.getEntriesByType('paint')) paint[p.name] = p.startTime;
  return {url: location.href, nav: nav ? Object.assign(timing(nav), {dcl: nav.domContentLoadedEventEnd,
          load: nav.loadEventEnd}) : null, paint: paint,
          resources: performance.getEntriesByType('resource').map(timing),
          bench: window.__bench || null, now: performance.now(),
          events: document.querySelectorAll('.event').length,
          hits: document.querySelectorAll('[data-hit]').length};
}"""


# ---------------------------------------------------------------- pure helpers (figures)

def spread(values: list[float]) -> dict:
    """Median and max of the samples that exist (None where a sample could not be taken)."""
    taken = [v for v in values if v is not None]
    if not taken:
        return {"median": None, "max": None, "n": 0}
    return {"median": round(statistics.median(taken), 1), "max": round(max(taken), 1), "n": len(taken)}


def server_time(entry: dict | None) -> tuple[float | None, str]:
    """The server's time for one response: its Server-Timing header when it sends one (the entry
    named total/app, else the longest), else responseStart - requestStart (loopback, so nearly all
    of it is the server)."""
    if not entry:
        return None, NOT_AVAILABLE
    metrics = [m for m in entry.get("server") or [] if m.get("duration")]
    if metrics:
        named = [m for m in metrics if m["name"] in ("total", "app")]
        chosen = named[0] if named else max(metrics, key=lambda m: m["duration"])
        return chosen["duration"], f"Server-Timing {chosen['name']}"
    if entry.get("response") and entry.get("request"):
        return entry["response"] - entry["request"], "responseStart - requestStart"
    return None, NOT_AVAILABLE


def wire(entries: list[dict]) -> dict:
    """Bytes of these responses: on the wire (headers included), body as sent, body decoded."""
    transfer = sum(e.get("transfer") or 0 for e in entries)
    encoded = sum(e.get("encoded") or 0 for e in entries)
    decoded = sum(e.get("decoded") or 0 for e in entries)
    return {"responses": len(entries), "transfer_bytes": transfer, "encoded_bytes": encoded,
            "decoded_bytes": decoded, "ratio": round(decoded / encoded, 2) if encoded else None}


def frames(bench: dict | None, since: float = 0.0) -> dict:
    """The longest animation frames after `since` (ms on the page's clock): the Long Animation
    Frames API where Chromium has it, else the longest task, labelled as such."""
    if not bench:
        return {"api": NOT_AVAILABLE}
    if "long-animation-frame" in bench.get("supported", []):
        loaf = [f for f in bench["loaf"] if f["start"] >= since]
        longest = max(loaf, key=lambda f: f["duration"], default=None)
        return {"api": "long-animation-frame", "count": len(loaf),
                "max_duration_ms": round(longest["duration"], 1) if longest else 0,
                "max_blocking_ms": round(max((f["blocking"] for f in loaf), default=0), 1),
                "longest": longest and anatomy(longest)}
    tasks = [t for t in bench.get("longtask", []) if t["start"] >= since]
    return {"api": "longtask (fallback: misses layout and rendering)", "count": len(tasks),
            "max_duration_ms": round(max((t["duration"] for t in tasks), default=0), 1),
            "layout_shift": round(sum(s["value"] for s in bench.get("shifts", []) if s["start"] >= since), 4),
            "max_event_ms": round(max((e["duration"] for e in bench.get("events", []) if e["start"] >= since),
                                      default=0), 1)}


def anatomy(frame: dict) -> dict:
    """Where one long animation frame went: its scripts, the rendering steps before style and
    layout (animation-frame and observer callbacks), and style and layout to its end; and the
    script that took longest. A frame without scripts is rendering, or a starved CPU."""
    scripts = frame.get("scripts") or []
    end = frame["start"] + frame["duration"]
    render, layout = frame.get("render") or end, frame.get("layout") or end
    top = max(scripts, key=lambda s: s["duration"], default=None)
    return {"script_ms": round(sum(s["duration"] for s in scripts), 1),
            "before_layout_ms": round(layout - render, 1), "style_layout_ms": round(end - layout, 1),
            "top_script": top and _script_name(top)}


def _script_name(script: dict) -> str:
    """How a frame's script is named: what invoked it and from which file (the console has no
    inline script under its CSP, so one without a file is the bench's own)."""
    invoker, source = (script["invoker"] or "").rsplit("/", 1)[-1], (script["source"] or "").rsplit("/", 1)[-1]
    if not source:
        return f"{invoker} (the bench)"
    return source if invoker == source else f"{invoker} ({source})"


def verdict(value: float | None, limit: float, higher_is_better: bool = False) -> str:
    if value is None:
        return NOT_AVAILABLE
    return "MET" if (value >= limit if higher_is_better else value < limit) else "NOT MET"


def table(head: tuple, rows: list[tuple]) -> str:
    """Rows under their heading as aligned text ("-" where a figure is missing)."""
    cells = [head] + [tuple("-" if c is None else str(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


# ---------------------------------------------------------------- the demo hub

@contextmanager
def demo_hub(data_dir: Path | None, timeout: float) -> Iterator[dict]:
    """`bailing-admin demo` on free ports with its own embedded PostgreSQL (BAILING_DATABASE_URL
    is ignored: the demo must never seed a shared database); yields its URL, passwords and admin
    token. Stopped (hub, business system, database) and its scratch folder removed at the end."""
    scratch = None if data_dir else Path(tempfile.mkdtemp(prefix="bailing-browser-bench-"))
    folder = data_dir or scratch / "data"  # type: ignore[operator]
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "BAILING_DATABASE_URL"}
    env["BAILING_DATA_DIR"] = str(folder)
    command = shutil.which("bailing-admin") or str(Path(sys.executable).parent / "bailing-admin")
    out, err = folder / "bench-demo.out", folder / "bench-demo.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        # Ctrl+C restored for the child: a shell without job control may hand it down ignored.
        process = subprocess.Popen([command, "demo", "--port", "0", "--business-port", "0"], env=env,
                                   stdout=stdout, stderr=stderr, start_new_session=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        url = _wait_for_demo(process, out, err, timeout)
        state = json.loads((folder / "demo-state.json").read_text())
        yield {"url": url, "passwords": state["passwords"], "admin_token": state["admin_token"]}
    finally:
        _stop(process)
        subprocess.run([command, "db", "stop"], env=env, capture_output=True, timeout=120, check=False)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _wait_for_demo(process: subprocess.Popen, out: Path, err: Path, timeout: float) -> str:
    """The hub's URL, once the demo prints its guide (seeding done). /health/ready is not used: it
    stays 503 while the checkout holds migrations newer than the ones the demo applied."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"The hub is running: (http://\S+)/console/", out.read_text())
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"bailing-admin demo exited ({process.returncode}): {err.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"bailing-admin demo not ready after {timeout:.0f} s: {err.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    """Ctrl+C to the demo's process group (it stops its servers), then SIGTERM and SIGKILL if it
    lingers."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def discover(url: str, token: str) -> dict:
    """IDs of what the pages show, through the admin API: the long archive, a run, the big
    approval."""
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    archives = http.get(f"{url}/admin/api/conversation-audits", timeout=30).json()["items"]
    long = next(a for a in archives if a["client_conversation_id"] == LONG_ARCHIVE)
    run_id = None
    for archive in archives:
        detail = http.get(f"{url}/admin/api/conversation-audits/{archive['conversation_id']}", timeout=30).json()
        links = [e["run_id"] for e in detail.get("events", []) if e.get("kind") == "run_link"]
        if links:
            run_id = links[-1]  # the last turn's run: the one with the unknown outcome
            break
    approvals = http.get(f"{url}/admin/api/tool-approvals", timeout=30).json()["items"]
    big = max(approvals, key=lambda a: a.get("snapshot_bytes") or 0) if approvals else None
    return {"archive": long["conversation_id"], "last_sequence": long["last_sequence"], "run": run_id,
            "approval": big and big["id"], "approval_bytes": big and big["snapshot_bytes"]}


# ---------------------------------------------------------------- the browser

class Console:
    """Signed-in browser contexts (a fresh one per call: a cold cache) with the observers."""

    def __init__(self, browser, url: str, last_sequence: int):
        self.browser, self.url = browser, url
        self.selectors = {"first_event": ".event", "last_event": f"#seq-{last_sequence}", "first_hit": "[data-hit]"}
        self.states: dict[str, dict] = {}

    def sign_in(self, username: str, password: str) -> None:
        context = self.browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.goto(f"{self.url}/console/login")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        with page.expect_navigation():
            page.click("button[type=submit]")
        if "/console/login" in page.url:
            raise RuntimeError(f"signing in as {username} failed")
        self.states[username] = context.storage_state()
        context.close()

    @contextmanager
    def page(self, username: str, watch: tuple[str, ...] = ()) -> Iterator:
        """A page whose documents check, each frame, when the `watch`ed elements show up (none:
        no per-frame check at all, so that it adds nothing to the frames measured)."""
        context = self.browser.new_context(viewport=VIEWPORT, storage_state=self.states[username])
        context.add_init_script(INIT_SCRIPT.replace("__SELECTORS__", json.dumps(
            {name: self.selectors[name] for name in watch})))
        try:
            yield context.new_page()
        finally:
            context.close()


def collect(page, settle_ms: int = 300) -> dict:
    """The page's figures, once two more frames have been drawn (so rendering that was pending is
    done) and after a short wait, so the observers have had their entries."""
    page.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.wait_for_timeout(settle_ms)
    return page.evaluate(COLLECT)


def wait_seen(page, name: str, timeout_ms: int = 30000) -> bool:
    # Predicates are functions: a string predicate is eval'd in the page, which the console's CSP
    # (rightly) refuses.
    try:
        page.wait_for_function("name => window.__bench && window.__bench.seen[name] !== undefined",
                               arg=name, timeout=timeout_ms)
        return True
    except PlaywrightTimeout:  # the element never showed: reported as missing
        return False


def fragments(figures: dict, since: float) -> list[dict]:
    return [r for r in figures["resources"] if r["type"] in ("xmlhttprequest", "fetch") and r["start"] >= since]


def scroll(page, pages: int, up: bool = False) -> int:
    """Scroll to the bottom (or top) `pages` times, each time waiting for htmx to add events;
    returns how many pages came."""
    loaded = 0
    for _ in range(pages):
        before = page.evaluate("document.querySelectorAll('.event').length")
        page.evaluate("window.scrollTo(0, 0)" if up else "window.scrollTo(0, document.body.scrollHeight)")
        try:
            page.wait_for_function("n => document.querySelectorAll('.event').length > n", arg=before,
                                   timeout=15000)
        except PlaywrightTimeout:  # nothing more loads that way
            break
        loaded += 1
    return loaded


def jump_to_end(page, console: Console, ids: dict) -> str:
    """Follow the "Jump to end" link when the page has one, else navigate to ?at=<last>."""
    link = page.get_by_role("link", name=re.compile("jump to end", re.I))
    with page.expect_navigation():
        if link.count():
            link.first.click()
            method = "Jump to end link"
        else:
            target = f"{transcript_url(console, ids)}?at={ids['last_sequence']}"
            page.evaluate("url => { location.href = url; }", target)
            method = f"?at={ids['last_sequence']} (no Jump to end link)"
    return method


def transcript_url(console: Console, ids: dict) -> str:
    return f"{console.url}/console/conversations/{ids['archive']}"


def reading(console: Console, ids: dict, repetitions: int, scroll_pages: int) -> dict:
    """Measures 1, 2 and 6 on the transcript: cold first paint, scrolling down N pages, the jump to
    the end, then scrolling up from there (a fresh context each repetition)."""
    samples: dict[str, list] = {k: [] for k in (
        "server_ms", "fcp_ms", "first_event_visible_ms", "dcl_ms", "scroll_pages",
        "jump_server_ms", "jump_ms", "jump_dom_ms", "jump_wall_ms", "scroll_up_pages")}
    loaf: dict[str, list] = {"transcript load": [], "transcript scroll": [], "after jump": [],
                             "scroll up after jump": []}
    extra: dict = {}
    for _ in range(repetitions):
        with console.page("demo-auditor", ("first_event", "last_event")) as page:
            page.goto(transcript_url(console, ids), wait_until="load")
            wait_seen(page, "first_event_visible")
            first = collect(page)
            samples["server_ms"].append(server_time(first["nav"])[0])
            samples["fcp_ms"].append(first["paint"].get("first-contentful-paint"))
            samples["first_event_visible_ms"].append(first["bench"]["seen"].get("first_event_visible"))
            samples["dcl_ms"].append(first["nav"]["dcl"])
            loaf["transcript load"].append(frames(first["bench"]))
            start = first["now"]
            samples["scroll_pages"].append(scroll(page, scroll_pages))
            scrolled = collect(page)
            loaf["transcript scroll"].append(frames(scrolled["bench"], since=start))
            extra["scrolled"] = wire(fragments(scrolled, start))

            started = time.perf_counter()
            extra["jump_method"] = jump_to_end(page, console, ids)
            found = wait_seen(page, "last_event_visible", 15000)
            wall = (time.perf_counter() - started) * 1000
            jumped = collect(page)
            seen = jumped["bench"]["seen"]
            samples["jump_server_ms"].append(server_time(jumped["nav"])[0])
            samples["jump_ms"].append(seen.get("last_event_visible") if found else None)
            samples["jump_dom_ms"].append(seen.get("last_event_dom"))
            samples["jump_wall_ms"].append(wall if found else None)
            loaf["after jump"].append(frames(jumped["bench"]))
            extra["after_jump_page"] = wire([jumped["nav"]])
            start = jumped["now"]
            samples["scroll_up_pages"].append(scroll(page, 2, up=True))
            up = collect(page)
            loaf["scroll up after jump"].append(frames(up["bench"], since=start))
    return {"samples": samples, "frames": loaf, **extra}


def visits(console: Console, user: str, url: str, repetitions: int,
           act: Callable | None = None, watch: tuple[str, ...] = ()) -> list[dict]:
    """The same page loaded `repetitions` times, each in a fresh context; `act(page)` runs after
    the load (e.g. a click) and its figures are kept too."""
    out = []
    for _ in range(repetitions):
        with console.page(user, watch) as page:
            response = page.goto(url, wait_until="load")
            figures = collect(page)
            figures["status"] = response.status if response else None
            if act and figures["status"] == 200:
                figures["action"] = act(page, figures["now"])
            out.append(figures)
    return out


def search_figures(runs: list[dict]) -> dict:
    """Server time and time to the first hit of a search page, or why they are not available."""
    status = runs[0]["status"]
    if status != 200:
        return {"available": False, "reason": f"{NOT_AVAILABLE} (HTTP {status})"}
    timed = [server_time(r["nav"]) for r in runs]
    hits = runs[0]["hits"]
    return {"available": hits > 0, "reason": None if hits else f"{NOT_AVAILABLE} (no [data-hit] element)",
            "hits_on_page": hits, "server_source": timed[0][1], "server_ms": [t for t, _ in timed],
            "first_hit_visible_ms": [r["bench"]["seen"].get("first_hit_visible") for r in runs],
            "frames": [frames(r["bench"]) for r in runs]}


def box_search(console: Console, ids: dict, q: str, repetitions: int) -> dict:
    """The transcript page's own search box (htmx): the fragment's server time, and the time from
    pressing Enter to the first hit in view."""
    server, shown, runs, hits = [], [], [], 0
    source = NOT_AVAILABLE
    for _ in range(repetitions):
        with console.page("demo-auditor", ("first_hit",)) as page:
            page.goto(transcript_url(console, ids), wait_until="load")
            box = page.locator("form[role=search] input[name=q]")
            if not box.count():
                return {"available": False, "reason": f"{NOT_AVAILABLE} (no search box on the transcript page)"}
            box.first.fill(q)
            pressed = page.evaluate("performance.now()")
            box.first.press("Enter")
            found = wait_seen(page, "first_hit_visible", 15000)
            figures = collect(page)
            answers = [r for r in fragments(figures, pressed) if "/search" in r["name"]]
            took, source = server_time(answers[0] if answers else None)
            server.append(took)
            shown.append(figures["bench"]["seen"]["first_hit_visible"] - pressed if found else None)
            runs.append(frames(figures["bench"], since=pressed))
            hits = figures["hits"]
    if not hits:
        return {"available": False, "reason": f"{NOT_AVAILABLE} (no [data-hit] element after searching)"}
    return {"available": True, "reason": None, "hits_on_page": hits, "server_source": source, "server_ms": server,
            "first_hit_visible_ms": shown, "frames": runs}


def snapshot_action(page, since: float) -> dict:
    """Show the approval's argument snapshot (a large one is fetched when asked for, as its exact
    bytes; static/snapshot.js draws it): the bytes on the wire and the frames that drew it.
    bench/approval_snapshot_browser.py measures the viewer itself in detail."""
    button = page.locator("[data-snapshot-toggle]")
    if not button.count() or not button.first.is_visible():
        return {"available": False}
    with page.expect_response(lambda r: "/snapshot" in r.url):
        button.first.click()
    with suppress(PlaywrightTimeout):  # drawn once the viewer's status is cleared; else measured as it is
        page.wait_for_selector("[data-snapshot-body][aria-busy=false] *", timeout=15000)
    after = collect(page)
    return {"available": True, "wire": wire(fragments(after, since)), "frames": frames(after["bench"], since)}


def measure(console: Console, ids: dict, args) -> dict:
    base, reps = console.url, args.repetitions
    results: dict = {"ids": ids, "reading": reading(console, ids, reps, args.scroll_pages)}
    results["transcript_search"] = {
        q: search_figures(visits(console, "demo-auditor", f"{transcript_url(console, ids)}/search?q={quote(q)}", reps,
                                 watch=("first_hit",)))
        for q in args.transcript_query}
    results["transcript_search_box"] = {q: box_search(console, ids, q, reps) for q in args.transcript_query}
    results["content_search"] = {
        q: search_figures(visits(console, "demo-auditor", f"{base}/console/conversations/?q={quote(q)}", reps,
                                 watch=("first_hit",)))
        for q in args.content_query}
    pages = {"conversations": ("demo-auditor", "/console/conversations/", None),
             "transcript (first page)": ("demo-auditor", f"/console/conversations/{ids['archive']}", None),
             "runs": ("demo-auditor", "/console/runs/", None),
             "run trace": ("demo-auditor", f"/console/runs/{ids['run']}", None),
             "approvals": ("demo-admin", "/console/approvals/", None),
             "approval + snapshot": ("demo-admin", f"/console/approvals/{ids['approval']}", snapshot_action),
             "access log": ("demo-auditor", "/console/access-log", None)}
    results["pages"] = {}
    for name, (user, path, act) in pages.items():
        runs = visits(console, user, base + path, reps, act)
        first = runs[0]
        results["pages"][name] = {
            "status": first["status"], "document": wire([first["nav"]]) if first["nav"] else None,
            "all_responses": wire(([first["nav"]] if first["nav"] else []) + first["resources"]),
            "frames": [frames(r["bench"]) for r in runs], "action": first.get("action"),
            "action_frames": [r["action"]["frames"] for r in runs if (r.get("action") or {}).get("available")]}
    return results


# ---------------------------------------------------------------- the report

def _timing(rows: list, summary: dict, key: str, label: str, values: list, limit: float | None = None,
            note: str | None = None) -> None:
    figure = summary[key] = spread(values)
    if note:
        rows.append((label, None, None, 0, f"< {limit}" if limit else "", note))
        return
    rows.append((label, figure["median"], figure["max"], figure["n"], f"< {limit}" if limit else "",
                 verdict(figure["median"], limit) if limit else ""))


def _frames_row(label: str, runs: list[dict]) -> tuple:
    if not runs or runs[0].get("api") == NOT_AVAILABLE:
        return (label, NOT_AVAILABLE, 0, None, None, None, None, None, NOT_AVAILABLE)
    longest = spread([r["max_duration_ms"] for r in runs])
    blocking = spread([r.get("max_blocking_ms") for r in runs])
    worst = max(runs, key=lambda r: r["max_duration_ms"]).get("longest") or {}
    where = f"{worst['script_ms']} / {worst['before_layout_ms']} / {worst['style_layout_ms']}" if worst else ""
    return (label, runs[0]["api"], longest["n"], longest["median"], longest["max"], blocking["max"], where,
            worst.get("top_script") or "", verdict(longest["max"], TARGETS["frame_ms"]))


def report(results: dict) -> tuple[str, dict]:
    """Three tables (timings, bytes, frames) and the summary that goes into the JSON."""
    reading, summary = results["reading"], {}
    s = reading["samples"]
    timings: list[tuple] = []
    _timing(timings, summary, "server_ms", "transcript first page: server (cold context)", s["server_ms"])
    _timing(timings, summary, "fcp_ms", "transcript first-contentful-paint", s["fcp_ms"])
    _timing(timings, summary, "first_event_visible_ms", "transcript first event visible", s["first_event_visible_ms"])
    _timing(timings, summary, "dcl_ms", "transcript DOMContentLoaded", s["dcl_ms"])
    _timing(timings, summary, "jump_to_end_ms", f"jump to end, #seq-{results['ids']['last_sequence']} visible "
            f"({reading.get('jump_method')})", s["jump_ms"], TARGETS["jump_to_end_ms"])
    _timing(timings, summary, "jump_dom_ms", "  the same, in the DOM", s["jump_dom_ms"])
    _timing(timings, summary, "jump_server_ms", "  its page: server", s["jump_server_ms"])
    _timing(timings, summary, "jump_wall_ms", "  the same, click to visible (wall clock, with Playwright)",
            s["jump_wall_ms"])
    for kind, limit_key in SEARCHES.items():
        for q, fig in results[kind].items():
            label = f"{kind.replace('_', ' ')} q={q!r}"
            if not fig["available"]:
                _timing(timings, summary, f"{kind}:{q}", f"{label}: server", [], TARGETS[limit_key], fig["reason"])
                continue
            _timing(timings, summary, f"{kind}:{q}", f"{label}: server ({fig['server_source']})", fig["server_ms"],
                    TARGETS[limit_key])
            _timing(timings, summary, f"{kind}:{q}:first_hit", f"  first hit visible ({fig['hits_on_page']} hits)",
                    fig["first_hit_visible_ms"])

    scrolled = max(s["scroll_pages"], default=0)
    wires = {"transcript (first page)": None,
             f"transcript, scrolled down (fragments; pages: {scrolled})": reading.get("scrolled"),
             "transcript after the jump to end": reading.get("after_jump_page")}
    bytes_rows: list[tuple] = []
    for name, page in results["pages"].items():
        if page["status"] != 200:
            bytes_rows.append((name, 0, None, None, None, None, f"{NOT_AVAILABLE} (HTTP {page['status']})"))
            continue
        wires[name] = page["document"]
        wires[f"{name}, with every resource (cold cache)"] = page["all_responses"]
        action = page.get("action")
        if action and action.get("available"):
            wires[f"{name}: the snapshot fragment"] = action["wire"]
    for name, w in wires.items():
        if not w:
            continue
        limit = TARGETS["transcript_compression_ratio"] if name.startswith("transcript") and "resource" not in name \
            else None
        bytes_rows.append((name, w["responses"], w["transfer_bytes"], w["encoded_bytes"], w["decoded_bytes"],
                           w["ratio"], f">= {limit}: {verdict(w['ratio'], limit, True)}" if limit else ""))
    summary["bytes"] = {k: v for k, v in wires.items() if v}

    frame_rows = [_frames_row(label, runs) for label, runs in reading["frames"].items()]
    for kind in SEARCHES:
        for q, fig in results[kind].items():
            if fig["available"]:
                frame_rows.append(_frames_row(f"{kind.replace('_', ' ')} q={q!r}", fig["frames"]))
    for name, page in results["pages"].items():
        if page["status"] == 200:
            frame_rows.append(_frames_row(name, page["frames"]))
            action = page.get("action")
            if action and action.get("available"):
                frame_rows.append(_frames_row(f"{name}, after showing it", page["action_frames"]))
    summary["frames"] = {row[0]: {"api": row[1], "n": row[2], "longest_median_ms": row[3], "longest_max_ms": row[4],
                                  "blocking_max_ms": row[5], "worst_script_callbacks_layout_ms": row[6],
                                  "worst_top_script": row[7]} for row in frame_rows}
    text = "\n\n".join([
        table(("timing (ms)", "median", "max", "n", "target", "median vs target"), timings),
        table(("bytes per page", "responses", "on the wire", "body sent", "body decoded", "ratio", "target"),
              bytes_rows),
        table(("long animation frames", "api", "n", "longest median ms", "longest max ms", "blocking max ms",
               "worst: script / callbacks / style+layout ms", "worst: top script", f"max < {TARGETS['frame_ms']}"),
              frame_rows)])
    return text, summary


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every browser bench over the demo takes."""
    parser.add_argument("--data-dir", type=Path, help="the demo's data folder, reused across runs (default: a "
                        "scratch folder, seeded anew and removed at the end)")
    parser.add_argument("--demo-timeout", type=float, default=900, help="seconds to wait for the demo's seeding")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON to this file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=5, help="samples of each timing (default 5)")
    parser.add_argument("--scroll-pages", type=int, default=5, help="transcript pages scrolled down (default 5)")
    parser.add_argument("--transcript-query", action="append", default=None,
                        help="searched inside long-shift (repeatable; default: a rare and a common phrase)")
    parser.add_argument("--content-query", action="append", default=None,
                        help="content searched across archives (repeatable; default: a rare and a common word)")
    demo_arguments(parser)
    args = parser.parse_args()
    args.transcript_query = args.transcript_query or ["call #4321:", "invoices"]
    args.content_query = args.content_query or ["Northwind", "standing"]
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium (a downloaded browser is never used)")
    started = time.monotonic()
    with demo_hub(args.data_dir, args.demo_timeout) as demo, sync_playwright() as p:
        print(f"demo ready at {demo['url']} after {time.monotonic() - started:.0f} s", flush=True)
        ids = discover(demo["url"], demo["admin_token"])
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            console = Console(browser, demo["url"], ids["last_sequence"])
            console.sign_in("demo-auditor", demo["passwords"]["auditor"])
            console.sign_in("demo-admin", demo["passwords"]["admin"])
            probe = browser.new_page()
            supported = probe.evaluate("PerformanceObserver.supportedEntryTypes")
            probe.close()
            version = browser.version
            results = measure(console, ids, args)
        finally:
            browser.close()
    text, summary = report(results)
    document = {"benchmark": "console_browser", "chromium": version, "repetitions": args.repetitions,
                "long_animation_frames_supported": "long-animation-frame" in supported,
                "seconds": round(time.monotonic() - started), "summary": summary, "raw": results}
    print(text)
    print(f"Long Animation Frames API: {'supported' if document['long_animation_frames_supported'] else 'MISSING'}"
          f" (Chromium {version}); the machine is shared, so absolute times are noisy.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2))
    print(json.dumps({k: v for k, v in document.items() if k != "raw"}))


if __name__ == "__main__":
    main()
