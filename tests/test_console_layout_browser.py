"""Issue 34 §3 in a real browser: on every list page, at 1280 and at 375 px, no table header and no
status badge breaks inside a word ("Membe|rs", "awaiting_approv|al"), the page never scrolls
sideways, and at 375 px the approvals queue (and the runs and the access log) read as stacked rows
whose cells are lines of text, not columns one to three characters wide.

One visit per page, measured at both widths (the layout is redone when the viewport changes)."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.browser import MERGE

WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 800}
CELL_CHARS = 24  # a cell of a stacked list on a phone holds at least this many characters a line
# Lists that become stacked rows on a phone: the approvals queue, the runs, the access log.
STACKED = {"/console/approvals/": "[data-queue] tbody tr", "/console/runs/": "table.stack tbody tr",
           "/console/access-log": "table.stack tbody tr"}

# Every word of every visible header cell and badge, and the distinct lines it is drawn on: a word
# on two lines is broken inside.
BROKEN_WORDS = """() => {
  const hidden = el => {
    for (let e = el; e; e = e.parentElement) {
      const style = getComputedStyle(e);
      if (style.display === 'none' || style.visibility === 'hidden' || style.clipPath !== 'none') return true;
    }
    return false;
  };
  const broken = [];
  for (const el of document.querySelectorAll('main th, main .badge')) {
    if (hidden(el)) continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (hidden(node.parentElement)) continue;
      for (const m of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.bottom)));
        if (tops.size > 1) broken.push(`${el.tagName.toLowerCase()}.${el.className}: ${m[0]}`);
      }
    }
  }
  return broken;
}"""

# Where a page wider than the phone comes from: text drawn past its right edge (for the message).
OVERFLOWING_TEXT = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const at = node.parentElement;
    for (const rect of range.getClientRects())
      if (rect.right > innerWidth + 1) out.push(`${at.tagName}.${at.className} ${rect.right}: ${node.data}`);
  }
  return out.slice(0, 10);
}"""

# The narrowest cell of the page's stacked list, in characters of its own font (1ch each).
CELL_WIDTH = """() => {
  let narrowest = Infinity;
  for (const td of document.querySelectorAll('table.stack tbody td')) {
    const probe = document.createElement('span');
    probe.style.cssText = 'display:inline-block;width:10ch';
    td.appendChild(probe);
    const ch = probe.getBoundingClientRect().width / 10;
    probe.remove();
    const style = getComputedStyle(td);
    const inner = td.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    narrowest = Math.min(narrowest, inner / ch);
  }
  return narrowest;
}"""


def test_list_pages_break_no_header_or_badge_inside_a_word_and_the_queue_reads_on_a_phone(hub, ui):
    archive_id, _ = hub.traced_conversation()
    hub.approval("customer_merge", MERGE)
    admin = hub.admin("admin")
    view = ui()
    page = view.page
    view.sign_in(admin)
    view.goto(f"/console/conversations/{archive_id}")  # a read, so that the access log has a row
    pages = [("/console/conversations/", "Conversations"), ("/console/runs/", "Runs"),
             ("/console/runs/unresolved", "Unresolved calls"), ("/console/runs/jobs", "Jobs"),
             ("/console/approvals/", "Pending approvals"), ("/console/approvals/history", "Decided approvals"),
             ("/console/tasks/", "Tasks"), ("/console/access-log", "Access log"), ("/console/admins/", "Admins"),
             ("/console/config-changes/", "Configuration changes"), ("/console/records/", "Records"),
             ("/console/executors/", "Executors"), ("/console/dead-letters/", "Dead letters")]
    problems: dict[str, object] = {}
    for path, heading in pages:
        page.set_viewport_size(WIDE)
        view.goto(path)
        expect(page.locator("h1")).to_contain_text(heading)
        for size in (WIDE, PHONE):
            page.set_viewport_size(size)
            broken = page.evaluate(BROKEN_WORDS)
            if broken:
                problems[f"{path} at {size['width']}"] = broken
            if page.evaluate("document.scrollingElement.scrollWidth") > size["width"]:
                problems[f"{path} scrolls sideways at {size['width']}"] = page.evaluate(OVERFLOWING_TEXT)
        if path in STACKED:
            expect(page.locator(STACKED[path]).first).to_be_visible()
            narrowest = page.evaluate(CELL_WIDTH)
            if narrowest < CELL_CHARS:
                problems[f"{path} cells at 375 (characters)"] = narrowest
    assert problems == {}, problems
    view.watch.assert_clean()
