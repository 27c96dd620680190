// The keyboard dispatch the keyboard-first pages share (triage review, reward marking).
// `?` opens and closes the page's #shortcut-help dialog; while it is open, or with Ctrl, Cmd or
// Alt held, keys do nothing. A key typed into a text field goes to `onTypingKey` (after Escape
// has left the field); any other key runs what `action(event)` returns, if anything.
"use strict";

window.flywheelShortcuts = function ({ active, action, onTypingKey, onKey }) {
  const TEXT_INPUTS = ["text", "search", "number", "email", "url", "date", "password"];

  function typing(element) {
    if (!element || !element.tagName) return false;
    if (element.isContentEditable || element.tagName === "TEXTAREA" || element.tagName === "SELECT") return true;
    return element.tagName === "INPUT" && TEXT_INPUTS.includes(element.type);
  }

  // showModal focuses the dialog's Close button; after close() the browser moves focus off that
  // hidden button only at its next focus fixup, and an Enter typed before then lands on the
  // button (which keeps Enter for itself) instead of the page. Hand focus back to the page at once.
  function releaseFocus(help) {
    if (help.contains(document.activeElement)) document.activeElement.blur();
  }

  function toggleHelp() {
    const help = document.getElementById("shortcut-help");
    if (!help) return;
    if (help.open) {
      help.close();
      releaseFocus(help);
    } else {
      help.showModal();
    }
  }

  // Escape and the Close button close the dialog without toggleHelp; "close" does not bubble.
  document.addEventListener("close", (event) => {
    if (event.target.id === "shortcut-help") releaseFocus(event.target);
  }, true);

  document.addEventListener("keydown", (event) => {
    if (!active()) return;
    if (onKey) onKey(event);
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      if (onTypingKey) onTypingKey(event);
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "?") {
      event.preventDefault();
      toggleHelp();
      return;
    }
    const help = document.getElementById("shortcut-help");
    if (help && help.open) return;
    const run = action(event);
    if (run) {
      event.preventDefault();
      run();
    }
  });
};
