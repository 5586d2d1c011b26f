// A line chart on a canvas: a few series against the training step (or time), drawn again
// from scratch on every update, with what a reader of TensorBoard expects: the values under
// the pointer, a step range zoomed by dragging (double-click or "Reset zoom" to undo),
// TensorBoard's smoothing (an exponential moving average, debiased as TensorBoard does), a
// log scale, and ticks along the x axis. Written by hand so the app needs no build step or
// vendored library; uPlot and Chart.js were considered, but either would be a vendored file
// larger than all of the app's own scripts together, for a handful of charts.
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

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
  "#17becf", "#bcbd22", "#7f7f7f"];

class LineChart {
  // options: xLabel ("step"), unit (shown on the y axis), logY, smoothing (0 to 0.999),
  // integerX (ticks on whole steps).
  constructor(canvas, series, options = {}) {
    this.canvas = canvas;
    this.series = series.map((s) => ({ ...s, points: [] }));
    this.xLabel = options.xLabel || "step";
    this.unit = options.unit || "";
    this.logY = Boolean(options.logY);
    this.smoothing = options.smoothing || 0;
    this.integerX = options.integerX !== false;
    this.zoom = null;  // [x0, x1] while zoomed in
    this.hoverX = null;
    this.format = options.format || ((v) => Number(v.toPrecision(4)).toString());
    this._listen();
  }

  add(name, x, y) {
    if (y === null || y === undefined || !Number.isFinite(y) || x == null) return;
    let series = this.series.find((s) => s.name === name);
    if (!series) {  // a reading the chart did not know of (another GPU, another rail)
      series = { name, color: COLORS[this.series.length % COLORS.length], points: [] };
      this.series.push(series);
    }
    // A resumed run repeats the steps after its checkpoint: keep the newest value per step.
    while (series.points.length && series.points[series.points.length - 1][0] >= x) {
      series.points.pop();
    }
    series.points.push([x, y]);
  }

  count() {
    return this.series.reduce((n, s) => n + s.points.length, 0);
  }

  setSmoothing(weight) { this.smoothing = weight; this.draw(); }
  setLog(on) { this.logY = on; this.draw(); }
  resetZoom() { this.zoom = null; this.draw(); }

  // Which points are drawn: the zoomed step range, and positive values only on a log scale.
  _visible(points) {
    return points.filter(([x, y]) => (!this.zoom || (x >= this.zoom[0] && x <= this.zoom[1]))
      && (!this.logY || y > 0));
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
    const all = drawn.flatMap((s) => [...s.points, ...s.smooth]);
    let [x0, x1] = this.zoom || [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    if (x1 === x0) x1 = x0 + 1;
    const ys = all.map((p) => (this.logY ? Math.log10(p[1]) : p[1]));
    let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    return { x0, x1, y0, y1 };
  }

  draw() {
    const { canvas } = this;
    const { w, h, ratio, pad } = this._layout();
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    canvas.dataset.points = String(this.count());
    canvas.dataset.series = this.series.filter((s) => s.points.length).map((s) => s.name).join(",");
    canvas.dataset.log = String(this.logY);
    canvas.dataset.zoomed = this.zoom ? `${this.zoom[0]}-${this.zoom[1]}` : "";
    this._resetButton();
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#666";
    const drawn = this.series.map((s) => {
      const points = this._visible(s.points);
      const smooth = smoothValues(points.map((p) => p[1]), this.smoothing);
      return { ...s, points, smooth: points.map((p, i) => [p[0], smooth[i]]) };
    }).filter((s) => s.points.length);
    this.drawn = drawn;
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
    for (const s of drawn) this._line(ctx, s, sx, sy);
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

  _line(ctx, s, sx, sy) {
    const path = (points) => {
      ctx.beginPath();
      points.forEach(([x, y], i) => (i ? ctx.lineTo(sx(x), sy(y)) : ctx.moveTo(sx(x), sy(y))));
      ctx.stroke();
    };
    ctx.strokeStyle = s.color; ctx.fillStyle = s.color;
    if (this.smoothing > 0 && s.points.length > 1) {  // the raw values stay, faint, behind
      ctx.globalAlpha = 0.25; ctx.lineWidth = 1; path(s.points); ctx.globalAlpha = 1;
    }
    ctx.lineWidth = 2;
    path(this.smoothing > 0 ? s.smooth : s.points);
    if (s.points.length === 1) ctx.fillRect(sx(s.points[0][0]) - 2, sy(s.points[0][1]) - 2, 4, 4);
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

  // The nearest step under the pointer: a vertical rule and each series' value there.
  _hover(ctx, drawn, sx, sy, pad, h) {
    const tip = this._tip();
    if (this.hoverX == null) { tip.hidden = true; return; }
    const xs = [...new Set(drawn.flatMap((s) => s.points.map((p) => p[0])))];
    const x = xs.reduce((a, b) => (Math.abs(b - this.hoverX) < Math.abs(a - this.hoverX) ? b : a));
    ctx.strokeStyle = "#999";
    ctx.beginPath(); ctx.moveTo(sx(x), pad.t); ctx.lineTo(sx(x), h - pad.b); ctx.stroke();
    const rows = [];
    for (const s of drawn) {
      const i = s.points.findIndex((p) => p[0] === x);
      if (i < 0) continue;
      const value = this.smoothing > 0 ? s.smooth[i][1] : s.points[i][1];
      ctx.fillStyle = s.color;
      ctx.beginPath(); ctx.arc(sx(x), sy(value), 3, 0, 2 * Math.PI); ctx.fill();
      const raw = this.smoothing > 0 ? ` (raw ${this.format(s.points[i][1])})` : "";
      rows.push(`${s.name} ${this.format(value)}${this.unit ? ` ${this.unit}` : ""}${raw}`);
    }
    tip.textContent = [`${this.xLabel} ${this.format(x)}`, ...rows].join("\n");
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
      if (!from || Math.abs(event.offsetX - from.px) < 6) return;  // a click, not a drag
      const to = this._stepAt(event);
      let [a, b] = [Math.min(from.step, to), Math.max(from.step, to)];
      if (this.integerX) { a = Math.floor(a); b = Math.ceil(b); }
      if (b > a) { this.zoom = [a, b]; this.draw(); }
    });
    canvas.addEventListener("dblclick", () => this.resetZoom());
  }
}
