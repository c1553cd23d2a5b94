// The inbox works without this script; with it, times read in the viewer's time zone, the
// "Approve with changes" button waits for a change and says which, and refresh keeps forms.
(function () {
  "use strict";
  var fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  document.querySelectorAll("time[data-at]").forEach(function (t) {
    var at = new Date(Number(t.dataset.at) * 1000);
    var text = t.textContent;
    var rel = text.slice(text.indexOf("("));
    t.textContent = fmt.format(at) + " " + rel;
    t.title = at.toISOString();
  });
  document.querySelectorAll("form#decision").forEach(function (form) {
    var button = form.querySelector("[data-needs-change]");
    var preview = form.querySelector(".preview");
    var inputs = form.querySelectorAll("[data-proposed]");
    function changed() {
      var out = [];
      inputs.forEach(function (i) {
        var was = i.dataset.proposed, now = i.value.trim();
        var same = now === was || (now !== "" && !isNaN(Number(now)) && Number(now) === Number(was));
        if (!same && !i.readOnly) out.push((i.dataset.label || i.name) + " " + was + " → " + now);
      });
      return out;
    }
    function update() {
      var c = changed();
      if (button) button.disabled = c.length === 0;
      if (preview) preview.textContent = c.length ? "You will approve with changes: " + c.join("; ") : "";
    }
    inputs.forEach(function (i) { i.addEventListener("input", update); i.addEventListener("change", update); });
    update();
  });
})();
