// Keyboard-first marking on a reward profile (templates/rewards/run_detail.html).
// j/k move between outputs, a/d agree or disagree (through the row's own buttons, so htmx posts
// the mark exactly as a click would) and move on, n writes a note, ? shows the keys.
// The current output is remembered by id, so it survives htmx swapping the marked row. The dispatch
// itself is static/js/shortcuts.js.
(function () {
  "use strict";

  let currentId = null;

  const list = () => document.getElementById("outputs");
  const rows = () => Array.from(list().querySelectorAll("li.output"));
  const canMark = () => list().hasAttribute("data-can-mark");

  function position() {
    return rows().findIndex((row) => row.dataset.output === currentId);
  }

  function render() {
    rows().forEach((row) => row.classList.toggle("current", row.dataset.output === currentId));
  }

  function highlight(index) {
    const items = rows();
    if (!items.length) return;
    const row = items[Math.max(0, Math.min(items.length - 1, index))];
    currentId = row.dataset.output;
    render();
    row.scrollIntoView({ block: "nearest" });
  }

  function current() {
    if (currentId === null) highlight(0);
    return rows()[position()] || null;
  }

  function mark(verdict) {
    const row = current();
    if (!row) return;
    const button = row.querySelector(`button[name=verdict][value=${verdict}]`);
    if (!button) return;
    const next = rows()[position() + 1];
    button.click();
    if (next) highlight(position() + 1);
  }

  function focusNote() {
    const row = current();
    const note = row && row.querySelector("input[name=note]");
    if (note) note.focus();
  }

  function action(key) {
    if (key === "j" || key === "ArrowDown") return () => highlight(position() + 1);
    if (key === "k" || key === "ArrowUp") return () => highlight(position() - 1);
    if (!canMark()) return null;
    if (key === "a") return () => mark("agree");
    if (key === "d") return () => mark("disagree");
    if (key === "n") return focusNote;
    return null;
  }

  flywheelShortcuts({
    active: () => Boolean(list()),
    action: (event) => action(event.key),
    onTypingKey: (event) => {
      // Enter in a note saves nothing by itself: the note goes with the next a / d.
      if (event.key === "Enter" && event.target.name === "note") event.preventDefault();
    },
  });

  // A click on a row makes it the current one; a swapped-in row keeps the highlight.
  document.addEventListener("click", (event) => {
    const row = event.target.closest && event.target.closest("#outputs li.output");
    if (row) {
      currentId = row.dataset.output;
      render();
    }
  });
  // htmx:load fires on the swapped-in row itself (the old one, the swap target, has left the page).
  document.addEventListener("htmx:load", render);
})();
