// Polls the JSON endpoint and swaps the report body in place; keeps the scroll position.
(function () {
  var refreshMs = Number(document.body.dataset.refreshMs || 3000);
  var lastVersion = document.body.dataset.version || "";
  function tick() {
    fetch("api/state", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        var sub = document.getElementById("sub");
        sub.textContent = s.path + " · live · last step " + (s.last_step === null ? "-" : s.last_step) +
          " · " + s.alerts + " alerts · updated " + new Date(s.updated * 1000).toLocaleTimeString();
        if (s.version !== lastVersion) {
          lastVersion = s.version;
          document.getElementById("content").innerHTML = s.html;
        }
      })
      .catch(function (e) {
        document.getElementById("sub").textContent = "dashboard unreachable: " + e;
      })
      .finally(function () { setTimeout(tick, refreshMs); });
  }
  tick();
})();
