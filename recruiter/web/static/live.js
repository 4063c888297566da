// recruiter's dashboard: the parts of a page marked data-live="URL" are read again every
// data-every milliseconds and replaced with what the server renders (escaped HTML).
// A part is not refreshed while the pointer or the focus is inside it (a form being
// filled), nor while the page is hidden.
"use strict";
(function () {
  function refresh(part) {
    if (document.hidden || part.matches(":hover") || part.contains(document.activeElement)) {
      return Promise.resolve();
    }
    return fetch(part.dataset.live, { credentials: "same-origin", cache: "no-store" })
      .then(function (reply) { return reply.ok ? reply.text() : null; })
      .then(function (html) { if (html !== null) { part.innerHTML = html; } })
      .catch(function () { /* the server is away: the next tick tries again */ });
  }
  function follow(part) {
    var every = parseInt(part.dataset.every, 10) || 2000;
    function tick() { refresh(part).then(function () { setTimeout(tick, every); }); }
    setTimeout(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(follow);
  });
})();
