// The job pages (templates/training/): live charts, static figures, the compare picker, the log tail.
//
// - #job-charts[data-url]: fetch the job's chart JSON ({charts: [{key, title, figure}], points,
//   version, finished}) every two seconds and redraw each chart with Plotly.react until the job is
//   finished; the poll sends the version it drew, and an {unchanged: true} answer redraws nothing.
//   The total number of points goes on the container's data-points.
// - [data-figure="<id>"]: draw the figure in the <script type="application/json" id="<id>"> that
//   Django's json_script wrote (compare and evaluation pages).
// - [data-compare-form]: the Compare button is on once two or more jobs are ticked.
// - [data-autosubmit]: a select in the form submits it when it changes.
// Plotly is the vendored static/vendor/plotly.min.js, loaded (deferred) before this file.
(function () {
  "use strict";

  const POLL_MS = 2000;
  const RETRY_MS = 5000;
  const CONFIG = { displaylogo: false, responsive: true };

  function draw(element, figure) {
    if (!window.Plotly) return;
    Plotly.react(element, figure.data || [], figure.layout || {}, CONFIG);
  }

  // --- Live charts ---------------------------------------------------------------------------

  function chartElement(container, chart, index) {
    let element = container.querySelector(`[data-chart="${CSS.escape(chart.key)}"]`);
    if (!element) {
      element = document.createElement("section");
      element.className = "card chart";
      element.dataset.chart = chart.key;
      element.setAttribute("aria-label", chart.title);
      const plot = document.createElement("div");
      plot.className = "plot";
      element.appendChild(plot);
    }
    // Keep the server's order: a panel that gains its first point slots in where it belongs.
    const here = container.querySelectorAll("[data-chart]")[index];
    if (here !== element) container.insertBefore(element, here || null);
    return element.querySelector(".plot");
  }

  function render(container, body) {
    const empty = container.querySelector("[data-charts-empty]");
    if (empty) empty.hidden = body.charts.length > 0;
    if (empty && !body.charts.length) empty.textContent = "No metrics yet: the charts appear with the first step.";
    body.charts.forEach((chart, index) => draw(chartElement(container, chart, index), chart.figure));
    container.dataset.points = String(body.points);
    container.dataset.finished = String(body.finished);
  }

  function poll(container) {
    const url = new URL(container.dataset.url, window.location.href);
    if (container.dataset.version) url.searchParams.set("version", container.dataset.version);
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`chart: HTTP ${response.status}`);
        return response.json();
      })
      .then((body) => {
        if (!body.unchanged) render(container, body);
        container.dataset.version = body.version;
        if (!body.finished) setTimeout(() => poll(container), POLL_MS);
      })
      .catch(() => setTimeout(() => poll(container), RETRY_MS));
  }

  // --- Static figures ------------------------------------------------------------------------

  function drawStatic(element) {
    const source = document.getElementById(element.dataset.figure);
    if (source) draw(element, JSON.parse(source.textContent));
  }

  // --- The compare picker on the jobs list -----------------------------------------------------

  function updateCompare(form) {
    const ticked = document.querySelectorAll(`input[type=checkbox][form="${form.id}"]:checked`).length;
    const button = form.querySelector("[data-compare-button]");
    const hint = form.querySelector("[data-compare-hint]");
    button.disabled = ticked < 2;
    button.textContent = ticked ? `Compare ${ticked} job${ticked === 1 ? "" : "s"}` : "Compare";
    if (hint) hint.hidden = ticked >= 2;
  }

  // --- The log tail follows the newest line unless the reader scrolled up ---------------------

  const logElement = () => document.querySelector("#job-log pre.log");
  let logAtEnd = true;

  function followLog() {
    const log = logElement();
    if (log && logAtEnd) log.scrollTop = log.scrollHeight;
  }

  document.addEventListener("htmx:oobBeforeSwap", () => {
    const log = logElement();
    if (log) logAtEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
  });
  document.addEventListener("htmx:oobAfterSwap", followLog);

  document.addEventListener("change", (event) => {
    const input = event.target;
    if (input.matches && input.matches("input[type=checkbox][form]")) {
      const form = document.getElementById(input.getAttribute("form"));
      if (form && form.hasAttribute("data-compare-form")) updateCompare(form);
    }
    const auto = input.closest && input.closest("form[data-autosubmit]");
    if (auto && input.tagName === "SELECT") auto.requestSubmit();
  });

  function start() {
    document.querySelectorAll("#job-charts[data-url]").forEach(poll);
    document.querySelectorAll("[data-figure]").forEach(drawStatic);
    document.querySelectorAll("form[data-compare-form]").forEach(updateCompare);
    followLog();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
