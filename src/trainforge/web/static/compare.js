// Compare runs: the selected runs' curves overlaid, one colour per run. `?run=A&run=B` in the
// address preselects runs (the Sweeps page links its trials here).
"use strict";

(() => {
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const boxes = () => [...document.querySelectorAll("#compare-runs input[type=checkbox]")];
  const charts = {
    "compare-loss": ["val_loss"],
    "compare-metric": ["val_accuracy", "val_perplexity", "val_per", "val_wer"],
    "compare-train": ["train_loss"],
  };

  async function draw() {
    const chosen = boxes().filter((b) => b.checked).map((b) => b.value);
    const query = chosen.map((r) => `run=${encodeURIComponent(r)}`).join("&");
    const response = await fetch(`/api/compare/curves?${query}`);
    const data = response.ok ? await response.json() : {};
    for (const [id, keys] of Object.entries(charts)) {
      const series = chosen.map((name, i) => ({ name, color: COLORS[i % COLORS.length] }));
      const chart = new LineChart(document.getElementById(id), series);
      chosen.forEach((name) => {
        const curves = data[name] || {};
        const key = keys.find((k) => curves[k] && curves[k].length);
        for (const [x, y] of (key ? curves[key] : [])) chart.add(name, x, y);
      });
      chart.draw();
    }
  }

  const wanted = new URLSearchParams(location.search).getAll("run");
  boxes().forEach((b) => {
    if (wanted.includes(b.value)) b.checked = true;
    b.addEventListener("change", draw);
  });
  draw();
})();
