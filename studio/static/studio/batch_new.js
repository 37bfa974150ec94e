// The new-batch form: the paid-job total as the person types, reference photos that follow
// the ticked subjects, Enter in a field that starts nothing, a button that says what it
// is doing once pressed, and a draft of what was typed that outlives a reload or a sign-in.
// The server counts the same way (BatchForm.job_factors) and has the last word.
(function () {
  "use strict";
  var form = document.querySelector("form.batch-form");
  if (!form) return;
  // The button that names the spend (the form's first, hidden one keeps Enter from paying).
  var button = form.querySelector(".submit button[type=submit]");
  var total = form.querySelector("output.jobs");
  // "This starts 15 paid jobs. Start them?", when the server asked it.
  var question = form.querySelector("[data-testid=confirm-jobs]");

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  function whole(text) {
    // As the server reads a count: digits only, anything else is 0.
    text = String(text || "").trim();
    return /^[0-9]+$/.test(text) ? parseInt(text, 10) : 0;
  }

  function count() {
    var candidates = 0;
    form.querySelectorAll("input.candidates").forEach(function (input) {
      candidates += whole(input.value);
    });
    var frames = form.querySelectorAll("input.frame:checked").length;
    return { candidates: candidates, frames: frames, jobs: candidates * frames };
  }

  // What the server would answer about these counts, in its words (BatchForm, CountField),
  // beside the button as the person types: it named spends the server then refused ("Start
  // 9 paid jobs" past the 8 a provider may have; a review). Not before they type: an empty
  // form is not a mistake, and a form the server answered says it beside the fields.
  var refusal = form.querySelector("[data-testid=job-refusal]");
  var typed = false;

  function refused(c) {
    var said = "";
    form.querySelectorAll("input.candidates").forEach(function (input) {
      var text = input.value.trim();
      if (said) return;
      if (text && !/^[0-9]+$/.test(text)) said = "Enter a whole number, like 2 (0 leaves it out).";
      else if (input.max && whole(text) > whole(input.max)) {
        said = "At most " + whole(input.max) + " candidates a provider.";
      }
    });
    var limit = whole(form.getAttribute("data-max-jobs"));
    if (said) return said;
    if (!c.candidates) return "Choose at least one provider.";
    if (!c.frames) return "Choose at least one frame.";
    if (limit && c.jobs > limit) {
      return "This batch would make " + c.jobs + " tasks; the limit is " + limit + ".";
    }
    return "";
  }

  // Counts the person typed, or the browser or the draft put back (Back, a reload): said
  // about as if typed just now (a re-review's restored 9 went unsaid).
  function counted() {
    return Array.prototype.some.call(form.querySelectorAll("input.candidates"), function (box) {
      var text = box.value.trim();
      return text !== "" && text !== "0";
    });
  }

  function recount() {
    var c = count();
    if (refusal) {
      var why = typed || counted() ? refused(c) : "";
      if (refusal.textContent !== why) refusal.textContent = why;
      refusal.hidden = !why;
      if (why) button.setAttribute("aria-describedby", refusal.id);
      else button.removeAttribute("aria-describedby");
    }
    total.textContent = plural(c.candidates, "candidate") + " × " + plural(c.frames, "frame") +
      " = " + plural(c.jobs, "paid job");
    button.textContent = "Start " + plural(c.jobs, "paid job");
    button.value = String(c.jobs); // the server plans only the number the button named
    // The question holds only for the number it asked about: for another, the server asks
    // again, so it is not left beside it.
    if (question) question.hidden = question.dataset.jobs !== String(c.jobs);
    return c.jobs;
  }

  function followSubjects() {
    var ticked = {};
    var any = false;
    form.querySelectorAll("input[name=subjects]").forEach(function (box) {
      if (box.checked) { ticked[box.value] = true; any = true; }
    });
    form.querySelectorAll(".pick[data-subjects]").forEach(function (pick) {
      var shown = pick.dataset.subjects.trim().split(/\s+/).some(function (id) { return ticked[id]; });
      pick.hidden = !shown;
      if (!shown) pick.querySelector("input").checked = false;
    });
    var hint = form.querySelector(".none-ticked");
    if (hint) hint.hidden = any || !form.querySelector(".pick");
  }

  // --- the draft ---------------------------------------------------------------------------
  // What the person typed is kept in this tab (sessionStorage) as they type, so that a form
  // that opens empty (a reload; the form again after a sign-in that had ended refused it)
  // gets it back. Only the fields they see: never the one-time token (a restored token
  // would be an earlier form's intent) nor the CSRF token, nor "start it again". The
  // batch page planned from the form drops it (pictures.js).
  var DRAFT = "avatars:batch-draft";
  var notice = form.querySelector("[data-testid=draft]");

  function drafted(field) {
    return /^(title|prompt|subjects|references|frames|candidates_\w+)$/.test(field.name);
  }

  // Whose draft it is: another person signed in in this tab (after a sign-out in another
  // tab, or an expired session) never finds it (found by a review).
  var who = form.getAttribute("data-who") || "";

  function saveDraft() {
    var draft = { "": who };
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!drafted(field)) return;
      if (field.type !== "checkbox") { draft[field.name] = field.value; return; }
      draft[field.name] = draft[field.name] || [];
      if (field.checked) draft[field.name].push(field.value);
    });
    try { sessionStorage.setItem(DRAFT, JSON.stringify(draft)); } catch (e) { /* storage off */ }
  }

  function readDraft() {
    var draft = null;
    try { draft = JSON.parse(sessionStorage.getItem(DRAFT) || "null"); } catch (e) { return null; }
    if (draft && typeof draft === "object" && draft[""] === who) return draft;
    try { sessionStorage.removeItem(DRAFT); } catch (e) { /* storage off */ }
    return null;
  }

  function restoreDraft() {
    // Only into a form the server sent empty and the browser did not fill in itself.
    var draft = readDraft();
    var typed = form.elements.prompt.value || form.elements.title.value;
    if (!draft || typeof draft !== "object" || !form.hasAttribute("data-fresh") || typed) return;
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!drafted(field) || !(field.name in draft)) return;
      var value = draft[field.name];
      if (field.type === "checkbox") field.checked = [].concat(value).indexOf(field.value) !== -1;
      else field.value = String(value);
    });
    if (notice) notice.hidden = false;
  }

  if (notice) notice.querySelector("[data-clear-draft]").addEventListener("click", function () {
    try { sessionStorage.removeItem(DRAFT); } catch (e) { /* storage off */ }
    form.reset();
    notice.hidden = true;
    followSubjects();
    recount();
    form.elements.prompt.focus();
  });

  // Enter in a field (a count, the title, a ticked box) sends nothing: only the button that
  // names the spend starts paid jobs. Without this script the form's first, disabled button
  // does the same for the text and number fields.
  // It says so where the server's own notice would be: a review pressed Enter in the title
  // and saw nothing happen at all.
  var enterHint = form.querySelector("[data-testid=enter-hint]");
  form.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.target instanceof HTMLInputElement)) return;
    event.preventDefault();
    if (!enterHint || event.target.type === "checkbox") return;
    enterHint.textContent = "Nothing was started: press \u201c" + button.textContent.trim() +
      "\u201d to start.";
    enterHint.hidden = false;
  });
  form.addEventListener("input", function () {
    typed = true;
    recount();
    saveDraft();
  });
  form.addEventListener("change", function (event) {
    typed = true;
    if (event.target.name === "subjects") followSubjects();
    recount();
    saveDraft();
  });
  form.addEventListener("submit", function () {
    saveDraft(); // kept until the batch page says the batch was planned
    var jobs = recount();
    // One press, one intent: a second press while the first is on its way does nothing.
    button.disabled = true;
    button.textContent = "Starting " + plural(jobs, "paid job") + "…";
  });
  // Back to this page from the next one: the button works again (the server answers a
  // form posted twice with the batch it already planned).
  window.addEventListener("pageshow", function () {
    button.disabled = false;
    followSubjects(); // the browser put the ticks back: show those subjects' photos again
    recount();
  });
  // A form the server answered (a question, an error) holds what was sent: the draft now.
  if (form.hasAttribute("data-fresh")) restoreDraft();
  else saveDraft();
  followSubjects();
  recount();
  // A refused form: the summary of what to fix is read out and in view, even on a phone.
  // A form that asks before paying: its question, beside the button, is (it sat out of
  // view below the fold, and the page looked as if nothing had happened).
  var problems = document.getElementById("problems");
  var twin = form.querySelector("[data-testid=twin]");
  if (problems) problems.focus();
  else if (twin) twin.focus();  // the same batch started minutes ago: asked first
  else if (question) {
    // The question and the button it asks about both in view: focus alone scrolls only as
    // far as the question, leaving the button below the fold on a phone.
    question.focus({ preventScroll: true });
    button.parentElement.scrollIntoView({ block: "nearest" });
    if (question.getBoundingClientRect().top < 0) question.scrollIntoView({ block: "start" });
  }
})();
