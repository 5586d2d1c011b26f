// Compare runs: the selected runs' curves overlaid, one colour per run, named in a legend by
// their display names. Each curve comes as the chart's buckets (at most 1,000 of min, max and
// last a run, whatever its length: /api/compare/curves). The server picks the first runs (the two newest, a sweep's best
// trials, or `?run=A&run=B`); the checkboxes change the pick.
"use strict";

(() => {
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const boxes = () => [...document.querySelectorAll("#compare-runs input[type=checkbox]")];
  const KEYS = {
    "compare-loss": ["val_loss"],
    "compare-metric": ["val_accuracy", "val_perplexity", "val_per", "val_wer"],
    "compare-train": ["train_loss"],
  };
  const charts = {};
  for (const id of Object.keys(KEYS)) {
    charts[id] = new LineChart(document.getElementById(id), [], { fetchWindow: windowOf(id) });
  }

  // A drag-zoom asks the server for that step window of every chosen run, finer (raw points
  // when the window holds 1,000 or fewer), as the run page does.
  function windowOf(id) {
    return (lo, hi) => fetchCurvesWindow(
      boxes().filter((b) => b.checked).map((b) => [b.value, b.dataset.label || b.value]),
      KEYS[id], lo, hi);
  }

  function legend(chosen) {
    document.getElementById("compare-legend").replaceChildren(...chosen.map((b, i) => {
      const item = document.createElement("li");
      item.dataset.run = b.value;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = COLORS[i % COLORS.length];
      item.append(swatch, b.dataset.label || b.value);
      return item;
    }));
  }

  async function draw() {
    const chosen = boxes().filter((b) => b.checked);
    legend(chosen);
    const query = chosen.map((b) => `run=${encodeURIComponent(b.value)}`).join("&");
    const response = chosen.length ? await fetch(`/api/compare/curves?${query}`) : null;
    const data = response && response.ok ? await response.json() : {};
    for (const [id, keys] of Object.entries(KEYS)) {
      const chart = charts[id];
      chart.series = chosen.map((b, i) => chart._empty({
        name: b.dataset.label || b.value, color: COLORS[i % COLORS.length] }));
      chosen.forEach((b) => {
        const curves = data[b.value] || {};
        const key = keys.find((k) => curves[k] && curves[k].step && curves[k].step.length);
        if (key) chart.setBuckets(b.dataset.label || b.value, curves[key], curves[key].width);
      });
      chart.draw();
    }
  }

  document.getElementById("smoothing").addEventListener("input", (event) => {
    const weight = Number(event.target.value);
    document.getElementById("smoothing-value").textContent = weight.toFixed(2);
    Object.values(charts).forEach((c) => c.setSmoothing(weight));
  });
  document.getElementById("loss-log").addEventListener("change", (event) => {
    charts["compare-loss"].setLog(event.target.checked);
    charts["compare-train"].setLog(event.target.checked);
  });
  boxes().forEach((b) => b.addEventListener("change", draw));
  window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.draw()));
  draw();
})();
