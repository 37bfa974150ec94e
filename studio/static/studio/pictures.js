// Avatars studio: small helpers for pages of pictures. Every page works without them.
// - a selection bar counts the ticked images and keeps the order they were ticked in,
//   and, where the pictures come a page at a time, the ticks of the other pages; what gets
//   focus is scrolled clear of it;
// - a set's chosen images can be dragged into a new order (the move buttons stay);
// - the viewer steps through a batch's results with the arrow keys;
// - the "Task details" section stays open across the progress section's live updates;
// - a batch's live progress says when it cannot reach the studio, and is said aloud as
//   tasks come to rest;
// - a form that sends the person back to a place on a page (#task-...) puts focus there;
// - the new-batch form's draft goes once a batch was planned from it;
// - a page a form's answer drew takes the form's place in the tab's history.
(function () {
  "use strict";

  // --- a page a form's answer drew (the form's errors, its second question, a refused
  // photo) -------------------------------------------------------------------------------
  // Back or Forward onto it showed Chromium's "Confirm Form Resubmission" ("…repeat any
  // action this page previously performed"), which a family read as paying twice (a
  // review). Put in the form's place, the entry is the page's address: going back loads
  // it afresh, and the new-batch form comes back from its draft.
  if (document.body && document.body.hasAttribute("data-answers-a-form") && history.replaceState) {
    history.replaceState(history.state, "", location.href);
  }

  // --- ticking, in order, and across pages -------------------------------------------
  // A bar marked data-keep="name" keeps its ticks in this tab (sessionStorage) while the
  // person moves between the pages of the same pictures; those ticked on other pages go
  // with the form as hidden fields. Once the form is sent they are set aside: the next
  // page brings them back only if it shows an error (the server did not take them).
  function ticks(form) {
    return Array.from(form.querySelectorAll('input[type=checkbox][name=assets]'));
  }

  function keptUnder(form) {
    var bar = form.querySelector("[data-selection][data-keep]");
    return bar ? "avatars:ticks:" + bar.getAttribute("data-keep") : "";
  }

  function kept(key) {
    var value = key ? sessionStorage.getItem(key) : null;
    return value ? value.split(",") : [];
  }

  function keep(key, ids) {
    if (!key) return;
    if (ids.length) sessionStorage.setItem(key, ids.join(","));
    else sessionStorage.removeItem(key);
  }

  function orderOf(form) {
    var field = form.querySelector("[data-order]");
    var ids = field && field.value ? field.value.split(",") : [];
    var here = ticks(form).map(function (box) { return box.value; });
    var checked = ticks(form).filter(function (box) { return box.checked; })
      .map(function (box) { return box.value; });
    // Keep the ticks of other pages and those still standing here, then any the browser
    // restored that the order missed.
    ids = ids.filter(function (id) { return here.indexOf(id) === -1 || checked.indexOf(id) !== -1; });
    checked.forEach(function (id) { if (ids.indexOf(id) === -1) ids.push(id); });
    return ids;
  }

  function elsewhere(form, ids) {
    var here = ticks(form).map(function (box) { return box.value; });
    return ids.filter(function (id) { return here.indexOf(id) === -1; });
  }

  function showSelection(form) {
    var bar = form.querySelector("[data-selection]");
    if (!bar) return;
    var ids = orderOf(form);
    bar.querySelector("[data-order]").value = ids.join(",");
    keep(keptUnder(form), ids);
    var away = elsewhere(form, ids).length;
    var count = bar.querySelector("[data-testid=ticked-count]");
    count.textContent = (ids.length === 0 ? "Nothing ticked yet"
      : ids.length === 1 ? "1 image ticked" : ids.length + " images ticked") +
      (away ? " (" + away + " on other pages)" : "");
    var untick = bar.querySelector("[data-untick]");
    if (untick) untick.hidden = ids.length === 0;
    bar.toggleAttribute("data-empty", ids.length === 0 && away === 0);
    ticks(form).forEach(function (box) {
      var at = ids.indexOf(box.value);
      var label = box.closest("label");
      if (label) label.setAttribute("data-tick", at === -1 ? "" : String(at + 1));
    });
  }

  // The page's first set-up, once opened by a link or a form: not from the tab's history,
  // not reloaded, and not shown again from the back-forward cache (where the browser may
  // put back ticks of its own).
  var opening = true;
  function freshlyOpened() {
    var entry = window.performance && performance.getEntriesByType &&
      performance.getEntriesByType("navigation")[0];
    return opening && Boolean(entry) && entry.type === "navigate";
  }

  function setUpSelection(form) {
    var key = keptUnder(form);
    if (key) {
      var sent = sessionStorage.getItem(key + ":sent");
      if (sent !== null) {
        sessionStorage.removeItem(key + ":sent");
        if (document.querySelector(".messages .error") && !kept(key).length) {
          sessionStorage.setItem(key, sent);
        }
      }
      // What this tab kept is the truth: a page the browser kept in its history may
      // show ticks from before others were ticked, or before the form was sent. A page
      // freshly opened has none of those, so a box ticked there is the person's, ticked
      // before this script arrived (the server ticks none): it stands.
      form.querySelectorAll("input[data-elsewhere]").forEach(function (field) { field.remove(); });
      var ids = kept(key);
      if (freshlyOpened()) {
        ticks(form).forEach(function (box) {
          if (box.checked && ids.indexOf(box.value) === -1) ids.push(box.value);
        });
      }
      form.querySelector("[data-order]").value = ids.join(",");
      ticks(form).forEach(function (box) { box.checked = ids.indexOf(box.value) !== -1; });
    }
    showSelection(form);
  }

  function setUpSelections(root) {
    root.querySelectorAll("[data-selection]").forEach(function (bar) {
      var form = bar.closest("form");
      if (form) setUpSelection(form);
      roomForBar(bar);
    });
  }

  // The stylesheet keeps what gets focus clear of the bar at the screen's foot (scroll
  // padding); the bar grows with what it says and as the screen narrows, so it is measured.
  function roomForBar(bar) {
    if (!window.ResizeObserver || bar.hasAttribute("data-measured")) return;
    bar.setAttribute("data-measured", "");
    var watch = new ResizeObserver(function () {
      if (!bar.isConnected) { watch.disconnect(); return; }  // swapped out by htmx
      var gap = parseFloat(getComputedStyle(bar).bottom) || 0;
      document.documentElement.style.setProperty(
        "--selection-bar-room", Math.ceil(bar.offsetHeight + gap + 8) + "px");
    });
    watch.observe(bar);
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!(box instanceof HTMLInputElement) || box.name !== "assets" || !box.form) return;
    var field = box.form.querySelector("[data-order]");
    if (!field) return;
    var ids = field.value ? field.value.split(",") : [];
    ids = ids.filter(function (id) { return id !== box.value; });
    if (box.checked) ids.push(box.value);
    field.value = ids.join(",");
    showSelection(box.form);
  });

  document.addEventListener("click", function (event) {
    var untick = event.target instanceof Element && event.target.closest("[data-untick]");
    if (!untick || !untick.form) return;
    ticks(untick.form).forEach(function (box) { box.checked = false; });
    untick.form.querySelector("[data-order]").value = "";
    showSelection(untick.form);
    // The button hides itself: focus goes to the count it changed, not to the page's start.
    var count = untick.form.querySelector("[data-testid=ticked-count]");
    if (count) count.focus();
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var key = form instanceof HTMLFormElement ? keptUnder(form) : "";
    if (!key) return;
    var ids = orderOf(form);
    elsewhere(form, ids).forEach(function (id) {
      var field = document.createElement("input");
      field.type = "hidden";
      field.name = "assets";
      field.value = id;
      field.setAttribute("data-elsewhere", "");
      form.appendChild(field);
    });
    sessionStorage.setItem(key + ":sent", ids.join(","));
    sessionStorage.removeItem(key);
  });

  // --- dragging a set's images into order ---------------------------------------------
  var dragged = null;

  function setUpReorder(list) {
    list.addEventListener("dragstart", function (event) {
      dragged = event.target.closest("li[data-asset]");
      if (!dragged) return;
      event.dataTransfer.effectAllowed = "move";
      event.dataTransfer.setData("text/plain", dragged.getAttribute("data-asset"));
      dragged.classList.add("dragging");
    });
    list.addEventListener("dragover", function (event) {
      if (dragged && event.target.closest("li[data-asset]")) event.preventDefault();
    });
    list.addEventListener("dragend", function () {
      if (dragged) dragged.classList.remove("dragging");
      dragged = null;
    });
    list.addEventListener("drop", function (event) {
      var target = event.target.closest("li[data-asset]");
      if (!dragged || !target || target === dragged) return;
      event.preventDefault();
      var items = Array.from(list.children);
      var after = items.indexOf(dragged) < items.indexOf(target);
      list.insertBefore(dragged, after ? target.nextSibling : target);
      postOrder(list);
    });
  }

  function postOrder(list) {
    // The new order goes through the same form path as the move buttons.
    var form = document.getElementById(list.getAttribute("data-reorder"));
    Array.from(list.querySelectorAll("li[data-asset]")).forEach(function (item) {
      var field = document.createElement("input");
      field.type = "hidden";
      field.name = "assets";
      field.value = item.getAttribute("data-asset");
      form.appendChild(field);
    });
    form.submit();
  }

  // --- the viewer's arrow keys -----------------------------------------------------------
  document.addEventListener("keydown", function (event) {
    if (!document.querySelector("[data-viewer]")) return;
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    var where = event.target;
    if (where instanceof HTMLElement && where.closest("input, select, textarea, [contenteditable]")) return;
    var rel = event.key === "ArrowLeft" ? "prev" : event.key === "ArrowRight" ? "next" : "";
    var link = rel && document.querySelector('[data-viewer] a[rel="' + rel + '"]');
    if (link) {
      event.preventDefault();
      link.click();
    }
  });

  // --- "Task details" stays as the person left it ----------------------------------------
  var KEY = "avatars:task-details:" + location.pathname;

  document.addEventListener("toggle", function (event) {
    if (event.target.id === "task-details") {
      sessionStorage.setItem(KEY, event.target.open ? "open" : "");
    }
  }, true);

  function keepDetails() {
    var details = document.getElementById("task-details");
    if (details && sessionStorage.getItem(KEY) === "open") details.open = true;
  }

  function setUp(root) {
    setUpSelections(root);
    root.querySelectorAll("[data-reorder]").forEach(setUpReorder);
    keepDetails();
  }

  // A focused control that an update took away (a task's Cancel, once the task ended): htmx
  // keeps focus only on a control that comes back with the same id. Focus goes instead to
  // the first there of what the control names in data-focus-after (the task's new picture,
  // else its row: two reviews saw focus leave a phone's row for the progress at the top),
  // else to the progress in words, never to the top of the page.
  var lostFocus = null;
  var alsoSay = "";  // what took the place of a control that went (said by sayProgress)
  // Two swaps can overlap (a poll's, and the results' reload it asked for): one that finds
  // focus already gone to the page leaves the other's record be, not cleared (a re-run's
  // focus stayed lost when a task's end reloaded the results too).
  document.addEventListener("htmx:beforeSwap", function () {
    var active = document.activeElement;
    if (active && active !== document.body && active.id) {
      lostFocus = { id: active.id, after: active.getAttribute("data-focus-after") };
    }
  });

  function findFocusAgain() {
    var lost = lostFocus;
    lostFocus = null;
    if (!lost) return;
    if (document.activeElement && document.activeElement !== document.body) return;
    var again = document.getElementById(lost.id);  // the same control, swapped in anew
    if (again) {
      again.focus();
      return;
    }
    var named = (lost.after || "").split(/\s+/).map(function (id) {
      return id && document.getElementById(id);
    });
    var next = named.filter(Boolean)[0] || document.querySelector("[data-focus-fallback]");
    if (next) next.focus();
    // The cancel question went with its offer (the rest reached Ember meanwhile): what took
    // its place is said too, or the person would not learn why it went (a review).
    var instead = lost.id.indexOf("batch-cancel") === 0 &&
      document.getElementById("batch-cancel");
    alsoSay = instead ? instead.textContent.trim() : "";
  }

  // --- the place a form sent the person back to -----------------------------------------
  // A task's Cancel comes back to the batch page at the task's row (#task-...): the browser
  // scrolls there, and focus goes there too, not to the top of the page (a review, far
  // down a phone's list of tasks), opening the task details if they were closed.
  function focusTheFragment() {
    var id = location.hash.slice(1);
    var target = id ? document.getElementById(id) : null;
    if (!target) return;
    var details = target.closest("details");
    if (details && !details.open) details.open = true;
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus();
  }

  // --- progress said aloud -----------------------------------------------------------------
  // A sighted person sees "2 ready" become "3 ready"; a screen reader hears it from a live
  // region that the polls leave in place (the summary is swapped whole, and a region swapped
  // in is not heard). It speaks when a task comes to rest or needs a person, not at each
  // step of the work, and says when the batch is finished (found by a review).
  var RESTING = ["ready", "saved", "checking", "attention", "failed", "cancelled"];
  var heard = null;

  function counted() {
    var words = document.getElementById("progress-words");
    if (!words) return null;
    var counts = {};
    words.querySelectorAll("[data-seg]").forEach(function (segment) {
      counts[segment.getAttribute("data-seg")] = Number(segment.getAttribute("data-n"));
    });
    return { counts: counts, words: words.textContent.trim() };
  }

  function sayProgress() {
    var region = document.getElementById("progress-said");
    var now = counted();
    var extra = alsoSay;
    alsoSay = "";
    if (!region || !now) return;
    var before = heard;
    heard = now;
    if (!before) return;  // the page as it loaded is read as it is
    var moved = RESTING.some(function (key) {
      return (now.counts[key] || 0) !== (before.counts[key] || 0);
    });
    if (!moved && !extra) return;
    var summary = document.getElementById("progress-summary");
    var finished = summary && summary.getAttribute("data-finished") === "true";
    var words = moved ? (finished ? "Batch finished: " : "") + now.words : "";
    region.textContent = [words, extra].filter(Boolean).join(". ");
  }

  // --- progress that cannot be reached ---------------------------------------------------
  // A poll that fails (offline, the server away) changes nothing on the page, which would
  // go on saying "2 in progress · Worker running" as if it were now. It says instead that
  // progress is paused, and that the worker's state is not known; the next poll that gets
  // through replaces the summary and takes the notice away.
  // A poll that gets no answer within its timeout (the page's hx-request) is one too: a
  // server that hangs says nothing at all (found by a review, with the server stopped).
  var UNREACHABLE = "Can't reach Avatars; progress paused. " +
    "It will catch up when the connection is back.";
  var NOT_ANSWERED = "Avatars could not answer just now; progress paused. " +
    "It will catch up when it can.";
  // A 503 is the database out of reach (the page it answers says so): the same cause as
  // the page a person would get, said the same way (a review had two reasons for one).
  var NO_RECORDS = "The studio cannot reach its records just now; progress paused. " +
    "It will catch up when they are back.";

  function polled(event) {
    return event.target instanceof Element && event.target.id === "progress-summary";
  }

  function sayUnreachable(event) {
    var region = document.getElementById("progress-unreachable");
    if (!polled(event) || !region) return;
    // An error answered is not the connection: the server is there, and says so.
    var answered = event.type === "htmx:responseError";
    var status = answered && event.detail.xhr ? event.detail.xhr.status : 0;
    var words = !answered ? UNREACHABLE : status === 503 ? NO_RECORDS : NOT_ANSWERED;
    var worker = event.target.querySelector("[data-testid=worker]");
    if (worker) {
      worker.textContent = answered ? "Worker: not known while Avatars cannot answer"
        : "Worker: not known while Avatars can't be reached";
      worker.classList.add("warn");
    }
    if (region.textContent === words) return;  // said once, not at every failed poll
    var notice = document.createElement("p");
    notice.className = "notice";
    notice.textContent = words;
    region.replaceChildren(notice);
  }

  ["htmx:sendError", "htmx:responseError", "htmx:timeout"].forEach(function (name) {
    document.addEventListener(name, sayUnreachable);
  });
  // Before the swap: afterwards the summary that asked is out of the page, and its events
  // no longer reach the document.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var region = document.getElementById("progress-unreachable");
    if (polled(event) && !event.detail.isError && region) region.replaceChildren();
  });

  // --- the new-batch form's draft, dropped once a batch was planned from it ----------------
  // The batch page says so the one time it answers the form (batch_new.js keeps the draft).
  // Signing out drops it too: the next person in this tab does not find it.
  function dropDraft() {
    try { sessionStorage.removeItem("avatars:batch-draft"); } catch (e) { /* storage off */ }
  }
  if (document.querySelector('meta[name="avatars-draft"][content="planned"]')) dropDraft();
  document.addEventListener("submit", function (event) {
    if (event.target instanceof HTMLFormElement && event.target.classList.contains("signout")) {
      dropDraft();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    setUp(document);
    opening = false;
    focusTheFragment();
    sayProgress();
  });
  // A question asked in place ("Cancel batch…") closes on Escape, focus back on its button.
  document.addEventListener("keydown", function (event) {
    var asked = event.key === "Escape" && event.target instanceof Element &&
      event.target.closest("details.ask-first[open]");
    if (!asked) return;
    asked.open = false;
    asked.querySelector("summary").focus();
  });

  // A set's name being typed when the results reload (its ticks are kept with the bar's).
  var typedName = null;
  document.addEventListener("htmx:beforeSwap", function () {
    var name = document.getElementById("selection-name");
    typedName = name && name.value !== name.defaultValue ? name.value : null;
  });
  // Sections htmx swaps in (the progress and results sections) are set up again.
  document.addEventListener("htmx:afterSettle", function (event) {
    var name = document.getElementById("selection-name");
    if (name && typedName !== null) name.value = typedName;
    typedName = null;
    setUpSelections(document);
    keepDetails();
    findFocusAgain();
    sayProgress();
  });
  window.addEventListener("pageshow", function () { setUpSelections(document); });
})();
