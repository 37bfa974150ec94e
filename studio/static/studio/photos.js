// Avatars studio: several reference photos chosen at once, uploaded one after another.
// The server takes one photo a request (it holds that one in memory, within the cap), so
// without this script the field takes one photo at a time. With it, the photos go one by
// one, the form says which is on its way, and the page then reloads: what was added is
// said by the page itself, and each photo refused is listed with the reason the studio
// gave, kept in this tab across the reload.
(function () {
  "use strict";

  var KEY = "avatars:refused-photos";
  var form = document.querySelector("form[data-photos]");
  if (!form) return;
  var field = form.querySelector("input[type=file]");
  var status = form.querySelector("[data-photos-status]");
  var several = form.querySelector("[data-photos-several]");
  var limit = Number(form.getAttribute("data-photos-limit")) || Infinity; // bytes
  var limitWords = form.getAttribute("data-photos-limit-words") || "";
  field.multiple = true;
  if (several) several.hidden = false;
  showRefused();

  form.addEventListener("submit", function (event) {
    var files = Array.from(field.files || []);
    if (files.length < 2) return; // one photo: the form's own post
    event.preventDefault();
    form.querySelector("button[type=submit]").disabled = true;
    // Leaving while photos are still on their way stops the rest unsaid: the browser asks
    // first (a review left mid-way with no word).
    window.addEventListener("beforeunload", stillSending);
    sendAll(files).then(function (refused) {
      window.removeEventListener("beforeunload", stillSending);
      if (refused.length) sessionStorage.setItem(KEY, JSON.stringify(refused));
      window.location.assign(window.location.pathname); // the page, with what was added
    });
  });

  function stillSending(event) {
    event.preventDefault();
    event.returnValue = ""; // older browsers ask only when this is set
  }

  function sendAll(files) {
    var refused = [];
    var stopped = ""; // once the studio will take none (signed out, an expired page)
    return files
      .reduce(function (before, file, index) {
        return before.then(function () {
          if (stopped) return refused.push({ name: file.name, reason: stopped });
          status.textContent =
            "Uploading " + (index + 1) + " of " + files.length + ": " + file.name + "…";
          return sendOne(file).then(function (said) {
            if (said.stop) stopped = "Not sent: " + said.stop;
            if (said.reason) refused.push({ name: file.name, reason: said.reason });
          });
        });
      }, Promise.resolve())
      .then(function () {
        return refused;
      });
  }

  // {reason: ""} once the studio took the photo (204), else why not; {stop} too when the
  // studio will take no more (a redirect is how a sign-in that ran out answers; a 403 an
  // expired page).
  function sendOne(file) {
    if (file.size > limit) {
      return Promise.resolve({
        reason: "That photo is too large: the limit is " + limitWords + ". Nothing was uploaded.",
      });
    }
    var body = new FormData();
    body.append("csrfmiddlewaretoken", form.querySelector("[name=csrfmiddlewaretoken]").value);
    body.append("photo", file);
    return fetch(form.action, {
      method: "POST",
      body: body,
      redirect: "manual",
      credentials: "same-origin",
      // A refused photo is then answered with its reason alone: a page would say (and so
      // use up) what the page has to say of the photos taken before it.
      headers: { "X-Avatars-Photos": "one of several" },
    }).then(
      function (response) {
        if (response.status === 204) return { reason: "" };
        if (response.type === "opaqueredirect") {
          var out = "you are no longer signed in. Sign in and choose it again.";
          return { reason: "It was not uploaded: " + out, stop: out };
        }
        var plain = (response.headers.get("Content-Type") || "").indexOf("text/plain") === 0;
        return response.text().then(function (text) {
          var reason = plain ? text.trim() : said(text);
          reason = reason || "It was not uploaded (the studio answered " + response.status + ").";
          return { reason: reason, stop: response.status === 403 ? "the page had expired." : "" };
        });
      },
      function () {
        return { reason: "It was not uploaded: the studio could not be reached." };
      }
    );
  }

  // What a refusal's page says: its alert (too large, too many at once, signed out...).
  function said(html) {
    var page = new DOMParser().parseFromString(html, "text/html");
    var found = page.querySelector("#photo-error, [role=alert]");
    return found ? found.textContent.replace(/\s+/g, " ").trim() : "";
  }

  function showRefused() {
    var stored = sessionStorage.getItem(KEY);
    if (!stored) return;
    sessionStorage.removeItem(KEY);
    var refused = JSON.parse(stored);
    var box = document.createElement("div");
    box.id = "photos-refused";
    box.setAttribute("role", "alert");
    var heading = document.createElement("p");
    heading.className = "error";
    heading.textContent =
      refused.length === 1 ? "1 photo was not uploaded:" : refused.length + " photos were not uploaded:";
    var list = document.createElement("ul");
    refused.forEach(function (photo) {
      var item = document.createElement("li");
      item.className = "error";
      item.textContent = photo.name + ": " + photo.reason;
      list.appendChild(item);
    });
    box.appendChild(heading);
    box.appendChild(list);
    form.appendChild(box);
    // Focus on what was refused: after the reload it was on the page itself (a review).
    box.tabIndex = -1;
    box.focus();
  }
})();
