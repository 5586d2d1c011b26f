// System charts over time: the telemetry readings (keys that carry their unit, as
// trainforge.hardware.telemetry writes them: cpu_util_pct, ram_used_mib, gpu0_temp_c,
// power_vdd_in_mw, ...) grouped into labelled series on four charts: utilisation (%),
// memory (GiB), temperature (°C) and power (W). A chart appears once the platform gives one
// of its readings, so a CPU-only machine shows no GPU, temperature or power chart. The run
// page feeds it the run's telemetry buckets (the server's /series answer: min/max/last per
// bucket of steps, drawn at the time of each bucket's last sample) and then its live records;
// the System page, its live samples (each its own bucket until there are 1,000 of them).
"use strict";

const TELEMETRY_GROUPS = {
  util: { title: "CPU and GPU utilisation", unit: "%" },
  memory: { title: "Memory (RAM and GPU VRAM)", unit: "GiB" },
  temp: { title: "Temperature", unit: "°C" },
  power: { title: "Power draw", unit: "W" },
};

// [group, series label, factor to the chart's unit] of a telemetry key, or null.
function telemetrySeries(key) {
  let m;
  if (key === "cpu_util_pct") return ["util", "CPU", 1];
  if (key === "gpu_util_pct") return ["util", "GPU", 1];
  if (key === "emc_util_pct") return ["util", "memory controller", 1];
  if ((m = key.match(/^gpu(\d+)_util_pct$/))) return ["util", `GPU${m[1]}`, 1];
  if (key === "process_rss_mib") return ["memory", "this process (RSS)", 1 / 1024];
  if (key === "ram_used_mib") return ["memory", "RAM used", 1 / 1024];
  if (key === "swap_used_mib") return ["memory", "swap used", 1 / 1024];
  if ((m = key.match(/^gpu(\d+)_mem_used_mib$/))) return ["memory", `GPU${m[1]} VRAM used`, 1 / 1024];
  if ((m = key.match(/^gpu(\d+)_temp_c$/))) return ["temp", `GPU${m[1]}`, 1];
  if ((m = key.match(/^temp_(.+)_c$/))) return ["temp", m[1].toUpperCase(), 1];
  if ((m = key.match(/^gpu(\d+)_power_w$/))) return ["power", `GPU${m[1]}`, 1];
  if ((m = key.match(/^power_(.+)_mw$/))) return ["power", m[1] === "total" ? "board total" : m[1].toUpperCase(), 1e-3];
  return null;
}

class TelemetryCharts {
  constructor(container) {
    this.container = container;
    this.charts = {};
    this.start = null;
    this.totals = {};
  }

  _x(time) { return Math.round((time - this.start) * 10) / 10; }

  // One sample: {time (s since the epoch), step (a run's), key: value, ...}; x is seconds
  // since the first sample. A run's sample merges into its step's bucket; a sample without a
  // step (the System page's) takes the next place on the grid.
  add(sample) {
    if (typeof sample.time !== "number") return;
    if (this.start === null) this.start = sample.time;
    this.samples = (this.samples || 0) + 1;
    const x = this._x(sample.time);
    const key = typeof sample.step === "number" ? sample.step : this.samples;
    for (const [name, value] of Object.entries(sample)) {
      if (typeof value !== "number") continue;
      const total = name.match(/^(ram|gpu\d+_mem)_total_mib$/);
      if (total) this.totals[total[1]] = value / 1024;
      const found = telemetrySeries(name);
      if (!found) continue;
      const [group, label, factor] = found;
      this._chart(group).add(label, x, value * factor, key);
    }
  }

  // A run's telemetry from the server: {reading: columns} with the grid's width and origin;
  // `order` lists the readings as the run's records do (a chart's series keep that order).
  setBuckets(series, width, origin, order = []) {
    const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length);
    series = Object.fromEntries(Object.entries(series).sort(([a], [b]) => rank(a) - rank(b)));
    const times = Object.values(series).map((c) => c.time.find((t) => typeof t === "number"))
      .filter((t) => t != null);
    if (!times.length) return;
    if (this.start === null) this.start = Math.min(...times);
    for (const [name, cols] of Object.entries(series)) {
      const total = name.match(/^(ram|gpu\d+_mem)_total_mib$/);
      const lastValue = cols.last[cols.last.length - 1];
      if (total && lastValue != null) this.totals[total[1]] = lastValue / 1024;
      const found = telemetrySeries(name);
      if (!found) continue;
      const [group, label, factor] = found;
      const xs = cols.time.map((t) => (typeof t === "number" ? this._x(t) : null));
      this._chart(group).setBuckets(label, cols, width, origin, xs, factor);
    }
  }

  _chart(group) {
    if (!this.charts[group]) {
      const { title, unit } = TELEMETRY_GROUPS[group];
      const figure = document.createElement("figure");
      figure.dataset.group = group;
      const caption = document.createElement("figcaption");
      caption.textContent = `${title} (${unit})`;
      const canvas = document.createElement("canvas");
      canvas.id = `system-${group}`;
      canvas.width = 480; canvas.height = 220;
      figure.append(caption, canvas);
      // The groups keep one order whatever reading came first.
      const order = Object.keys(TELEMETRY_GROUPS);
      const after = [...this.container.children].find(
        (f) => order.indexOf(f.dataset.group) > order.indexOf(group));
      this.container.insertBefore(figure, after || null);
      this.charts[group] = new LineChart(canvas, [], {
        xLabel: "time (s)", unit, integerX: false,
        format: (v) => Number(v.toPrecision(3)).toString(),
      });
      this.charts[group].caption = caption;
    }
    return this.charts[group];
  }

  draw() {
    const memory = this.charts.memory;
    if (memory && this.totals.ram) {
      memory.caption.textContent = `${TELEMETRY_GROUPS.memory.title} (GiB; RAM total ${this.totals.ram.toFixed(1)} GiB)`;
    }
    Object.values(this.charts).forEach((c) => c.draw());
  }
}
