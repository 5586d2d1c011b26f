// The System page's live telemetry: a sample every 2 s from /api/system, drawn as charts over
// time (telemetry.js) and listed under "All readings"; the sources left out say why below.
"use strict";

(() => {
  const charts = new TelemetryCharts(document.getElementById("system-charts"));
  let last = null;
  const tick = async () => {
    const { ok, data } = await TF.api("GET", "/api/system");
    if (!ok) return;
    const { time, readings, notes } = data.telemetry;
    TF.renderReadings(document.getElementById("telemetry"), readings);
    document.getElementById("telemetry-notes").replaceChildren(...notes.map((n) => TF.el("li", n)));
    if (time != null && time !== last) {  // the sampler's interval may be longer than ours
      last = time;
      charts.add({ time, ...readings });
      charts.draw();
    }
  };
  tick();
  setInterval(tick, 2000);
  window.addEventListener("resize", () => charts.draw());
})();
