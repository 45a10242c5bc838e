// Console behaviour. No inline scripts anywhere: this file and htmx are all that run, so a
// strict Content-Security-Policy holds.
(function () {
  "use strict";
  var ZONE_KEY = "bailing.timezone";
  var PRECISE = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
                  second: "2-digit", fractionalSecondDigits: 3 };

  function showTimes(root) {
    var local = localStorage.getItem(ZONE_KEY) === "local";
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.dataset.declared) el.dataset.declared = el.textContent;
      if (local) {
        var d = new Date(el.getAttribute("datetime"));
        // A millisecond time (a run's timeline) keeps its milliseconds in local time too.
        var options = el.hasAttribute("data-precise") ? PRECISE : undefined;
        if (!isNaN(d)) el.textContent = d.toLocaleString(undefined, options) + " (local)";
      } else {
        el.textContent = el.dataset.declared;
      }
    });
    var toggle = document.getElementById("zone-toggle");
    if (toggle) toggle.textContent = "Times: " + (local ? "local" : document.body.dataset.zone);
  }

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(target.tagName));
  }

  // j / k move through the rows of a list, Enter opens the selected one; ignored while typing.
  function navigate(event) {
    if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey) return;
    var rows = Array.prototype.slice.call(document.querySelectorAll("[data-nav-list] tr[data-href]"));
    if (!rows.length) return;
    var current = rows.findIndex(function (r) { return r.classList.contains("selected"); });
    if (event.key === "j" || event.key === "k") {
      var next = event.key === "j" ? Math.min(current + 1, rows.length - 1) : Math.max(current - 1, 0);
      if (current >= 0) rows[current].classList.remove("selected");
      rows[next].classList.add("selected");
      rows[next].scrollIntoView({ block: "nearest" });
      event.preventDefault();
    } else if (event.key === "Enter" && current >= 0) {
      window.location.assign(rows[current].dataset.href);
      event.preventDefault();
    }
  }

  // Search inside a loaded snapshot (its text spread over chunk elements, see snapshot.html):
  // count the hits in the whole text, select the first across its text nodes, scroll it into view.
  function searchSnapshot(input) {
    var pre = document.querySelector("[data-snapshot]");
    var hits = document.querySelector("[data-snapshot-hits]");
    if (!pre) return;
    var needle = input.value.toLowerCase();
    var nodes = [], starts = [], text = "";
    var walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      nodes.push(node); starts.push(text.length); text += node.data;
    }
    if (!needle) { if (hits) hits.textContent = ""; return; }
    var lower = text.toLowerCase(), count = 0, first = -1, at = lower.indexOf(needle);
    while (at !== -1 && count < 10000) { if (first < 0) first = at; count++; at = lower.indexOf(needle, at + needle.length); }
    if (hits) hits.textContent = count ? count + (count >= 10000 ? "+" : "") + " found" : "not found";
    if (first < 0) return;
    // The text node holding an offset: the last one starting at or before it.
    function locate(offset, end) {
      var lo = 0, hi = nodes.length - 1;
      while (lo < hi) {
        var mid = (lo + hi + 1) >> 1;
        if (starts[mid] < offset || (!end && starts[mid] === offset)) lo = mid; else hi = mid - 1;
      }
      return [nodes[lo], offset - starts[lo]];
    }
    var range = document.createRange(), from = locate(first, false), to = locate(first + needle.length, true);
    range.setStart(from[0], from[1]);
    range.setEnd(to[0], to[1]);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    // Chunks coming on screen are laid out and may change height: settle over a few frames.
    var frames = 0;
    (function reveal() {
      var rect = range.getBoundingClientRect(), box = pre.getBoundingClientRect();
      if (rect.top < box.top || rect.bottom > box.bottom) pre.scrollTop += rect.top - box.top - 40;
      if (++frames < 4) requestAnimationFrame(reveal);
      else pre.scrollIntoView({ block: "nearest" });
    })();
  }

  document.addEventListener("DOMContentLoaded", function () {
    showTimes(document);
    var toggle = document.getElementById("zone-toggle");
    if (toggle) toggle.addEventListener("click", function () {
      localStorage.setItem(ZONE_KEY, localStorage.getItem(ZONE_KEY) === "local" ? "declared" : "local");
      showTimes(document);
    });
    document.addEventListener("keydown", navigate);
    var timer;
    document.addEventListener("input", function (event) {
      if (event.target.matches("[data-snapshot-search]")) {
        clearTimeout(timer);
        timer = setTimeout(function () { searchSnapshot(event.target); }, 200);
      }
    });
  });
  document.addEventListener("htmx:afterSwap", function (event) { showTimes(event.target); });
})();
