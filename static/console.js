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

  // Search inside a snapshot's text (spread over chunk elements: snapshot.js's exact-text view,
  // or the snapshot.html fragment): count the hits in the whole text, select the first across its
  // text nodes, scroll it into view.
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

  // An open approval queue (approvals.html, several approvers at work) asks every few seconds
  // which of its rows are still to be decided: the others leave, the count follows, arrivals at
  // the end are added (oldest first) or announced, and one that landed between shown rows (a
  // slow writer's older timestamp) is announced too, so nothing pending goes unseen.
  function liveQueue(box) {
    var seconds = Number(box.dataset.liveSeconds) || 5, max = Number(box.dataset.liveMax) || 2000, busy = false;
    var notice = document.querySelector("[data-queue-notice]");
    var counter = document.querySelector("[data-queue-count]");
    function announce(texts, reload) {
      if (!notice || !texts.length) return;
      notice.textContent = texts.join(" ") + " ";
      if (reload) {
        var link = document.createElement("a");
        link.href = window.location.href;
        link.textContent = "Show them";
        notice.appendChild(link);
      }
    }
    function tick() {
      if (busy || document.hidden) return;
      var shown = Array.prototype.slice.call(box.querySelectorAll("tr[data-key]"), 0, max);
      var url = new URL(box.dataset.liveUrl, window.location.href);
      if (shown.length) {
        url.searchParams.set("first", shown[0].dataset.key);
        url.searchParams.set("last", shown[shown.length - 1].dataset.key);
      }
      busy = true;
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (!data) { busy = false; return; }
          var keep = new Set(data.ids), known = new Set(), left = 0;
          shown.forEach(function (row) {
            known.add(row.dataset.approvalId);
            if (!keep.has(row.dataset.approvalId)) { row.remove(); left++; }
          });
          if (counter) counter.textContent = data.count;
          var between = data.ids.filter(function (id) { return !known.has(id); }).length;
          var said = left ? [left + (left === 1 ? " approval was" : " approvals were") + " decided elsewhere or expired and left the list."] : [];
          var more = box.querySelector("tr.more") !== null;
          // Arrivals at the end of an oldest-first page that shows the queue's end are added.
          if (shown.length && !more && data.after_last > 0 && !box.hasAttribute("data-newest-first") && window.htmx) {
            var rowsUrl = new URL(box.dataset.rowsUrl, window.location.href);
            rowsUrl.searchParams.set("cursor", shown[shown.length - 1].dataset.key);
            announce(said, false);
            return window.htmx.ajax("GET", rowsUrl.toString(), { target: box.querySelector("tbody"), swap: "beforeend" })
              .then(function () { busy = false; }, function () { busy = false; });
          }
          // Anything else waiting that this page does not show (arrivals at the top of a newest-first
          // page, an approval that landed between or above the rows shown) is announced with a reload.
          var unseen = shown.length ? between + data.before_first + (more ? 0 : data.after_last) : data.count;
          if (unseen) said.push(unseen + (unseen === 1 ? " more approval is" : " more approvals are") + " waiting that this page does not show.");
          announce(said, unseen > 0);
          busy = false;
        })
        .catch(function () { busy = false; });
    }
    window.setInterval(tick, seconds * 1000);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) tick(); });
  }

  // The task create form (tasks_new.html): a picked session narrows the workspaces to those it may
  // use and replaces the ids typed by hand; the deadline typed in local time is sent as UTC; more
  // member rows come from the form's template. Without JavaScript the server checks the same.
  function syncMember(fieldset) {
    var pick = fieldset.querySelector("[data-session-pick]");
    var workspace = fieldset.querySelector("[data-workspace]");
    if (!pick || !workspace) return;
    var chosen = pick.options[pick.selectedIndex];
    var routes = chosen && chosen.value ? (chosen.dataset.routes || "").split(",") : null;
    Array.prototype.forEach.call(workspace.options, function (option) {
      var allowed = !option.value || !routes || routes.indexOf("*") >= 0 || routes.indexOf(option.value) >= 0;
      option.disabled = !allowed;
      option.hidden = !allowed;
    });
    if (workspace.selectedOptions.length && workspace.selectedOptions[0].disabled) workspace.value = "";
    if (routes && !workspace.value) {
      var usable = Array.prototype.filter.call(workspace.options, function (o) { return o.value && !o.disabled; });
      if (usable.length === 1) workspace.value = usable[0].value;
    }
    fieldset.querySelectorAll("[data-by-hand] input").forEach(function (input) { input.disabled = Boolean(routes); });
  }

  function syncDeadline(input) {
    var hidden = document.querySelector("[data-deadline-utc]");
    var note = document.querySelector("[data-deadline-note]");
    if (!hidden) return;
    var moment = input.value ? new Date(input.value) : null;  // a datetime-local value is local time
    hidden.value = moment && !isNaN(moment) ? moment.toISOString() : "";
    if (note) note.textContent = hidden.value ? "Stored as " + hidden.value.replace(".000Z", "Z") + " (UTC). No new call is dispatched at or after the deadline."
                                              : "No deadline: leave empty for none.";
  }

  function taskForm(form) {
    var box = form.querySelector("[data-members]");
    var template = form.querySelector("template[data-member-template]");
    var add = form.querySelector("[data-add-member]");
    form.querySelectorAll("[data-member]").forEach(syncMember);
    form.addEventListener("change", function (event) {
      if (event.target.matches("[data-session-pick]")) syncMember(event.target.closest("[data-member]"));
    });
    var deadline = form.querySelector("[data-local-deadline]");
    if (deadline) {
      if (deadline.value) syncDeadline(deadline);
      deadline.addEventListener("input", function () { syncDeadline(deadline); });
      deadline.addEventListener("change", function () { syncDeadline(deadline); });
    }
    if (!box || !template || !add) return;
    add.hidden = false;
    add.addEventListener("click", function () {
      var count = box.querySelectorAll("[data-member]").length;
      if (count >= Number(box.dataset.max || 64)) return;
      var holder = document.createElement("div");
      holder.innerHTML = template.innerHTML.replace(/__i__/g, String(count));
      var row = holder.firstElementChild;
      row.querySelector("legend").textContent = "Member " + (count + 1);
      box.appendChild(row);
      syncMember(row);
      row.querySelector("select").focus();
      if (count + 1 >= Number(box.dataset.max || 64)) add.hidden = true;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    showTimes(document);
    var tasks = document.querySelector("[data-task-form]");
    if (tasks) taskForm(tasks);
    var queue = document.querySelector("[data-queue]");
    if (queue) liveQueue(queue);
    // A checkbox the approver sets once ("then open the next approval") stays as they left it.
    document.querySelectorAll("input[type=checkbox][data-remember]").forEach(function (box) {
      box.checked = localStorage.getItem(box.dataset.remember) === "1";
      box.addEventListener("change", function () { localStorage.setItem(box.dataset.remember, box.checked ? "1" : "0"); });
    });
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
