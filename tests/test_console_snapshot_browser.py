"""The approval page's snapshot viewer (static/snapshot.js) in Debian's Chromium: the order import
at the size the tool contract allows (about 1 MB of CSV) fetched once when asked for and shown as a
table that keeps only the rows in view, searchable to its last line, its exact text and download
matching the hash; a small snapshot shown as the page loads, its untrusted keys and values kept as
text; axe-clean at 1280 and 375 px."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from playwright.sync_api import expect

from admin_app import limits
from admin_app.canonical import canonical_json
from admin_app.console import filesize
from admin_app.console.approvals import INLINE_SNAPSHOT_MAX_BYTES
from tests.browser import MERGE, XSS, Hub
from tests.conftest import governed_config

CSV_MAX_CHARS = 1_000_000  # the ERP document's maxLength of `csv`
CSV_BYTES = limits.INVOCATION_ARGUMENTS_MAX_BYTES - 1024  # room for the file name and the JSON around it
NOTES = ("Lieferung an Lager Nord", "Заказ через склад", "倉庫から直送", "توصيل سريع", "Entrega urgente cafe\u0301")
NEEDLE = "last line of the week's orders"
COLUMNS = ["customer_id", "sku", "quantity", "unit_price", "currency", "note"]
# How many table rows may be in the DOM at once: those in view plus a small overscan, never the file.
ROWS_IN_DOM_MAX = 60

# A rectangle inside its scroll box and inside the window: the selection (a search hit in the
# exact text) or the current match of a table.
INSIDE = """(rect, box) => rect.height > 0 && rect.top >= box.top - 1 && rect.bottom <= box.bottom + 1
  && rect.top >= -1 && rect.bottom <= window.innerHeight + 1"""
SELECTION_IN_VIEW = f"""() => ({INSIDE})(getSelection().getRangeAt(0).getBoundingClientRect(),
  document.querySelector("[data-snapshot]").getBoundingClientRect())"""
CELL_IN_VIEW = f"""cell => ({INSIDE})(cell.getBoundingClientRect(),
  cell.closest(".snap-grid-scroll").getBoundingClientRect())"""
HARMLESS = """() => window.__xss === undefined
  && document.querySelectorAll("#snapshot script, #snapshot img, #snapshot svg, #snapshot b").length === 0"""


def order_file(max_chars: int, max_bytes: int) -> str:
    """CSV lines in several scripts within both bounds (counted in characters and in UTF-8 bytes,
    the escaped newline included), ending with a line to search for."""
    last = f"C-100234,ABC-1001,1,12.50,EUR,{NEEDLE}"
    lines, chars, size, n = [",".join(COLUMNS)], 60, 60, 0
    while True:
        line = f"C-10023{4 + n % 3},ABC-100{1 + n % 2},{1 + n % 40},{12.5 + n % 7:.2f},EUR,{NOTES[n % 5]} #{n}"
        if chars + len(line) + len(last) + 2 > max_chars or size + len(line.encode()) + len(last) + 4 > max_bytes:
            break
        lines.append(line)
        chars, size, n = chars + len(line) + 1, size + len(line.encode()) + 2, n + 1
    lines.append(last)
    return "\n".join(lines)


def big_approval(hub: Hub, cli, business, tmp_path) -> tuple[dict, dict, str]:
    """An `order_import` awaiting approval through the real agent API, as large as the tool's
    contract and the hub's argument limit allow; returns (approval, arguments, exact text)."""
    route = governed_config(business.url)["routes"][0]
    route["tools"]["agent_direct"]["write_tools"].append("order_import")
    path = tmp_path / "with-import.json"
    path.write_text(json.dumps(governed_config(business.url, tools=route["tools"])))
    code, _out, err = cli("config", "apply", str(path))
    assert code == 0, err
    arguments = {"file_name": "orders-week-48.csv", "csv": order_file(CSV_MAX_CHARS, CSV_BYTES)}
    text = canonical_json(arguments)
    assert 1_000_000 < len(text.encode("utf-8")) <= limits.INVOCATION_ARGUMENTS_MAX_BYTES
    approval = hub.approval("order_import", arguments)
    assert approval["args_hash"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    return approval, arguments, text


def snapshot_requests(page) -> list[str]:
    """The URLs of every request for the snapshot's bytes made from now on."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url) if "/snapshot.json" in request.url else None)
    return seen


def test_a_one_megabyte_order_import_is_a_table_fetched_once_and_searchable_to_its_end(
        hub, ui, cli, business, tmp_path, sql):
    approval, arguments, text = big_approval(hub, cli, business, tmp_path)
    lines = arguments["csv"].split("\n")
    rows = len(lines) - 1
    size = filesize(len(text.encode("utf-8")))
    view = ui()
    page = view.page
    fetched = snapshot_requests(page)
    view.sign_in(hub.admin("approver"))
    view.goto(f"/console/approvals/{approval['id']}")

    # ---- too big to show with the page: nothing fetched until asked for, then a loading state
    expect(page.get_by_text(f"Loaded only when asked for ({size}).")).to_be_visible()
    expect(page.locator(".snapshot-facts")).to_contain_text(approval["args_hash"])
    expect(page.get_by_role("link", name="Download the exact bytes")).to_be_visible()
    assert fetched == []
    held: list = []
    page.route("**/snapshot.json?view=1", lambda route: held.append(route))  # answered when the test says
    page.get_by_role("button", name=f"Show the snapshot ({size})").click()
    expect(page.locator("#snapshot")).to_have_attribute("aria-busy", "true")
    expect(page.locator("[data-snapshot-status]")).to_have_text(f"Loading snapshot… ({size})")
    for _ in range(100):  # Playwright hands the held request over while it waits
        if held:
            break
        page.wait_for_timeout(50)
    with page.expect_response(lambda r: "/snapshot.json?view=1" in r.url) as answer:
        held[0].continue_()
    page.unroute("**/snapshot.json?view=1")
    headers = answer.value.headers
    assert headers["x-bailing-args-hash"] == approval["args_hash"]
    assert "content-disposition" not in headers  # shown, not saved
    expect(page.locator("#snapshot")).to_have_attribute("aria-busy", "false")
    expect(page.locator("[data-snapshot-status]")).to_have_text("")

    # ---- the CSV as a table: its header, its rows, only those in view in the DOM
    field = page.locator(".snap-table-field")
    expect(field).to_have_count(1)
    expect(field.locator(".snap-head")).to_contain_text(f"CSV (comma), {rows:,} rows \N{MULTIPLICATION SIGN} 6 columns")
    assert field.locator("thead th").all_text_contents() == ["#", *COLUMNS]
    first = field.locator("tbody tr[aria-rowindex='2'] td")
    expect(first.first).to_have_text("1")
    assert first.all_text_contents() == ["1", *lines[1].split(",")]
    expect(page.locator(".snap-leaf").filter(has_text="file_name")).to_contain_text("orders-week-48.csv")
    dom_rows = field.locator("tbody tr:not(.snap-pad)")
    assert rows > 10_000 and 10 < dom_rows.count() <= ROWS_IN_DOM_MAX
    scroller = field.locator(".snap-grid-scroll")
    scroller.evaluate("box => { box.scrollTop = box.scrollHeight; }")
    expect(dom_rows.last.locator("td").first).to_have_text(str(rows))
    assert dom_rows.last.locator("td").all_text_contents() == [str(rows), *lines[-1].split(",")]
    assert dom_rows.count() <= ROWS_IN_DOM_MAX

    # ---- search: the last line found and shown; a note in every fifth line stepped through
    search = page.get_by_label("Search in csv")
    hits = field.locator(".snap-hits")
    current = field.locator("td[aria-current='true']")
    scroller.evaluate("box => { box.scrollTop = 0; }")
    search.fill(NEEDLE.upper())
    expect(hits).to_have_text("1 of 1 match (1 row)")
    expect(current).to_have_text(NEEDLE)
    expect(current).to_have_class(re.compile(r"\bsnap-current\b"))
    expect(current.locator("xpath=../td[1]")).to_have_text(str(rows))
    assert current.evaluate(CELL_IN_VIEW)
    note = "倉庫から直送"
    matching = [i for i, line in enumerate(lines) if note in line]
    search.fill(note)
    expect(hits).to_have_text(f"1 of {len(matching):,} matches ({len(matching):,} rows)")
    row_of = current.locator("xpath=../td[1]")
    expect(row_of).to_have_text(str(matching[0]))
    search.press("Enter")
    expect(hits).to_have_text(f"2 of {len(matching):,} matches ({len(matching):,} rows)")
    expect(row_of).to_have_text(str(matching[1]))
    page.get_by_role("button", name="Next").click()
    expect(row_of).to_have_text(str(matching[2]))
    search.press("Shift+Enter")
    expect(hits).to_have_text(f"2 of {len(matching):,} matches ({len(matching):,} rows)")
    page.get_by_role("button", name="Previous").click()
    page.get_by_role("button", name="Previous").click()  # round the start, to the last match
    expect(hits).to_have_text(f"{len(matching):,} of {len(matching):,} matches ({len(matching):,} rows)")
    expect(row_of).to_have_text(str(matching[-1]))
    assert current.evaluate(CELL_IN_VIEW)
    expect(current).to_have_text(lines[matching[-1]].split(",")[-1])
    assert field.locator("td.snap-hit").count() > 1  # the other matches in view are marked too
    assert dom_rows.count() <= ROWS_IN_DOM_MAX
    search.fill("not in this file at all")
    expect(hits).to_have_text("No match")
    expect(current).to_have_count(0)

    # ---- the field as its text, with its line breaks
    page.get_by_role("button", name="Show as text").click()
    expect(scroller).to_be_hidden()
    preview = field.locator(".snap-table-text .snap-text")
    expect(preview).to_contain_text(lines[1])
    assert preview.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    assert preview.evaluate("e => e.textContent").startswith("\n".join(lines[:12]))
    page.get_by_role("button", name="Show as text").click()
    expect(scroller).to_be_visible()

    # ---- hidden and shown again, and the other views: never fetched twice
    page.get_by_role("button", name="Hide the snapshot").click()
    expect(field).to_be_hidden()
    page.get_by_role("button", name=f"Show the snapshot ({size})").click()
    expect(field).to_be_visible()

    # ---- the exact text: what was hashed, in chunks, searchable to its end
    page.get_by_role("button", name="Raw (exact bytes)").click()
    expect(page.get_by_role("button", name="Raw (exact bytes)")).to_have_attribute("aria-pressed", "true")
    expect(field).to_be_hidden()
    raw = page.locator("pre[data-snapshot]")
    expect(raw).to_be_visible()
    shown = raw.text_content()
    assert shown == text
    assert hashlib.sha256(shown.encode("utf-8")).hexdigest() == approval["args_hash"]
    chunks = raw.locator(".snapshot-chunk")
    assert chunks.count() > 10
    assert max(raw.evaluate("pre => Array.from(pre.children, c => c.textContent.length)")) <= 12_000
    # No chunk starts with a combining accent or half a surrogate pair: each lays out on its own.
    assert raw.evaluate("""pre => Array.from(pre.children)
      .every(c => !/^[\\p{M}\\uDC00-\\uDFFF]/u.test(c.textContent))""")
    # Selecting it all (to copy it) gives the same text: the chunks add no line break of their own.
    assert page.evaluate("""() => { const range = document.createRange(), selection = getSelection();
      range.selectNodeContents(document.querySelector("[data-snapshot]"));
      selection.removeAllRanges(); selection.addRange(range); return selection.toString(); }""") == text
    raw_search = page.get_by_label("Search in snapshot")
    raw_search.fill(NEEDLE.upper())
    expect(page.locator("[data-snapshot-hits]")).to_have_text("1 found")
    assert page.evaluate("window.getSelection().toString()") == NEEDLE
    page.wait_for_function(SELECTION_IN_VIEW)
    raw_search.fill(note)
    expect(page.locator("[data-snapshot-hits]")).to_have_text(f"{text.count(note)} found")
    page.wait_for_function(SELECTION_IN_VIEW)
    page.get_by_role("button", name="Tree").click()
    expect(field).to_be_visible()
    expect(raw).to_be_hidden()

    # ---- the download: the same bytes, recorded as a download (the viewer's read as a view)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the exact bytes").click()
    saved = Path(download.value.path()).read_bytes()
    assert hashlib.sha256(saved).hexdigest() == approval["args_hash"]
    assert [url.rsplit("/", 1)[-1] for url in fetched] == ["snapshot.json?view=1"]  # a download is no page request
    assert sql("SELECT action FROM bz_access_log WHERE target = %s ORDER BY id", (approval["id"],)) == \
        [("snapshot_view",), ("snapshot_download",)]

    page.get_by_label("Search in csv").fill(note)
    view.axe("a 1 MB order import shown as a table")
    page.set_viewport_size({"width": 375, "height": 800})
    expect(field.locator("thead th").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # the table scrolls, not the page
    view.axe("a 1 MB order import on a phone")
    view.watch.assert_clean()


def small_snapshot() -> dict:
    """What an agent could put in a tool's free-form object: markup in a key and in values, a
    text of several lines, records, CSV with quoted separators, quotes and a line break."""
    return {
        XSS: XSS,
        "reason": "Same company,\nregistered twice\n  under two VAT numbers",
        "lines": [{"sku": "ABC-1001", "quantity": 3, "note": XSS}, {"sku": "ABC-1002", "quantity": 1},
                  {"sku": "ABC-1003", "quantity": 2, "note": "urgent"}],
        "csv": 'id;name;comment\r\n1;"Müller; Sohn";"said ""hi""\nthen left"\r\n2;plain;\r\n3;"<b>x</b>";ok\r\n',
        "nested": {"deep": {"deeper": {"deepest": [1, True, None]}}},
    }


def test_a_small_snapshot_is_shown_with_the_page_and_untrusted_text_stays_text(hub, ui, sql):
    approval = hub.approval("customer_merge", MERGE)
    # A snapshot as a tool with a free-form object would keep it (none of the demo's tools has one).
    arguments = small_snapshot()
    text = canonical_json(arguments)
    args_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert len(text.encode("utf-8")) <= INLINE_SNAPSHOT_MAX_BYTES
    sql("UPDATE bz_tool_approvals SET snapshot = %s, args_hash = %s, snapshot_bytes = %s WHERE id = %s",
        (text, args_hash, len(text.encode("utf-8")), approval["id"]))
    view = ui()
    page = view.page
    fetched = snapshot_requests(page)
    view.sign_in(hub.admin("approver"))

    # ---- a failed fetch says so and can be tried again
    view.watch.allowed_statuses.add(500)
    page.route("**/snapshot.json?view=1", lambda route: route.fulfill(status=500, body="no"))
    view.goto(f"/console/approvals/{approval['id']}")
    expect(page.get_by_role("alert")).to_have_text(
        "The snapshot could not be loaded (HTTP 500). Try again, or download the exact bytes.")
    expect(page.locator("#snapshot")).to_have_attribute("aria-busy", "false")
    page.unroute("**/snapshot.json?view=1")
    size = filesize(len(text.encode("utf-8")))
    page.get_by_role("button", name=f"Show the snapshot ({size})").click()
    expect(page.get_by_role("button", name="Hide the snapshot")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_count(0)

    # ---- shown with the page, no click: as a tree, on a fresh page
    view.goto(f"/console/approvals/{approval['id']}")
    tree = page.locator(".snap-tree")
    expect(tree).to_be_visible()
    assert len(fetched) == 3
    expect(page.get_by_role("button", name="Hide the snapshot")).to_be_visible()
    expect(page.locator(".snapshot-facts")).to_contain_text(args_hash)

    # Markup in a key and a value: shown as the text it is, nothing run or made an element.
    expect(tree.locator(".snap-key").filter(has_text="<script>")).to_have_text(XSS)
    expect(tree.locator(".snap-string").filter(has_text="<script>")).to_have_text(XSS)
    assert page.evaluate(HARMLESS)
    # A text of several lines keeps its line breaks (and its leading spaces).
    reason = tree.locator(".snap-field").filter(has_text="reason").locator(".snap-text")
    assert reason.text_content() == arguments["reason"]
    assert reason.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    assert reason.evaluate("e => e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)") >= 3
    # Records as a table, a missing key an empty cell, markup in a cell as text.
    records = tree.locator(".snap-table-field").filter(has_text="3 records \N{MULTIPLICATION SIGN} 3 columns")
    assert records.locator("thead th").all_text_contents() == ["#", "note", "quantity", "sku"]  # canonical order
    assert records.locator("tbody tr:not(.snap-pad)").nth(0).locator("td").all_text_contents() == \
        ["1", XSS, "3", "ABC-1001"]
    assert records.locator("tbody tr:not(.snap-pad)").nth(1).locator("td").all_text_contents() == \
        ["2", "", "1", "ABC-1002"]
    # CSV with semicolons, read as RFC 4180 says: quoted separators, doubled quotes, a line break.
    table = tree.locator(".snap-table-field").filter(has_text="CSV (semicolon), 3 rows \N{MULTIPLICATION SIGN} 3")
    assert table.locator("thead th").all_text_contents() == ["#", "id", "name", "comment"]
    cells = [row.locator("td").all_text_contents() for row in table.locator("tbody tr:not(.snap-pad)").all()]
    assert cells == [["1", "1", "Müller; Sohn", 'said "hi"\nthen left'], ["2", "2", "plain", ""],
                     ["3", "3", "<b>x</b>", "ok"]]
    table.get_by_label("Search in csv").fill("MÜLLER")
    expect(table.locator(".snap-hits")).to_have_text("1 of 1 match (1 row)")
    expect(table.locator("td[aria-current='true']")).to_have_text("Müller; Sohn")
    # Deeper objects are built only when opened.
    expect(tree.locator(".snap-key", has_text="deeper")).to_have_count(0)
    tree.locator("summary").filter(has_text="deep").filter(has_text="{1 key}").first.click()
    expect(tree.locator(".snap-key", has_text="deeper")).to_have_count(1)
    assert page.evaluate(HARMLESS)

    page.get_by_role("button", name="Raw (exact bytes)").click()
    assert page.locator("pre[data-snapshot]").text_content() == text
    assert page.evaluate(HARMLESS)
    page.get_by_role("button", name="Tree").click()
    view.axe("a small snapshot with markup in it")
    page.set_viewport_size({"width": 375, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    view.axe("a small snapshot on a phone")
    assert len(fetched) == 3
    view.watch.assert_clean()
