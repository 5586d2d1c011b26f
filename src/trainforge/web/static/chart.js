// A line chart on a canvas: a few series against the training step (or time), drawn again
// from scratch on every update, with what a reader of TensorBoard expects: the values under
// the pointer, a step range zoomed by dragging (double-click or "Reset zoom" to undo),
// TensorBoard's smoothing (an exponential moving average, debiased as TensorBoard does), a
// log scale, and ticks along the x axis.
//
// A series is held as W&B holds it: at most MAX_BUCKETS buckets of min, max and last value
// on a power-of-two grid (bucket k covers grid keys [origin + k*width, origin + (k+1)*width),
// the key being the step), as the server's /series answers them. The chart draws the `last`
// line and a light min-max band, so a spike in a bucket of 1,024 steps stays visible; a live
// point merges into its bucket, and a series past MAX_BUCKETS doubles its width. Drawing and
// memory cost the same at step 10^6 as at 10^3. A drag-zoom asks `fetchWindow(lo, hi)` (an
// option) for the finer points of the window; "Reset zoom" returns to the whole run.
//
// Written by hand so the app needs no build step or vendored library; uPlot and Chart.js
// were considered, but either would be a vendored file larger than all of the app's own
// scripts together, for a handful of charts (and neither keeps min/max buckets).
"use strict";

// TensorBoard's smoothing (tensorboard/plugins/scalar, `resmoothDataset`): an exponential
// moving average started from zero and divided by (1 - weight^n), so the first points are
// not pulled towards zero. A weight of 0 gives the raw values.
function smoothValues(values, weight) {
  let last = 0;
  let count = 0;
  const allEqual = values.every((v) => v === values[0]);
  return values.map((y) => {
    if (!Number.isFinite(y) || weight <= 0 || allEqual) return y;
    last = last * weight + (1 - weight) * y;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}

// Round numbers for axis ticks: 1, 2 or 5 times a power of ten, about `count` of them.
function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  return ticks;
}

const MAX_BUCKETS = 1000;

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
  "#17becf", "#bcbd22", "#7f7f7f"];

// A bucket: grid index i, the x of its first grid key (x0) and of its last point (x), the
// grid key of its last point, min, max and last value, and its number of points n.
function mergeBuckets(a, b) {
  return { i: a.i, x0: Math.min(a.x0, b.x0), x: b.x, key: b.key, min: Math.min(a.min, b.min),
    max: Math.max(a.max, b.max), last: b.last, n: a.n + b.n };
}

// A series' buckets from the server's columns ({step, time, min, max, last, n}): `xs` are the
// x values when x is not the step (the telemetry charts' time); `factor` scales the values.
function bucketsFrom(cols, width, origin, xs, factor = 1) {
  const out = [];
  const steps = cols.step || [];
  for (let j = 0; j < steps.length; j += 1) {
    const last = cols.last[j];
    if (last == null || steps[j] == null) continue;
    const i = Math.floor((steps[j] - origin) / width);
    const x = xs ? xs[j] : steps[j];
    if (x == null) continue;
    const min = cols.min ? cols.min[j] : last;
    const max = cols.max ? cols.max[j] : last;
    out.push({ i, x0: xs ? x : origin + i * width, x, key: steps[j], min: (min ?? last) * factor,
      max: (max ?? last) * factor, last: last * factor, n: cols.n ? cols.n[j] : 1 });
  }
  return out;
}

// A zoom's window of several runs' curves (Compare runs, a sweep's trials) as a chart's
// `fetchWindow` result: /api/compare/curves for [run, label] pairs `runs` with `lo`/`hi`,
// one series per run named by its label, the first of `keys` it has. Raw when every run's
// window is; the widest width otherwise.
async function fetchCurvesWindow(runs, keys, lo, hi) {
  if (!runs.length) return null;
  const query = runs.map(([run]) => `run=${encodeURIComponent(run)}`).join("&");
  const response = await fetch(`/api/compare/curves?${query}&lo=${lo}&hi=${hi}`);
  if (!response.ok) return null;
  const data = await response.json();
  const series = {};
  let raw = true, width = 1;
  for (const [run, label] of runs) {
    const curves = data[run] || {};
    const key = keys.find((k) => curves[k] && curves[k].step && curves[k].step.length);
    if (!key) continue;
    series[label] = curves[key];
    raw = raw && Boolean(curves[key].raw);
    width = Math.max(width, curves[key].width || 1);
  }
  return { raw, width, origin: lo, series };
}

class LineChart {
  // options: xLabel ("step"), unit (shown on the y axis), logY, smoothing (0 to 0.999),
  // integerX (ticks on whole steps), format (a value's text), fetchWindow (async (lo, hi) =>
  // {raw, width, origin, series: {name: columns}} or null: the finer points of a zoom).
  constructor(canvas, series, options = {}) {
    this.canvas = canvas;
    this.series = series.map((s) => this._empty(s));
    this.xLabel = options.xLabel || "step";
    this.unit = options.unit || "";
    this.logY = Boolean(options.logY);
    this.smoothing = options.smoothing || 0;
    this.integerX = options.integerX !== false;
    this.fetchWindow = options.fetchWindow || null;
    this.zoom = null;  // [x0, x1] while zoomed in
    this.detail = null;  // the zoomed window's finer buckets, once fetched
    this.hoverX = null;
    this.format = options.format || ((v) => Number(v.toPrecision(4)).toString());
    canvas.chart = this;  // for the browser tests and the console
    this._listen();
  }

  _empty(s, width = 1, origin = 0) {
    return { color: COLORS[this.series ? this.series.length % COLORS.length : 0], ...s,
      width, origin, buckets: [], stepX: true };
  }

  _find(name, create = true) {
    let series = this.series.find((s) => s.name === name);
    if (!series && create) {  // a reading the chart did not know of (another GPU, another rail)
      series = this._empty({ name });
      this.series.push(series);
    }
    return series;
  }

  // Replace a series with the server's buckets (columns of one /series answer).
  setBuckets(name, cols, width = 1, origin = 0, xs = null, factor = 1) {
    const series = this._find(name);
    series.width = Math.max(1, width || 1);
    series.origin = origin || 0;
    series.stepX = !xs;
    series.buckets = bucketsFrom(cols, series.width, series.origin, xs, factor);
    while (series.buckets.length > MAX_BUCKETS) this._double(series);
  }

  // One raw point (a live record). `key` is its place on the grid, the step; it is x itself
  // on a step chart. A key below the series' newest (a resumed run repeating the steps
  // after its checkpoint) replaces what came after it: the newest value per step is kept.
  add(name, x, y, key = x) {
    if (y === null || y === undefined || !Number.isFinite(y) || x == null || key == null) return;
    const series = this._find(name);
    this._merge(series, x, y, key);
    const part = this.detail && this.detail.series[name];
    if (part && this.detail.raw && x >= this.zoom[0] && x <= this.zoom[1]) this._merge(part, x, y, key);
  }

  _merge(series, x, y, key) {
    const b = series.buckets;
    const i = Math.floor((key - series.origin) / series.width);
    let last = b[b.length - 1];
    if (last && (key < last.key || (key === last.key && x <= last.x))) {
      // A repeat: its bucket and every later one go (a wide bucket loses its earlier points,
      // as the server's buckets do after a resume that did not truncate its log).
      while (b.length && b[b.length - 1].i >= i) b.pop();
      last = b[b.length - 1];
    }
    if (last && last.i === i) {
      last.n += 1;
      last.min = Math.min(last.min, y);
      last.max = Math.max(last.max, y);
      last.last = y; last.x = x; last.key = key;
      return;
    }
    const x0 = series.stepX && key === x ? series.origin + i * series.width : x;
    if (key !== x) series.stepX = false;
    b.push({ i, x0, x, key, min: y, max: y, last: y, n: 1 });
    while (series.buckets.length > MAX_BUCKETS) this._double(series);
  }

  // Double a series' bucket width: pairs of buckets merge (W&B's and the server's rule).
  _double(series) {
    series.width *= 2;
    const merged = [];
    for (const bucket of series.buckets) {
      const i = Math.floor(bucket.i / 2);
      const into = merged[merged.length - 1];
      if (into && into.i === i) merged[merged.length - 1] = mergeBuckets(into, { ...bucket, i });
      else merged.push({ ...bucket, i });
    }
    if (series.stepX) merged.forEach((m) => { m.x0 = series.origin + m.i * series.width; });
    series.buckets = merged;
  }

  count() {
    return this.series.reduce((n, s) => n + s.buckets.length, 0);
  }

  setSmoothing(weight) { this.smoothing = weight; this.draw(); }
  setLog(on) { this.logY = on; this.draw(); }
  resetZoom() { this.zoom = null; this.detail = null; this.draw(); }

  setZoom(a, b) {
    this.zoom = [a, b];
    this.detail = null;
    this.draw();
    this._refetch();
  }

  // The zoomed window again from the server, finer (raw points when it holds few enough).
  async _refetch() {
    const zoom = this.zoom;
    if (!this.fetchWindow || !zoom) return;
    this.canvas.dataset.detail = "loading";
    let got = null;
    try {
      got = await this.fetchWindow(Math.max(0, Math.floor(zoom[0])), Math.max(0, Math.ceil(zoom[1])));
    } catch (error) {
      got = null;
    }
    if (this.zoom !== zoom) return;  // zoomed again or reset meanwhile
    if (!got) { this.canvas.dataset.detail = ""; return; }
    const width = Math.max(1, got.width || 1);
    const origin = got.origin || 0;
    const series = {};
    for (const [name, cols] of Object.entries(got.series || {})) {
      series[name] = { name, width, origin, stepX: true,
        buckets: bucketsFrom(cols, width, origin, null) };
    }
    this.detail = { raw: Boolean(got.raw), width, series };
    this.canvas.dataset.detail = got.raw ? "raw" : `width ${width}`;
    this.draw();
  }

  // The buckets a series draws now: the zoom's finer ones once fetched, the zoomed step
  // range, and positive values only on a log scale.
  _source(s) {
    if (this.detail) return this.detail.series[s.name] || { ...s, buckets: [] };
    return s;
  }

  _visible(buckets) {
    return buckets.filter((b) => (!this.zoom || (b.x >= this.zoom[0] && b.x <= this.zoom[1]))
      && (!this.logY || b.last > 0));
  }

  _layout() {
    const { canvas } = this;
    // The canvas follows its box's width (a phone's narrow column included), drawn at the
    // screen's pixel density so text stays sharp.
    const ratio = window.devicePixelRatio || 1;
    const cssWidth = canvas.clientWidth || canvas.width;
    const cssHeight = Math.round(cssWidth < 420 ? Math.max(180, cssWidth * 0.6) : 220);
    if (canvas.width !== Math.round(cssWidth * ratio)) {
      canvas.width = Math.round(cssWidth * ratio);
      canvas.height = Math.round(cssHeight * ratio);
      canvas.style.height = `${cssHeight}px`;
    }
    return { w: cssWidth, h: cssHeight, ratio, pad: { l: 58, r: 12, t: 12, b: 40 } };
  }

  _ranges(drawn) {
    let x0 = Infinity; let x1 = -Infinity; let y0 = Infinity; let y1 = -Infinity;
    const ty = (v) => (this.logY ? Math.log10(v) : v);
    for (const s of drawn) {
      s.buckets.forEach((b, i) => {
        x0 = Math.min(x0, b.x); x1 = Math.max(x1, b.x);
        const values = [b.last, s.smooth[i]];
        if (b.n > 1) values.push(b.min, b.max);
        for (const v of values) {
          if (!Number.isFinite(v) || (this.logY && v <= 0)) continue;
          y0 = Math.min(y0, ty(v)); y1 = Math.max(y1, ty(v));
        }
      });
    }
    if (this.zoom) [x0, x1] = this.zoom;
    if (x1 === x0) x1 = x0 + 1;
    if (this.unit === "%" && !this.logY) {  // a percentage: the whole 0-100 % scale
      y0 = Math.min(0, y0); y1 = Math.max(100, y1);
    } else if (y1 === y0) {
      // A flat line: a scale from zero (or half a decade each side on a log scale), never
      // a band of its own that makes a constant look like it moves.
      if (this.logY) { y0 -= 0.5; y1 += 0.5; } else if (y0 > 0) { y0 = 0; y1 *= 1.25; }
      else if (y0 < 0) { y1 = 0; y0 *= 1.25; } else { y1 = 1; }
    }
    return { x0, x1, y0, y1 };
  }

  draw() {
    const { canvas } = this;
    const { w, h, ratio, pad } = this._layout();
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    canvas.dataset.points = String(this.count());
    // When the page first drew data here (ms since navigation start): the first paint of a
    // long run's chart, which the Chromium test of a 10^6-step run records.
    if (!canvas.dataset.firstDataMs && this.count()) {
      canvas.dataset.firstDataMs = String(Math.round(performance.now()));
    }
    canvas.dataset.series = this.series.filter((s) => s.buckets.length).map((s) => s.name).join(",");
    canvas.dataset.log = String(this.logY);
    canvas.dataset.zoomed = this.zoom ? `${this.zoom[0]}-${this.zoom[1]}` : "";
    if (!this.zoom) canvas.dataset.detail = "";
    this._resetButton();
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#666";
    const drawn = this.series.map((s) => {
      const source = this._source(s);
      const buckets = this._visible(source.buckets);
      const smooth = smoothValues(buckets.map((b) => b.last), this.smoothing);
      return { ...s, width: source.width, buckets, smooth };
    }).filter((s) => s.buckets.length);
    this.drawn = drawn;
    canvas.dataset.drawn = String(drawn.reduce((n, s) => n + s.buckets.length, 0));
    canvas.dataset.width = drawn.length ? String(Math.min(...drawn.map((s) => s.width))) : "";
    if (!drawn.length) {
      canvas.dataset.xticks = "";
      ctx.fillText(this.count() ? "no points in this range" : "waiting for data…", pad.l, h / 2);
      return;
    }
    const r = this._ranges(drawn);
    const sx = (x) => pad.l + ((x - r.x0) / (r.x1 - r.x0)) * (w - pad.l - pad.r);
    const sy = (y) => h - pad.b - (((this.logY ? Math.log10(y) : y) - r.y0) / (r.y1 - r.y0)) * (h - pad.t - pad.b);
    this.scale = { sx, sy, r, pad, w, h };
    this._axes(ctx, r, sx, pad, w, h);
    ctx.save();
    ctx.beginPath(); ctx.rect(pad.l, pad.t, w - pad.l - pad.r, h - pad.t - pad.b); ctx.clip();
    for (const s of drawn) this._band(ctx, s, sx, sy, r);
    for (const s of drawn) this._line(ctx, s, sx, sy);
    ctx.restore();
    this._legend(ctx, drawn, pad, h);
    this._hover(ctx, drawn, sx, sy, pad, h);
  }

  _axes(ctx, r, sx, pad, w, h) {
    ctx.strokeStyle = "#e3e5e8";
    ctx.beginPath();
    const yTicks = this.logY
      ? niceTicks(Math.floor(r.y0), Math.ceil(r.y1), 4).filter((t) => Number.isInteger(t))
      : niceTicks(r.y0, r.y1, 4);
    for (const t of yTicks) {
      if (t < r.y0 - 1e-12 || t > r.y1 + 1e-12) continue;
      const y = h - pad.b - ((t - r.y0) / (r.y1 - r.y0)) * (h - pad.t - pad.b);
      ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y);
      const label = this.logY ? Number(Math.pow(10, t).toPrecision(3)).toExponential(0) : this.format(t);
      ctx.fillText(label, 4, y + 4);
    }
    const xTicks = niceTicks(r.x0, r.x1, Math.max(2, Math.floor((w - pad.l - pad.r) / 70)))
      .filter((t) => !this.integerX || Number.isInteger(t));
    for (const t of xTicks) {
      ctx.moveTo(sx(t), pad.t); ctx.lineTo(sx(t), h - pad.b);
      const label = String(t);
      ctx.fillText(label, sx(t) - ctx.measureText(label).width / 2, h - pad.b + 13);
    }
    ctx.stroke();
    this.canvas.dataset.xticks = xTicks.join(",");
    const axis = this.unit ? `${this.xLabel} · ${this.unit}${this.logY ? " (log)" : ""}`
      : `${this.xLabel}${this.logY ? " · log scale" : ""}`;
    ctx.fillText(axis, w - pad.r - ctx.measureText(axis).width, h - 4);
  }

  // The light band between each bucket's min and max (only where a bucket holds several
  // points: raw points have none).
  _band(ctx, s, sx, sy, r) {
    if (!s.buckets.some((b) => b.n > 1 && b.max > b.min)) return;
    const floor = this.logY ? Math.pow(10, r.y0) : -Infinity;
    ctx.fillStyle = s.color;
    ctx.globalAlpha = 0.18;
    ctx.beginPath();
    s.buckets.forEach((b, i) => (i ? ctx.lineTo(sx(b.x), sy(b.max)) : ctx.moveTo(sx(b.x), sy(b.max))));
    for (let i = s.buckets.length - 1; i >= 0; i -= 1) {
      const b = s.buckets[i];
      ctx.lineTo(sx(b.x), sy(Math.max(b.min, floor)));
    }
    ctx.closePath();
    ctx.fill();
    ctx.globalAlpha = 1;
  }

  _line(ctx, s, sx, sy) {
    const path = (values) => {
      ctx.beginPath();
      s.buckets.forEach((b, i) => (i ? ctx.lineTo(sx(b.x), sy(values[i])) : ctx.moveTo(sx(b.x), sy(values[i]))));
      ctx.stroke();
    };
    const last = s.buckets.map((b) => b.last);
    ctx.strokeStyle = s.color; ctx.fillStyle = s.color;
    if (this.smoothing > 0 && s.buckets.length > 1) {  // the raw values stay, faint, behind
      ctx.globalAlpha = 0.25; ctx.lineWidth = 1; path(last); ctx.globalAlpha = 1;
    }
    ctx.lineWidth = 2;
    path(this.smoothing > 0 ? s.smooth : last);
    if (s.buckets.length === 1) ctx.fillRect(sx(s.buckets[0].x) - 2, sy(last[0]) - 2, 4, 4);
    ctx.lineWidth = 1;
  }

  _legend(ctx, drawn, pad, h) {
    let x = pad.l;
    for (const s of drawn) {
      ctx.fillStyle = s.color;
      ctx.fillRect(x, h - 11, 10, 3);
      ctx.fillText(s.name, x + 13, h - 6);
      x += 22 + ctx.measureText(s.name).width;
    }
    ctx.fillStyle = "#666";
  }

  // How far x is from a bucket: 0 inside the steps it covers.
  _distance(b, x) {
    return x < b.x0 ? b.x0 - x : x > b.x ? x - b.x : 0;
  }

  // The bucket under the pointer (the one whose steps hold it, else the nearest): a vertical
  // rule and each series' value there; a bucket of several points adds its min and max.
  _hover(ctx, drawn, sx, sy, pad, h) {
    const tip = this._tip();
    if (this.hoverX == null) { tip.hidden = true; return; }
    const near = (s) => {
      let best = null; let bestD = Infinity;
      s.buckets.forEach((b, i) => {
        const d = this._distance(b, this.hoverX);
        if (d < bestD) { best = i; bestD = d; }
      });
      return [best, bestD];
    };
    const found = drawn.map((s) => near(s));
    const closest = Math.min(...found.map(([, d]) => d));
    const hit = drawn.map((s, k) => (found[k][1] === 0 || found[k][1] === closest ? found[k][0] : null));
    const k0 = hit.findIndex((i) => i != null);
    const x = drawn[k0].buckets[hit[k0]].x;
    ctx.strokeStyle = "#999";
    ctx.beginPath(); ctx.moveTo(sx(x), pad.t); ctx.lineTo(sx(x), h - pad.b); ctx.stroke();
    const rows = [];
    const unit = this.unit ? ` ${this.unit}` : "";
    drawn.forEach((s, k) => {
      const i = hit[k];
      if (i == null) return;
      const b = s.buckets[i];
      const value = this.smoothing > 0 ? s.smooth[i] : b.last;
      ctx.fillStyle = s.color;
      ctx.beginPath(); ctx.arc(sx(b.x), sy(value), 3, 0, 2 * Math.PI); ctx.fill();
      const raw = this.smoothing > 0 ? ` (raw ${this.format(b.last)})` : "";
      const spread = b.n > 1
        ? ` · min ${this.format(b.min)} · max ${this.format(b.max)} · ${b.n} points` : "";
      rows.push(`${s.name} ${this.format(value)}${unit}${raw}${spread}`);
    });
    const b0 = drawn[k0].buckets[hit[k0]];
    const span = b0.n > 1 && drawn[k0].stepX !== false && this.integerX
      ? ` (steps ${b0.x0}–${b0.x0 + drawn[k0].width - 1})` : "";
    const xText = this.integerX ? String(x) : this.format(x);
    tip.textContent = [`${this.xLabel} ${xText}${span}`, ...rows].join("\n");
    tip.hidden = false;
    const left = Math.min(sx(x) + 10, this.canvas.clientWidth - 150);
    tip.style.left = `${this.canvas.offsetLeft + Math.max(0, left)}px`;
    tip.style.top = `${this.canvas.offsetTop + pad.t}px`;
  }

  _tip() {
    if (!this.tip) {
      this.tip = document.createElement("div");
      this.tip.className = "chart-tip";
      this.tip.hidden = true;
      this.canvas.parentElement.append(this.tip);
    }
    return this.tip;
  }

  _resetButton() {
    if (!this.reset) {
      this.reset = document.createElement("button");
      this.reset.type = "button";
      this.reset.className = "chart-reset";
      this.reset.textContent = "Reset zoom";
      this.reset.addEventListener("click", () => this.resetZoom());
      this.canvas.parentElement.append(this.reset);
    }
    this.reset.hidden = !this.zoom;
  }

  // The step under a pointer event, from the last drawn scale.
  _stepAt(event) {
    if (!this.scale) return null;
    const { r, pad, w } = this.scale;
    const px = event.offsetX;
    return r.x0 + ((px - pad.l) / (w - pad.l - pad.r)) * (r.x1 - r.x0);
  }

  _listen() {
    const { canvas } = this;
    let dragFrom = null;
    canvas.addEventListener("mousemove", (event) => {
      this.hoverX = this._stepAt(event);
      this.draw();
      if (dragFrom != null && this.scale) {  // the range being picked, shaded
        const ctx = canvas.getContext("2d");
        const { pad, h } = this.scale;
        ctx.fillStyle = "#2563eb22";
        ctx.fillRect(Math.min(dragFrom.px, event.offsetX), pad.t, Math.abs(event.offsetX - dragFrom.px), h - pad.t - pad.b);
      }
    });
    canvas.addEventListener("mouseleave", () => { this.hoverX = null; dragFrom = null; this.draw(); });
    canvas.addEventListener("mousedown", (event) => {
      dragFrom = { px: event.offsetX, step: this._stepAt(event) };
    });
    canvas.addEventListener("mouseup", (event) => {
      const from = dragFrom;
      dragFrom = null;
      if (!from || from.step == null || Math.abs(event.offsetX - from.px) < 6) return;  // a click
      const to = this._stepAt(event);
      let [a, b] = [Math.min(from.step, to), Math.max(from.step, to)];
      if (this.integerX) { a = Math.floor(a); b = Math.ceil(b); }
      if (b > a) this.setZoom(a, b);
    });
    canvas.addEventListener("dblclick", () => this.resetZoom());
  }
}
