"""The approval page's full snapshot at the size the tool contract allows (an `order_import` CSV of
about 1 MB), in Debian's Chromium: shown in chunks that the browser lays out only when on screen,
its text still exactly the pretty-printed JSON, searchable to its last line, axe-clean."""
from __future__ import annotations

import json
import unicodedata

from playwright.sync_api import expect

from admin_app import limits
from admin_app.canonical import canonical_json
from admin_app.console.approvals import CHUNK_CHARS, _snapshot_chunks
from tests.browser import Hub
from tests.conftest import governed_config

CSV_MAX_CHARS = 1_000_000  # the ERP document's maxLength of `csv`
CSV_BYTES = limits.INVOCATION_ARGUMENTS_MAX_BYTES - 1024  # room for the file name and the JSON around it
NOTES = ("Lieferung an Lager Nord", "Заказ через склад", "倉庫から直送", "توصيل سريع", "Entrega urgente")
NEEDLE = "last line of the week's orders"


def order_file(max_chars: int, max_bytes: int) -> str:
    """CSV lines in several scripts within both bounds (counted in characters and in UTF-8 bytes,
    the escaped newline included), ending with a line to search for."""
    last = f"C-100234,ABC-1001,1,12.50,EUR,{NEEDLE}"
    lines, chars, size, n = ["customer_id,sku,quantity,unit_price,currency,note"], 60, 60, 0
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
    contract and the hub's argument limit allow; returns (approval, arguments, pretty text)."""
    route = governed_config(business.url)["routes"][0]
    route["tools"]["agent_direct"]["write_tools"].append("order_import")
    path = tmp_path / "with-import.json"
    path.write_text(json.dumps(governed_config(business.url, tools=route["tools"])))
    code, _out, err = cli("config", "apply", str(path))
    assert code == 0, err
    arguments = {"file_name": "orders-week-48.csv", "csv": order_file(CSV_MAX_CHARS, CSV_BYTES)}
    size = len(canonical_json(arguments).encode("utf-8"))
    assert 1_000_000 < size <= limits.INVOCATION_ARGUMENTS_MAX_BYTES
    approval = hub.approval("order_import", arguments)
    # The hub keeps the canonical form (sorted keys); the console pretty-prints that.
    return approval, arguments, json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)


def test_a_one_megabyte_snapshot_is_shown_whole_and_searchable_to_its_end(hub, ui, cli, business, tmp_path):
    approval, arguments, pretty = big_approval(hub, cli, business, tmp_path)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("approver"))
    view.goto(f"/console/approvals/{approval['id']}")
    page.get_by_role("button", name="Show the full snapshot").click()
    snapshot = page.locator("[data-snapshot]")
    expect(snapshot).to_be_visible()
    # What the approver sees is exactly the pretty-printed snapshot: nothing dropped or altered.
    shown = snapshot.text_content()
    assert shown == pretty
    assert json.loads(shown) == arguments
    # Shown in several chunks, each its own element; no chunk holds the whole text.
    chunks = snapshot.locator(".snapshot-chunk")
    assert chunks.count() > 10
    assert page.evaluate("""() => Array.from(document.querySelectorAll("[data-snapshot] .snapshot-chunk"),
                                             c => c.textContent.length).every(n => n < 20000)""")
    # Selecting it all (to copy it) gives the same text: the chunks add no line break of their own.
    assert page.evaluate("""() => { const range = document.createRange(), selection = getSelection();
      range.selectNodeContents(document.querySelector("[data-snapshot]"));
      selection.removeAllRanges(); selection.addRange(range); return selection.toString(); }""") == pretty

    # ---- search: a value on the last line is found, selected and scrolled into view
    search = page.get_by_label("Search in snapshot")
    search.fill(NEEDLE.upper())
    expect(page.locator("[data-snapshot-hits]")).to_have_text("1 found")
    assert page.evaluate("window.getSelection().toString()") == NEEDLE
    in_view = """() => {
      const box = document.querySelector("[data-snapshot]").getBoundingClientRect();
      const hit = window.getSelection().getRangeAt(0).getBoundingClientRect();
      return hit.height > 0 && hit.top >= box.top && hit.bottom <= box.bottom
        && hit.top >= 0 && hit.bottom <= window.innerHeight;
    }"""
    page.wait_for_function(in_view)
    # A value spread over the whole file: every hit counted, the first one selected.
    search.fill("倉庫から直送")
    expected = pretty.count("倉庫から直送")
    expect(page.locator("[data-snapshot-hits]")).to_have_text(f"{expected} found")
    assert page.evaluate("window.getSelection().toString()") == "倉庫から直送"
    page.wait_for_function(in_view)
    search.fill("not in this file at all")
    expect(page.locator("[data-snapshot-hits]")).to_have_text("not found")

    view.axe("a 1 MB snapshot shown")
    page.set_viewport_size({"width": 375, "height": 800})
    view.axe("a 1 MB snapshot shown on a phone")
    view.watch.assert_clean()


def test_the_chunks_join_back_to_the_exact_text():
    """Cut at line ends, inside a long line after an escaped newline or a space, and never between
    a letter and its combining accent; whatever the cuts, the pieces join back exactly."""
    long_line = '  "csv": "' + "a,b\\n" * 5000 + "x" * 30000 + "e\u0301" * 9000 + '"'
    text = "{\n" + "\n".join(f'  "k{i}": {i},' for i in range(450)) + "\n" + long_line + "\r\u2028\n}"
    chunks = _snapshot_chunks(text)
    assert "".join(chunks) == text
    assert len(chunks) > 5 and max(map(len, chunks)) <= CHUNK_CHARS
    assert all(not unicodedata.combining(chunk[0]) for chunk in chunks)
    assert all(chunk.endswith(("\n", "\\n", " ")) for chunk in chunks[:4])
