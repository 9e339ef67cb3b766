// flagedge console: small progressive enhancements. Every page works without this file.
(function () {
  "use strict";
  // Controls marked data-autosubmit (the Active switches, the project picker) submit their
  // form as soon as they change.
  document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () {
      if (el.form) { el.form.requestSubmit ? el.form.requestSubmit() : el.form.submit(); }
    });
  });
  // Forms marked data-confirm ask before they submit (deletions, revocations).
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { ev.preventDefault(); }
    });
  });
  // Buttons marked data-copy copy the value of the input they name.
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var input = document.getElementById(btn.getAttribute("data-copy"));
      if (!input) { return; }
      input.select();
      if (navigator.clipboard) { navigator.clipboard.writeText(input.value); } else { document.execCommand("copy"); }
      btn.textContent = "Copied";
      setTimeout(function () { btn.textContent = "Copy"; }, 1500);
    });
  });
  // Parts of a page that take a while are loaded once it is shown: after a save, the
  // data-rollout placeholder becomes the line saying on how many edges the change is live (the
  // server waits for the edges in that request, not while rendering the page); on a flag's
  // page, the data-fragment placeholder becomes the "who would get it" counts, which scan the
  // stored persons.
  document.querySelectorAll("[data-rollout], [data-fragment]").forEach(function (el) {
    var src = el.getAttribute("data-rollout") || el.getAttribute("data-fragment");
    fetch(src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (res) { return res.ok ? res.text() : Promise.reject(res.status); })
      .then(function (html) { el.outerHTML = html; })
      .catch(function () { /* the placeholder's link stays */ });
  });
})();
