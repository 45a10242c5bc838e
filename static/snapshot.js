// The approval page's snapshot viewer (templates/console/approval.html, section.snapshot-box).
// It fetches the snapshot's exact bytes once (snapshot.json?view=1), parses them once, and shows
// them as a tree (objects and arrays as <details>, filled only when opened), strings with their
// line breaks, CSV text and arrays of records as tables that render only the rows in view, and
// the exact text in chunks. Untrusted text only ever goes through textContent.
(function () {
  "use strict";
  var CHUNK_CHARS = 12000;   // as CHUNK_CHARS in approvals.py: one chunk of text laid out on its own
  var OVERSCAN = 8;          // table rows rendered beyond the visible ones, above and below
  var ROW_GUESS = 28;        // a table row's height in px until one is measured (console.css fixes it)
  var PREVIEW_LINES = 12;    // a long string shows this much until "Show all"
  var PREVIEW_CHARS = 2000;
  var OPEN_MAX = 50;         // containers this small open by default on the first two levels
  var PAGE_ITEMS = 200;      // children of a big object or array added at a time
  var SLICE_MS = 12;         // a table search's work between two chances to draw a frame
  // 12,345: by hand, since the first Intl.NumberFormat of a page costs tens of ms (ICU data).
  var number = { format: function (n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); } };

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function button(text, className) {
    var node = el("button", className, text);
    node.type = "button";
    return node;
  }

  function plural(n, one, many) { return number.format(n) + " " + (n === 1 ? one : many); }

  // ------------------------------------------------------------------ text in chunks

  // `text` cut into pieces of about CHUNK_CHARS, after a line break, an escaped newline, a space or
  // a comma near the end where there is one (where the text would wrap anyway), never inside a
  // surrogate pair or before a combining mark, so that the pieces join back to `text` exactly.
  function chunks(text) {
    var out = [], at = 0;
    while (text.length - at > CHUNK_CHARS) {
      var cut = cutPoint(text, at);
      out.push(text.slice(at, cut));
      at = cut;
    }
    out.push(text.slice(at));
    return out;
  }

  function cutPoint(text, at) {
    var end = at + CHUNK_CHARS, window = text.slice(end - 400, end);
    var marks = ["\n", "\\n", " ", ","];
    for (var i = 0; i < marks.length; i++) {
      var found = window.lastIndexOf(marks[i]);
      if (found >= 0) return end - 400 + found + marks[i].length;
    }
    while (end > at + 1 && /^[\p{M}\uDC00-\uDFFF]/u.test(text.slice(end, end + 1))) end--;
    return end;
  }

  // A <pre> of chunks that the browser lays out only when on screen (content-visibility, see
  // console.css); `attributes` name the exact-text view for its search (console.js).
  function chunkedText(text, className) {
    var pre = el("pre", className);
    pre.tabIndex = 0;
    var parts = chunks(text), fragment = document.createDocumentFragment();
    for (var i = 0; i < parts.length; i++) fragment.append(el("span", "snapshot-chunk", parts[i]));
    pre.append(fragment);
    return pre;
  }

  // ------------------------------------------------------------------ CSV (RFC 4180)

  // Records of `text` split at `sep`, with quoted fields ("" is a quote; separators and line
  // breaks inside quotes belong to the field), lines ended by CRLF, LF or CR; at most `limit`.
  function parseCsv(text, sep, limit) {
    var rows = [], row = [], i = 0, n = text.length, sepCode = sep.charCodeAt(0);
    for (;;) {
      if (limit && rows.length >= limit) return rows;
      var field = "";
      if (text.charCodeAt(i) === 34) {
        var j = i + 1;
        for (;;) {
          var quote = text.indexOf('"', j);
          if (quote < 0) { field += text.slice(j); i = n; break; }  // unterminated: the rest
          field += text.slice(j, quote);
          if (text.charCodeAt(quote + 1) === 34) { field += '"'; j = quote + 2; continue; }
          i = quote + 1;
          break;
        }
      }
      var k = i, c = 0;
      while (k < n) {
        c = text.charCodeAt(k);
        if (c === sepCode || c === 10 || c === 13) break;
        k++;
      }
      row.push(field + text.slice(i, k));  // anything after a closing quote is kept, not lost
      if (k >= n) { rows.push(row); return rows; }
      if (c === sepCode) {
        i = k + 1;
        if (i === n) { row.push(""); rows.push(row); return rows; }
        continue;
      }
      rows.push(row);
      row = [];
      i = k + (c === 13 && text.charCodeAt(k + 1) === 10 ? 2 : 1);
      if (i >= n) return rows;  // a final line break ends the last record
    }
  }

  // The separator of a string that holds CSV: three lines or more whose header and first records
  // split into the same number (two or more) of fields at it, with a header of short names.
  function csvSeparator(text) {
    if (text.indexOf("\n") < 0 && text.indexOf("\r") < 0) return null;
    var head = text.slice(0, 8192), best = null, width = 1;
    [",", ";", "\t"].forEach(function (sep) {
      var records = parseCsv(head, sep, 7);
      if (head.length < text.length && records.length < 7) records.pop();  // cut by the slice
      if (records.length < 3) return;
      var columns = records[0].length;
      var names = records[0].every(function (name) { return name.trim() !== "" && name.length <= 100; });
      if (columns > width && names && records.every(function (r) { return r.length === columns; })) {
        best = sep;
        width = columns;
      }
    });
    return best;
  }

  // ------------------------------------------------------------------ tables

  // The columns of an array of records: objects (all of them) that mostly share their keys (a
  // record holds on average 60% of all the keys of the first thousand); else null.
  function recordColumns(array) {
    if (array.length < 2) return null;
    var seen = new Map(), held = 0, sample = Math.min(array.length, 1000);
    for (var i = 0; i < array.length; i++) {
      var item = array[i];
      if (item === null || typeof item !== "object" || Array.isArray(item)) return null;
      if (i >= sample) continue;
      var keys = Object.keys(item);
      held += keys.length;
      for (var k = 0; k < keys.length; k++) seen.set(keys[k], true);
    }
    if (seen.size === 0 || seen.size > 50 || held / sample < 0.6 * seen.size) return null;
    return Array.from(seen.keys());
  }

  function cellText(value) {
    if (value === undefined) return "";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  // A table over `data` ({columns, count, cell(row, column) -> string}) with a row-number column,
  // a fixed row height and only the rows in view (and OVERSCAN more) in the DOM; a search box
  // steps through the matching cells.
  function Table(data, label) {
    this.data = data;
    this.rowHeight = 0;  // measured from the first row drawn
    this.typed = "";     // the search as typed, and lower-cased
    this.query = "";
    this.matches = [];   // row * columns + column of each matching cell, in reading order
    this.current = -1;
    this.range = [-1, -1];
    this.frame = 0;

    var columns = data.columns.length;
    this.tools = el("div", "snap-table-tools");
    var search = el("label", null, "Search in " + label + " ");
    this.input = el("input");
    this.input.type = "search";
    this.input.placeholder = "text to find";
    search.append(this.input);
    this.previous = button("Previous");
    this.next = button("Next");
    this.hits = el("span", "snap-hits small");
    this.hits.setAttribute("aria-live", "polite");
    this.tools.append(search, this.previous, this.next, this.hits);

    this.scroller = el("div", "snap-grid-scroll");
    this.scroller.tabIndex = 0;
    this.scroller.setAttribute("role", "region");
    this.scroller.setAttribute("aria-label", label + ": " + plural(data.count, "row", "rows"));
    var table = el("table", "snap-grid");
    table.setAttribute("aria-rowcount", String(data.count + 1));
    var widths = this.widths(), colgroup = el("colgroup"), total = 0;
    widths.forEach(function (w) {
      var col = el("col");
      col.style.width = w + "ch";
      colgroup.append(col);
      total += w;
    });
    table.style.width = total + "ch";
    var head = el("tr");
    head.setAttribute("aria-rowindex", "1");
    head.append(el("th", "snap-rownum", "#"));
    data.columns.forEach(function (name) { head.append(el("th", null, name)); });
    var thead = el("thead");
    thead.append(head);
    this.body = el("tbody");
    this.padTop = this.pad(columns);
    this.padBottom = this.pad(columns);
    this.padBottom.style.height = data.count * ROW_GUESS + "px";  // the scroller's height before any row
    this.body.append(this.padTop, this.padBottom);
    table.append(colgroup, thead, this.body);
    this.scroller.append(table);
    this.thead = thead;

    var self = this, timer = 0;
    this.scroller.addEventListener("scroll", function () {
      if (!self.frame) self.frame = requestAnimationFrame(function () { self.frame = 0; self.render(); });
    });
    // Drawn when laid out, and again whenever its size changes (shown after being hidden, say).
    new ResizeObserver(function () { self.render(); }).observe(this.scroller);
    this.input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { self.search(self.input.value); }, 150);
    });
    this.input.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();
      clearTimeout(timer);
      if (self.input.value !== self.typed) self.search(self.input.value);
      else self.step(event.shiftKey ? -1 : 1);
    });
    this.previous.addEventListener("click", function () { self.step(-1); });
    this.next.addEventListener("click", function () { self.step(1); });
  }

  Table.prototype.pad = function (columns) {
    var row = el("tr", "snap-pad"), cell = el("td");
    row.setAttribute("aria-hidden", "true");
    cell.colSpan = columns + 1;
    row.append(cell);
    return row;
  };

  // Column widths in ch from the header and the first and last rows (table-layout: fixed keeps
  // them as rows come and go): at least 4, at most 48.
  Table.prototype.widths = function () {
    var data = this.data, rows = [];
    for (var r = 0; r < data.count && r < 200; r++) rows.push(r);
    for (r = Math.max(200, data.count - 50); r < data.count; r++) rows.push(r);
    var out = [String(data.count).length + 2];
    for (var c = 0; c < data.columns.length; c++) {
      var widest = data.columns[c].length;
      for (var i = 0; i < rows.length; i++) widest = Math.max(widest, data.cell(rows[i], c).length);
      out.push(Math.min(48, Math.max(4, widest)) + 2);
    }
    return out;
  };

  // Draw the rows in view; `force` redraws them even when the same rows are in view (a search).
  Table.prototype.render = function (force) {
    var data = this.data, height = this.rowHeight || ROW_GUESS;
    var top = this.scroller.scrollTop, view = this.scroller.clientHeight;
    var first = Math.max(0, Math.floor(top / height) - OVERSCAN);
    var last = Math.min(data.count, Math.ceil((top + view) / height) + OVERSCAN);
    if (!force && first === this.range[0] && last === this.range[1]) return;
    this.range = [first, last];
    var fragment = document.createDocumentFragment(), columns = data.columns.length;
    var currentCell = this.current >= 0 ? this.matches[this.current] : -1, query = this.query;
    for (var r = first; r < last; r++) {
      var row = el("tr");
      row.setAttribute("aria-rowindex", String(r + 2));
      row.append(el("td", "snap-rownum", String(r + 1)));
      for (var c = 0; c < columns; c++) {
        var text = data.cell(r, c), cell = el("td", null, text);
        if (query && text.toLowerCase().indexOf(query) >= 0) {
          cell.className = "snap-hit";
          if (r * columns + c === currentCell) {
            cell.className = "snap-hit snap-current";
            cell.setAttribute("aria-current", "true");
          }
        }
        row.append(cell);
      }
      fragment.append(row);
    }
    while (this.padTop.nextSibling !== this.padBottom) this.padTop.nextSibling.remove();
    this.body.insertBefore(fragment, this.padBottom);
    if (!this.rowHeight && last > first) {  // 0 while hidden: measured on a later draw
      this.rowHeight = this.padTop.nextSibling.getBoundingClientRect().height;
      height = this.rowHeight || ROW_GUESS;
    }
    this.padTop.style.height = first * height + "px";
    this.padBottom.style.height = (data.count - last) * height + "px";
    this.padTop.hidden = first === 0;
    this.padBottom.hidden = last === data.count;
  };

  // Find the cells holding `value` (any case), a slice of rows of about SLICE_MS at a time so
  // that a big table never holds a frame long; the first match is shown as soon as it is found.
  Table.prototype.search = function (value) {
    var self = this, data = this.data, columns = data.columns.length, query = value.toLowerCase();
    var token = this.searching = (this.searching || 0) + 1, matches = [], r = 0;
    this.typed = value;
    this.query = query;
    this.matches = matches;
    this.matchRows = 0;
    this.current = -1;
    (function slice() {
      if (token !== self.searching) return;  // a newer search took over
      var until = performance.now() + SLICE_MS;
      while (query && r < data.count && performance.now() < until) {
        for (var end = Math.min(data.count, r + 256); r < end; r++) {
          var before = matches.length;
          for (var c = 0; c < columns; c++) {
            if (data.cell(r, c).toLowerCase().indexOf(query) >= 0) matches.push(r * columns + c);
          }
          if (matches.length > before) self.matchRows++;
        }
      }
      self.done = !query || r >= data.count;
      if (self.current < 0 && matches.length) self.step(1);
      else if (!matches.length) {
        self.hits.textContent = !query ? "" : self.done ? "No match" : "Searching…";
        self.render(true);
      } else self.count();
      if (!self.done) setTimeout(slice, 0);
    })();
  };

  // "n of N matches (R rows)", N and R marked as growing while the search goes on.
  Table.prototype.count = function () {
    var more = this.done ? "" : "+";
    this.hits.textContent = number.format(this.current + 1) + " of " + number.format(this.matches.length) + more +
      (this.matches.length === 1 && this.done ? " match" : " matches") + " (" + number.format(this.matchRows) + more +
      (this.matchRows === 1 && this.done ? " row)" : " rows)");
  };

  // To the next (+1) or previous (-1) match, round the ends: its row scrolled to the middle of
  // the table, its cell marked and brought into view.
  Table.prototype.step = function (direction) {
    var total = this.matches.length;
    if (!total) return;
    this.current = this.current < 0 ? (direction > 0 ? 0 : total - 1) : (this.current + direction + total) % total;
    var columns = this.data.columns.length, at = this.matches[this.current];
    var row = Math.floor(at / columns), height = this.rowHeight || ROW_GUESS;
    // The row's middle to the middle of what the sticky header leaves visible.
    var head = this.thead.getBoundingClientRect().height;
    this.scroller.scrollTop = Math.max(0, head + row * height + height / 2 - (head + this.scroller.clientHeight) / 2);
    this.render(true);
    this.count();
    var cell = this.body.querySelector(".snap-current");
    if (cell) cell.scrollIntoView({ block: "nearest", inline: "nearest" });
  };

  function csvData(rows) {
    var header = rows[0], body = rows.slice(1), columns = header.slice();
    var widest = body.reduce(function (w, r) { return Math.max(w, r.length); }, header.length);
    for (var c = header.length; c < widest; c++) columns.push("(column " + (c + 1) + ")");
    if (body.length && body[body.length - 1].length === 1 && body[body.length - 1][0] === "") body.pop();
    return { columns: columns, count: body.length,
             cell: function (r, c) { var v = body[r][c]; return v === undefined ? "" : v; } };
  }

  function recordData(array, columns) {
    return { columns: columns, count: array.length,
             cell: function (r, c) { return cellText(array[r][columns[c]]); } };
  }

  // ------------------------------------------------------------------ the tree

  function keyLabel(key, index) {
    if (key === null) return null;
    return el("span", index ? "snap-key snap-index" : "snap-key", String(key));
  }

  function head(key, index, what) {
    var line = el("div", "snap-head");
    var label = keyLabel(key, index);
    if (label) line.append(label);
    line.append(el("span", "snap-what muted small", what));
    return line;
  }

  function node(key, value, depth, index) {
    if (value !== null && typeof value === "object") {
      var columns = Array.isArray(value) ? recordColumns(value) : null;
      if (columns) {
        return tableField(key, index, recordData(value, columns),
                          plural(value.length, "record", "records") + " × " + plural(columns.length, "column", "columns"),
                          function () { return JSON.stringify(value, null, 2); });
      }
      return container(key, value, depth, index);
    }
    if (typeof value === "string") return stringField(key, value, index);
    var leaf = el("div", "snap-leaf");
    var label = keyLabel(key, index);
    if (label) leaf.append(label);
    leaf.append(el("span", "snap-value snap-" + (value === null ? "null" : typeof value), JSON.stringify(value)));
    return leaf;
  }

  // An object or array as <details>: its key and count in the summary, its children built the
  // first time it opens (and at most PAGE_ITEMS at a time).
  function container(key, value, depth, index) {
    var keys = Array.isArray(value) ? null : Object.keys(value);
    var count = keys ? keys.length : value.length;
    var details = el("details", "snap-node");
    var summary = el("summary");
    var label = keyLabel(key, index);
    if (label) summary.append(label);
    summary.append(el("span", "snap-what muted small", keys ? "{" + plural(count, "key", "keys") + "}"
                                                            : "[" + plural(count, "item", "items") + "]"));
    details.append(summary);
    var filled = false;
    function fill() {
      if (filled) return;
      filled = true;
      var list = el("div", "snap-children");
      details.append(list);
      addChildren(list, value, keys, 0, depth + 1);
    }
    if (depth < 2 && count <= OPEN_MAX) {
      details.open = true;
      fill();
    }
    details.addEventListener("toggle", function () { if (details.open) fill(); });
    return details;
  }

  function addChildren(list, value, keys, start, depth) {
    var total = keys ? keys.length : value.length, end = Math.min(total, start + PAGE_ITEMS);
    var fragment = document.createDocumentFragment();
    for (var i = start; i < end; i++) {
      fragment.append(keys ? node(keys[i], value[keys[i]], depth, false) : node(i, value[i], depth, true));
    }
    list.append(fragment);
    if (end < total) {
      var more = button("Show " + number.format(Math.min(PAGE_ITEMS, total - end)) + " more (" +
                        number.format(total - end) + " not shown)", "link snap-more");
      more.addEventListener("click", function () {
        more.remove();
        addChildren(list, value, keys, end, depth);
      });
      list.append(more);
    }
  }

  function lineCount(text) {
    var lines = 1;
    for (var at = text.indexOf("\n"); at >= 0; at = text.indexOf("\n", at + 1)) lines++;
    return lines;
  }

  // A string: on one line in quotes when short; else as text with its line breaks, its first
  // lines only until "Show all"; a string holding CSV as a table.
  function stringField(key, text, index) {
    var sep = csvSeparator(text);
    if (sep) {
      var data = csvData(parseCsv(text, sep));
      if (data.count > 0) {
        var name = { ",": "comma", ";": "semicolon", "\t": "tab" }[sep];
        return tableField(key, index, data, "CSV (" + name + "), " + plural(data.count, "row", "rows") + " × " +
                          plural(data.columns.length, "column", "columns"), function () { return text; });
      }
    }
    if (text.indexOf("\n") < 0 && text.indexOf("\r") < 0 && text.length <= PREVIEW_CHARS) {
      var leaf = el("div", "snap-leaf");
      var label = keyLabel(key, index);
      if (label) leaf.append(label);
      leaf.append(el("span", "snap-value snap-string", text));
      return leaf;
    }
    var field = el("div", "snap-field");
    var lines = lineCount(text);
    field.append(head(key, index, "text, " + plural(lines, "line", "lines") + ", " +
                      plural(text.length, "character", "characters")));
    field.append(longText(text, lines));
    return field;
  }

  // Text with its line breaks: the first PREVIEW_LINES lines (PREVIEW_CHARS at most) and a
  // "Show all" that swaps in the whole text in chunks.
  function longText(text, lines) {
    var cut = 0, seen = 0;
    while (seen < PREVIEW_LINES && cut >= 0 && cut < text.length) {
      cut = text.indexOf("\n", cut + (seen ? 1 : 0));
      seen++;
    }
    cut = cut < 0 ? text.length : cut;
    cut = Math.min(cut, PREVIEW_CHARS);
    if (cut >= text.length) return el("div", "snap-text", text);
    var box = el("div", "snap-long");
    var preview = el("div", "snap-text", text.slice(0, cut));
    var all = button("Show all " + plural(lines, "line", "lines") + " (" +
                     plural(text.length, "character", "characters") + ")", "snap-more");
    all.addEventListener("click", function () {
      box.replaceChildren(chunkedText(text, "snapshot snap-text"));
    });
    preview.append(el("span", "muted", " …"));
    box.append(preview, all);
    return box;
  }

  // A table (CSV or records) with its search, and a switch to the field's text.
  function tableField(key, index, data, what, textOf) {
    var field = el("div", "snap-field snap-table-field");
    var line = head(key, index, what);
    var asText = button("Show as text", "snap-as-text");
    asText.setAttribute("aria-pressed", "false");
    line.append(asText);
    var table = new Table(data, key === null ? "table" : String(key));
    var textView = null;
    asText.addEventListener("click", function () {
      var showText = asText.getAttribute("aria-pressed") !== "true";
      asText.setAttribute("aria-pressed", String(showText));
      if (showText && !textView) {
        var source = textOf();
        textView = el("div", "snap-table-text");
        textView.append(longText(source, lineCount(source)));
        field.append(textView);
      }
      if (textView) textView.hidden = !showText;
      table.tools.hidden = table.scroller.hidden = showText;
    });
    field.append(line, table.tools, table.scroller);
    return field;
  }

  // ------------------------------------------------------------------ the viewer

  // `value` once the browser has painted a frame: receiving, parsing and drawing a big snapshot
  // are separate tasks, none holding a frame for all of them.
  function afterPaint(value) {
    return new Promise(function (done) {
      requestAnimationFrame(function () { setTimeout(function () { done(value); }, 0); });
    });
  }

  function Viewer(box) {
    this.box = box;
    this.body = box.querySelector("[data-snapshot-body]");
    this.status = box.querySelector("[data-snapshot-status]");
    this.toggle = box.querySelector("[data-snapshot-toggle]");
    this.views = box.querySelector("[data-snapshot-views]");
    this.size = box.dataset.size;
    this.loaded = null;   // the promise of {text, value}: one fetch per page
    this.shown = false;
    this.panes = {};
    var self = this;
    this.toggle.addEventListener("click", function () { self.shown ? self.hide() : self.show(); });
    this.views.querySelectorAll("[data-snapshot-view]").forEach(function (b) {
      b.addEventListener("click", function () { self.pick(b.dataset.snapshotView); });
    });
    if (box.hasAttribute("data-inline")) this.show();
  }

  Viewer.prototype.load = function () {
    if (this.loaded) return this.loaded;
    var self = this;
    this.body.setAttribute("aria-busy", "true");
    this.status.textContent = "Loading snapshot… (" + this.size + ")";
    this.loaded = fetch(this.box.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(afterPaint)
      .then(function (text) { return { text: text, value: JSON.parse(text) }; })
      .then(afterPaint);
    this.loaded.catch(function () { self.loaded = null; });  // a failed fetch may be retried
    return this.loaded;
  };

  Viewer.prototype.show = function () {
    var self = this;
    this.toggle.disabled = true;
    this.load().then(function (snapshot) {
      self.snapshot = snapshot;
      self.error(null);
      self.shown = true;
      self.body.hidden = self.views.hidden = false;
      self.toggle.textContent = "Hide the snapshot";
      self.status.textContent = "";
      self.pick(self.view || "tree");
    }, function (failure) {
      self.error("The snapshot could not be loaded (" + failure.message + "). Try again, or download the exact bytes.");
      self.status.textContent = "";
    }).finally(function () {
      self.body.setAttribute("aria-busy", "false");
      self.toggle.disabled = false;
    });
  };

  Viewer.prototype.hide = function () {
    this.shown = false;
    this.body.hidden = this.views.hidden = true;
    this.toggle.textContent = "Show the snapshot (" + this.size + ")";
  };

  Viewer.prototype.error = function (message) {
    if (this.alert) this.alert.remove();
    this.alert = null;
    if (!message) return;
    this.alert = el("p", "snapshot-error", message);
    this.alert.setAttribute("role", "alert");
    this.body.before(this.alert);
  };

  // Switch between the tree and the exact text, each built the first time it is shown.
  Viewer.prototype.pick = function (view) {
    this.view = view;
    if (!this.panes[view]) {
      this.panes[view] = view === "raw" ? this.raw() : this.tree();
      this.body.append(this.panes[view]);
    }
    for (var name in this.panes) this.panes[name].hidden = name !== view;
    this.views.querySelectorAll("[data-snapshot-view]").forEach(function (b) {
      b.setAttribute("aria-pressed", String(b.dataset.snapshotView === view));
    });
  };

  Viewer.prototype.tree = function () {
    var pane = el("div", "snap-tree");
    pane.append(node(null, this.snapshot.value, 0, false));
    return pane;
  };

  // The exact text as received (the bytes that were hashed), searchable by console.js.
  Viewer.prototype.raw = function () {
    var pane = el("div", "snap-raw");
    var tools = el("div", "snapshot-tools");
    var label = el("label", null, "Search in snapshot ");
    var input = el("input");
    input.type = "search";
    input.placeholder = "text to find";
    input.setAttribute("data-snapshot-search", "");
    label.append(input);
    var hits = el("span", "muted small");
    hits.setAttribute("data-snapshot-hits", "");
    tools.append(label, hits);
    var pre = chunkedText(this.snapshot.text, "snapshot");
    pre.setAttribute("data-snapshot", "");
    pane.append(tools, pre);
    return pane;
  };

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-snapshot-viewer]").forEach(function (box) { new Viewer(box); });
  });
})();
