// The transcript page: opens at its target, keeps what the reader looks at in place when earlier
// events are inserted above, expands long messages, and keeps the reading position in the URL so
// that Back and reload return to it. No inline scripts anywhere (strict CSP).
(function () {
  "use strict";
  var transcript = document.querySelector("[data-transcript]");
  if (!transcript) return;
  // The page is rendered again from its URL on Back (no-store): this script places it, not the browser.
  if ("scrollRestoration" in history) history.scrollRestoration = "manual";

  function events() { return transcript.querySelectorAll("[data-sequence]"); }

  // The first event whose top is in the viewport, or the one the viewport's top is inside
  // (binary search: events are in document order).
  function firstVisible() {
    var list = events(), lo = 0, hi = list.length - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (list[mid].getBoundingClientRect().top >= 0) hi = mid - 1; else lo = mid + 1;
    }
    var found = list[lo];
    if (!found || found.getBoundingClientRect().top > window.innerHeight) found = list[lo - 1] || found;
    return found || null;
  }

  function fullyVisible(el) {
    var r = el.getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight;
  }

  // At once (the script is deferred: the page is parsed), before htmx looks for revealed sentinels.
  var target = transcript.querySelector(".event.target");
  if (target) {
    target.scrollIntoView({ block: "start" });
    target.focus({ preventScroll: true });
  }

  // Earlier events go in above: put the event the reader looked at back where it was.
  var anchor = null, anchorTop = 0;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.classList && elt.classList.contains("earlier")) {
      anchor = firstVisible();
      if (anchor) anchorTop = anchor.getBoundingClientRect().top;
    }
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!anchor) return;
    window.scrollBy(0, anchor.getBoundingClientRect().top - anchorTop);
    anchor = null;
  });

  // "Show all (N characters)" and back; a button, so Enter and Space work too.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-expand]");
    if (!button) return;
    var text = document.getElementById(button.getAttribute("aria-controls"));
    if (!text) return;
    var open = button.getAttribute("aria-expanded") !== "true";
    text.classList.toggle("open", open);
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.textContent = open ? "Show less" : button.dataset.label;
    if (!open) button.closest(".event").scrollIntoView({ block: "nearest" });
  });

  // The reading position: ?at=<first fully visible event>, replaced (not pushed) while scrolling.
  var timer = null;
  function remember() {
    timer = null;
    var url = new URL(window.location.href);
    var current = url.searchParams.get("at");
    var shown = current && document.getElementById("seq-" + (current === "end" ? "" : current));
    if (shown && fullyVisible(shown)) return;  // still where the URL says
    var first = firstVisible();
    if (!first) return;
    if (!fullyVisible(first) && first.nextElementSibling && first.nextElementSibling.dataset &&
        first.nextElementSibling.dataset.sequence) first = first.nextElementSibling;
    if (current === first.dataset.sequence) return;
    url.searchParams.set("at", first.dataset.sequence);
    history.replaceState(history.state, "", url.pathname + url.search);
  }
  window.addEventListener("scroll", function () {
    if (timer === null) timer = setTimeout(remember, 250);
  }, { passive: true });
  // Leaving the page (a jump, a link): the place it leaves for is the one to keep, so a pending
  // replacement of this page's URL is dropped.
  function forget() { clearTimeout(timer); timer = null; }
  document.addEventListener("submit", forget);
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("a[href]")) forget();
  });
})();
