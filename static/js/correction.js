// The correction form (templates/triage/correct.html): Ctrl+Enter (Cmd+Enter) saves from anywhere in the
// form, Escape outside a field goes back to the review, and the fields of the other kind (call or answer)
// are hidden. The tool's select starts focused, so the keyboard path is: c on the review page, edit, Ctrl+Enter.
(function () {
  "use strict";

  const form = () => document.getElementById("correction-form");
  const CALL_FIELDS = ["tool", "arguments"];

  function showKind() {
    const chosen = form().querySelector("input[name=kind]:checked");
    const isCall = !chosen || chosen.value === "call";
    form().querySelectorAll(".field").forEach((field) => {
      const input = field.querySelector("[name]");
      if (!input) return;
      if (CALL_FIELDS.includes(input.name)) field.hidden = !isCall;
      if (input.name === "answer") field.hidden = isCall;
    });
  }

  document.addEventListener("keydown", (event) => {
    if (!form()) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form().requestSubmit();
    } else if (event.key === "Escape" && !/^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName)) {
      window.location.assign(form().dataset.back);
    } else if (event.key === "Escape") {
      event.target.blur();
    }
  });

  document.addEventListener("change", (event) => {
    if (form() && event.target.name === "kind") showKind();
  });

  document.addEventListener("DOMContentLoaded", () => {
    if (!form()) return;
    showKind();
    const first = form().querySelector(".field:not([hidden]) select, .field:not([hidden]) textarea");
    if (first) first.focus();
  });
})();
