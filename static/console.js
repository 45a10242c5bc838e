// Console behaviour. No inline scripts anywhere: this file and htmx are all that run, so a
// strict Content-Security-Policy holds.
(function () {
  "use strict";
  var ZONE_KEY = "bailing.timezone";

  function showTimes(root) {
    var local = localStorage.getItem(ZONE_KEY) === "local";
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.dataset.declared) el.dataset.declared = el.textContent;
      if (local) {
        var d = new Date(el.getAttribute("datetime"));
        if (!isNaN(d)) el.textContent = d.toLocaleString() + " (local)";
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

  // Search inside a loaded snapshot without building a DOM node per value.
  function searchSnapshot(input) {
    var pre = document.querySelector("[data-snapshot]");
    var hits = document.querySelector("[data-snapshot-hits]");
    if (!pre) return;
    var needle = input.value.toLowerCase();
    var text = pre.textContent;
    if (!needle) { if (hits) hits.textContent = ""; return; }
    var lower = text.toLowerCase(), count = 0, first = -1, at = lower.indexOf(needle);
    while (at !== -1 && count < 10000) { if (first < 0) first = at; count++; at = lower.indexOf(needle, at + needle.length); }
    if (hits) hits.textContent = count ? count + (count >= 10000 ? "+" : "") + " found" : "not found";
    if (first >= 0 && pre.firstChild) {
      var range = document.createRange();
      range.setStart(pre.firstChild, first);
      range.setEnd(pre.firstChild, first + needle.length);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var rect = range.getBoundingClientRect();
      pre.scrollTop += rect.top - pre.getBoundingClientRect().top - 40;
    }
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
