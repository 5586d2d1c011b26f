// A small line chart on a canvas: a few series against the training step, drawn again from
// scratch on every update. Written by hand so the app needs no build step or vendored
// library for three simple charts.
"use strict";

class LineChart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series.map((s) => ({ ...s, points: [] }));
  }

  add(name, x, y) {
    if (y === null || y === undefined || !Number.isFinite(y)) return;
    const series = this.series.find((s) => s.name === name);
    // A resumed run repeats the steps after its checkpoint: keep the newest value per step.
    while (series.points.length && series.points[series.points.length - 1][0] >= x) {
      series.points.pop();
    }
    series.points.push([x, y]);
  }

  count() {
    return this.series.reduce((n, s) => n + s.points.length, 0);
  }

  draw() {
    const { canvas } = this;
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, pad = { l: 56, r: 12, t: 12, b: 28 };
    ctx.clearRect(0, 0, w, h);
    canvas.dataset.points = String(this.count());
    const all = this.series.flatMap((s) => s.points);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#666";
    if (!all.length) { ctx.fillText("waiting for data…", pad.l, h / 2); return; }
    let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const sx = (x) => pad.l + ((x - x0) / (x1 - x0)) * (w - pad.l - pad.r);
    const sy = (y) => h - pad.b - ((y - y0) / (y1 - y0)) * (h - pad.t - pad.b);
    ctx.strokeStyle = "#ddd";
    ctx.beginPath();
    for (let i = 0; i <= 4; i++) {
      const y = y0 + ((y1 - y0) * i) / 4;
      ctx.moveTo(pad.l, sy(y)); ctx.lineTo(w - pad.r, sy(y));
      ctx.fillText(Number(y.toPrecision(3)).toString(), 4, sy(y) + 4);
    }
    ctx.stroke();
    ctx.fillText(`step ${x0}`, pad.l, h - 8);
    ctx.fillText(`${x1}`, w - pad.r - 30, h - 8);
    let legendX = pad.l + 60;
    for (const s of this.series) {
      if (!s.points.length) continue;
      ctx.strokeStyle = s.color; ctx.fillStyle = s.color; ctx.lineWidth = 2;
      ctx.beginPath();
      s.points.forEach(([x, y], i) => (i ? ctx.lineTo(sx(x), sy(y)) : ctx.moveTo(sx(x), sy(y))));
      ctx.stroke();
      if (s.points.length === 1) ctx.fillRect(sx(s.points[0][0]) - 2, sy(s.points[0][1]) - 2, 4, 4);
      ctx.fillText(s.name, legendX, h - 8);
      legendX += 60;
      ctx.lineWidth = 1; ctx.fillStyle = "#666";
    }
  }
}
