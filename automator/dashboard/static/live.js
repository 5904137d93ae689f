// Keeps a dashboard page current: the server sends the page's content as a
// server-sent "update" event whenever it changes (and comments as
// keepalives); "signedout" means the session ended, "paused" that the page
// is not kept current (too many open: it says why).
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live || !live.hasAttribute("data-live") || !window.EventSource) {
    return;
  }
  function say(text, cls) {
    if (status) {
      status.textContent = text;
      status.className = cls;
    }
  }
  var es = new EventSource(location.pathname + location.search);
  es.addEventListener("update", function (e) {
    live.innerHTML = e.data;
    say("live · updated " + new Date().toLocaleTimeString(), "live");
  });
  es.addEventListener("signedout", function () {
    es.close();
    location.assign("/dashboard/login?next=" + encodeURIComponent(location.pathname + location.search));
  });
  es.addEventListener("paused", function (e) {
    es.close();
    say(e.data, "paused");
  });
  es.onopen = function () { say("live", "live"); };
  es.onerror = function () { say("reconnecting…", "reconnecting"); };
})();
