// The inbox works without this script; with it, times read in the viewer's time zone, the
// "Approve with changes" button waits for a change and says which, and refresh keeps forms.
(function () {
  "use strict";
  var fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  document.querySelectorAll("time[data-at]").forEach(function (t) {
    var at = new Date(Number(t.dataset.at) * 1000);
    var text = t.textContent;
    var rel = t.hasAttribute("data-plain") ? "" : " " + text.slice(text.lastIndexOf("("));
    t.textContent = fmt.format(at) + rel;
    t.title = at.toISOString();
  });
  // a plain decimal written either way ("15.50", "15,5") as digits with no float in between:
  // "15.000000000000000001" is not 15
  function digits(text) {
    var m = /^(-?)0*(\d*)(?:[.,](\d*?)0*)?$/.exec(text);
    return m ? m[1] + (m[2] || "0") + (m[3] ? "." + m[3] : "") : null;
  }
  document.querySelectorAll("form#decision").forEach(function (form) {
    var button = form.querySelector("[data-needs-change]");
    var preview = form.querySelector(".preview");
    var inputs = form.querySelectorAll("[data-proposed]");
    function changed() {
      var out = [];
      inputs.forEach(function (i) {
        var was = i.dataset.proposed, now = i.value.trim();
        var same = now === was || (now !== "" && digits(now) !== null && digits(now) === digits(was));
        if (i.tagName === "SELECT") {  // picked by name: say the names, not the values
          was = i.dataset.proposedName || was;
          now = i.selectedOptions.length ? i.selectedOptions[0].text : now;
        }
        if (!same && !i.readOnly) out.push((i.dataset.label || i.name) + " " + was + " → " + now);
      });
      return out;
    }
    var asked = 0, timer = null, typed = null;
    function values() {
      var query = new URLSearchParams();
      inputs.forEach(function (i) { if (!i.readOnly) query.append(i.name, i.value); });
      return query.toString();
    }
    // the server reads the typed values as the decision will (amounts in the reviewer's
    // locale and currency) and says what they are, or why one cannot be read
    function ask(query) {
      var mine = ++asked;
      fetch(form.action.replace(/decide$/, "preview") + "?" + query, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (said) {
          if (mine !== asked || !said || !preview) return;
          var parts = [];
          if (said.changes.length) parts.push("You will approve with changes: " + said.changes.join("; "));
          if (said.errors.length) parts.push("Cannot be read: " + said.errors.join("; "));
          preview.textContent = parts.join(". ");
          preview.dataset.state = said.errors.length ? "error" : "ready";
        })
        .catch(function () {});
    }
    function update() {
      var c = changed(), query = values();
      if (button) button.disabled = c.length === 0;
      if (query === typed) return;  // a blur on the way to a button: the words stay put
      typed = query;
      if (preview) {
        preview.dataset.state = c.length ? "asking" : "";
        preview.textContent = c.length ? "You will approve with changes: " + c.join("; ") : "";
      }
      clearTimeout(timer);
      if (c.length) timer = setTimeout(function () { ask(query); }, 200);
    }
    inputs.forEach(function (i) { i.addEventListener("input", update); i.addEventListener("change", update); });
    update();
  });
})();
