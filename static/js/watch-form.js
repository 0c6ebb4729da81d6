/* The watch form, nicer with JavaScript (it works without): show only the chosen trigger's
   parameter, and say at once when a target is below the 90-day low. The server says the
   same after saving; every word here comes from the page, already translated. */
(function () {
  "use strict";
  document.querySelectorAll("form[data-watch-form]").forEach(function (form) {
    var trigger = form.querySelector("select[name=trigger]");
    var target = form.querySelector("input[name=target_price]");
    var perUnit = form.querySelector("input[name=use_unit_price]");
    var afterPoints = form.querySelector("input[name=after_points]");
    var hint = form.querySelector("[data-low-hint]");
    if (!trigger) return;

    function showFields() {
      form.querySelectorAll("[data-for]").forEach(function (field) {
        var kinds = field.dataset.for.split(" ");
        field.hidden = kinds.indexOf(trigger.value) === -1;
      });
      checkTarget();
    }

    function number(text) {
      // Full-width digits and ¥ / 円 / commas, as people type them; NFKC like the server.
      var plain = text.normalize("NFKC").replace(/[¥\\円,、\s]/g, "");
      return /^[0-9]+$/.test(plain) ? Number(plain) : NaN;
    }

    function checkTarget() {
      if (!target || !hint) return;
      var unit = perUnit && perUnit.checked;
      // After points, the low to compare with is the 90-day low after points.
      var net = afterPoints && afterPoints.checked ? "Net" : "";
      var low = Number(form.dataset[(unit ? "lowUnit" : "lowPack") + net]);
      var message = form.dataset[(unit ? "msgBelowUnit" : "msgBelowPack") + net];
      var value = number(target.value);
      var relevant = !target.closest("[data-for]").hidden;
      var below = relevant && low > 0 && value > 0 && value < low && message;
      hint.hidden = !below;
      hint.textContent = below ? message : "";
    }

    trigger.addEventListener("change", showFields);
    if (target) target.addEventListener("input", checkTarget);
    if (perUnit) perUnit.addEventListener("change", checkTarget);
    if (afterPoints) afterPoints.addEventListener("change", checkTarget);
    showFields();
  });
})();
