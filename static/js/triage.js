// Keyboard-first review (templates/triage/_review.html) and the triage list's "select all".
// Listeners sit on document and every key re-reads the page, so they keep working when htmx
// swaps in the next trajectory; the undo history and the highlighted step belong to one item.
(function () {
  "use strict";

  let history = [];
  let cursor = -1;
  let shown = null;
  let busy = false;

  const root = () => document.getElementById("review");
  const canEdit = () => root().hasAttribute("data-can-edit");
  const steps = () => Array.from(root().querySelectorAll(".trace > li.step"));
  const toggles = () => Array.from(root().querySelectorAll("label[data-bucket]"));
  const stepNumber = (item) => Number(item.id.slice("step-".length));
  const parts = (label) => ({
    box: label.querySelector("input[type=checkbox]"),
    step: label.querySelector("input[type=hidden]"),
  });

  function marked() {
    const value = root().dataset.marked;
    return value === undefined || value === "" ? null : Number(value);
  }

  function setMarked(value) {
    root().dataset.marked = value === null ? "" : String(value);
  }

  function snapshot(label) {
    const { box, step } = parts(label);
    return { label, checked: box.checked, step: step.value === "" ? null : Number(step.value) };
  }

  function setBucket(label, checked, step) {
    const { box, step: stepInput } = parts(label);
    box.checked = checked;
    stepInput.value = checked && step !== null && step !== undefined ? String(step) : "";
  }

  function chip(label) {
    const element = document.createElement("span");
    element.className = "bucket-chip on-step";
    element.style.setProperty("--bucket", label.style.getPropertyValue("--bucket"));
    element.textContent = label.querySelector(".name").textContent;
    return element;
  }

  // Draw the state the inputs hold: highlighted and marked steps, bucket buttons, chips on steps.
  function render() {
    const mark = marked();
    steps().forEach((item, position) => {
      item.classList.toggle("current", position === cursor);
      item.classList.toggle("marked", stepNumber(item) === mark);
      item.querySelectorAll(".on-step").forEach((old) => old.remove());
    });
    toggles().forEach((label) => {
      const { box, step } = parts(label);
      const at = box.checked && step.value !== "" ? step.value : "";
      label.classList.toggle("on", box.checked);
      label.querySelector(".step-ref").textContent = at ? "#" + at : "";
      const target = at ? document.getElementById("step-" + at) : null;
      if (target) target.querySelector(".step-head").appendChild(chip(label));
    });
    const out = root().querySelector("[data-marked-step]");
    if (out) out.textContent = mark === null ? "none" : "#" + mark;
  }

  // A new trajectory on the page (first load or an htmx swap): start its own history.
  function reset() {
    const page = root();
    if (!page || page.dataset.trajectory === shown) return;
    shown = page.dataset.trajectory;
    history = [];
    const mark = marked();
    cursor = mark === null ? -1 : steps().findIndex((item) => stepNumber(item) === mark);
    if (steps().length) render();
  }

  function highlight(position, block) {
    const items = steps();
    if (!items.length) return;
    cursor = Math.max(0, Math.min(items.length - 1, position));
    render();
    items[cursor].scrollIntoView({ block: block });
  }

  function goTo(stepIndex) {
    highlight(steps().findIndex((item) => stepNumber(item) === stepIndex), "center");
  }

  function turnedOnStep(label) {
    const suggested = label.dataset.suggestedStep;
    return marked() ?? (suggested === undefined ? null : Number(suggested));
  }

  function toggle(key) {
    const label = toggles().find((candidate) => candidate.dataset.bucketKey === key);
    if (!label) return;
    history.push({ buckets: [snapshot(label)], marked: marked() });
    setBucket(label, !parts(label).box.checked, turnedOnStep(label));
    render();
  }

  // Mark the highlighted step (again: unmark); buckets that are on without a step take it.
  function mark() {
    const item = steps()[cursor];
    if (!item) return;
    history.push({ buckets: toggles().map(snapshot), marked: marked() });
    const index = stepNumber(item);
    const next = marked() === index ? null : index;
    setMarked(next);
    if (next !== null) {
      toggles().forEach((label) => {
        const { box, step } = parts(label);
        if (box.checked && step.value === "") step.value = String(next);
      });
    }
    render();
  }

  function undo() {
    const entry = history.pop();
    if (!entry) {
      const previous = root().dataset.previousUrl;
      if (previous) window.location.assign(previous);
      return;
    }
    entry.buckets.forEach((state) => setBucket(state.label, state.checked, state.step));
    setMarked(entry.marked);
    render();
  }

  function submit(action) {
    const form = root().querySelector("form.review-form");
    if (!form || busy) return;
    form.querySelector("input[type=hidden][name=action]").value = action;
    form.requestSubmit();
  }

  // Open the correction form at the highlighted step, else the marked one, else the failing step.
  function correct() {
    const link = root().querySelector("a[data-correct]");
    if (!link) return;
    const item = steps()[cursor];
    const step = item ? stepNumber(item) : marked();
    const url = new URL(link.href);
    if (step !== null) url.searchParams.set("step", String(step));
    window.location.assign(url.toString());
  }

  function focusNote() {
    const note = root().querySelector("textarea[name=note]");
    if (note) note.focus();
  }

  function action(event) {
    const key = event.key;
    if (key === "j" || key === "ArrowDown") return () => highlight(cursor + 1, "nearest");
    if (key === "k" || key === "ArrowUp") return () => highlight(cursor - 1, "nearest");
    if (!canEdit()) return null;
    if (/^[0-9]$/.test(key)) return () => toggle(key);
    if (key === "m") return mark;
    if (key === "u") return undo;
    if (key === "s") return () => submit("skip");
    if (key === "n") return focusNote;
    if (key === "c") return correct;
    // Enter on a link or button keeps its own meaning.
    if (key === "Enter" && !/^(A|BUTTON|SUMMARY)$/.test(event.target.tagName)) return () => submit("save");
    return null;
  }

  flywheelShortcuts({
    active: () => Boolean(root()),
    action,
    onKey: reset,
    onTypingKey: (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && canEdit()) {
        event.preventDefault();
        submit("save");
      }
    },
  });

  // Mouse use goes through the same history, so "u" undoes a click too.
  document.addEventListener("change", (event) => {
    const label = event.target.closest && event.target.closest("#review label[data-bucket]");
    if (!label || event.target.type !== "checkbox") return;
    reset();
    const { box, step } = parts(label);
    history.push({ buckets: [{ label, checked: !box.checked, step: step.value === "" ? null : Number(step.value) }], marked: marked() });
    setBucket(label, box.checked, box.checked ? turnedOnStep(label) : null);
    render();
  });

  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("[data-goto-step]");
    if (link && root()) {
      event.preventDefault();
      reset();
      goTo(Number(link.dataset.gotoStep));
    }
    const all = event.target.closest && event.target.closest("[data-select-all]");
    if (all) {
      const form = all.closest("form");
      form.querySelectorAll("input[type=checkbox][name=ids]").forEach((box) => { box.checked = all.checked; });
    }
  });

  // A refused save (400) is not swapped in; say why beside the buttons.
  document.addEventListener("htmx:responseError", (event) => {
    const out = root() && root().querySelector("[data-save-error]");
    if (out) out.textContent = event.detail.xhr.responseText;
  });
  document.addEventListener("htmx:beforeRequest", () => { busy = true; });
  document.addEventListener("htmx:afterRequest", () => { busy = false; });
  document.addEventListener("htmx:afterSwap", reset);
  document.addEventListener("htmx:load", reset);
  document.addEventListener("DOMContentLoaded", reset);
})();
