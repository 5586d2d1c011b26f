// The run page: the run's charts as the server's buckets (/series: at most 1,000 min/max/last
// buckets a series, whatever the run's length) and its tiles from the newest record per
// split, then live progress from the server-sent event stream after that offset; Stop and
// Resume. A drag-zoom on a chart asks /series for that step window (raw points when few).
// Telemetry records become the System charts (telemetry.js) and the "All readings" table;
// the task's other numbers (tokens/s, perplexity, model TFLOPS, ...) go beside the training
// stats. MFU is shown as a percentage, the header carries an ETA while the run trains, and a
// run that ended shows its final metrics (summary.json) instead of its last live numbers.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  let run = JSON.parse($("run-data").textContent);
  const smoothing = Number($("smoothing").value);
  // The chart and series name of a server series ("train/loss", "val/accuracy", "train/lr").
  const CHARTED = { loss: "loss", accuracy: "accuracy", lr: "lr" };
  function charted(name) {
    const [split, key] = name.split("/", 2);
    if (!CHARTED[key] || (split !== "train" && split !== "val")) return null;
    if (key === "lr") return split === "train" ? ["lr", "lr"] : null;
    return [key, split];
  }
  // A zoomed chart's window, finer, from the server: only the series that chart draws.
  const windowOf = (chartName) => async (lo, hi) => {
    const { ok, data } = await TF.api("GET", `${run.api}/series?lo=${lo}&hi=${hi}`);
    if (!ok) return null;
    const series = {};
    for (const [name, cols] of Object.entries(data.series || {})) {
      const to = charted(name);
      if (to && to[0] === chartName) series[to[1]] = cols;
    }
    return { raw: data.raw, width: data.width, origin: data.origin || 0, series };
  };
  const charts = {
    loss: new LineChart($("chart-loss"), [
      { name: "train", color: "#1f77b4" }, { name: "val", color: "#d62728" }],
      { smoothing, fetchWindow: windowOf("loss") }),
    accuracy: new LineChart($("chart-accuracy"), [
      { name: "train", color: "#1f77b4" }, { name: "val", color: "#d62728" }],
      { smoothing, fetchWindow: windowOf("accuracy") }),
    lr: new LineChart($("chart-lr"), [{ name: "lr", color: "#2ca02c" }],
      { format: (v) => v.toExponential(1), fetchWindow: windowOf("lr") }),
  };
  const system = new TelemetryCharts($("system-charts"));
  const KNOWN = new Set(["time", "split", "step", "epoch", "loss", "accuracy", "lr",
    "samples_per_s", "step_time_s", "data_wait_share", "compute_time_s", "grad_norm",
    "mfu", "mfu_measured"]);
  const ACTIVE = ["queued", "running", "stopping"];
  let pace = null;  // [step, time] of this attempt's first train record, then the last one
  const RECORD_KEYS = new Set(["time", "split", "step", "epoch"]);
  let offset = 0;
  let source = null;
  let logTimer = null;
  // The newest value of every telemetry reading: a batch of records without a telemetry
  // record (most of them) must not blank the readings an earlier one showed.
  const readings = {};
  const more = {};  // the newest value of every other train and validation metric
  let readingsSeen = false;

  const fmt = (value, digits) => (value == null ? "" : Number(value.toPrecision(digits)).toString());
  const percent = (share) => (share == null ? "" : `${(share * 100).toFixed(2)} %`);

  function duration(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  // Remaining steps at the pace this attempt kept so far (a resumed run's earlier attempts
  // and its start-up time do not count).
  function updateEta(r) {
    if (r.step == null || typeof r.time !== "number") return;
    // A new attempt starts the pace again: its steps repeat the last ones, or it follows a
    // pause (the run was stopped and resumed).
    const usual = pace && pace[2] > pace[0] ? (pace[3] - pace[1]) / (pace[2] - pace[0]) : 0;
    const paused = pace && r.time - pace[3] > Math.max(60, 10 * usual);
    if (!pace || r.step <= pace[2] || paused) pace = [r.step, r.time];
    pace[2] = r.step; pace[3] = r.time;
    const eta = $("run-eta");
    const total = run.total_steps;
    const done = r.step - pace[0];
    if (!total || done < 1 || !ACTIVE.includes(run.status)) return;
    const perStep = (r.time - pace[1]) / done;
    eta.textContent = `ETA ${duration(perStep * (total - r.step))}`;
    eta.hidden = false;
  }

  // The tiles, readings and other metrics of one record; true when it held readings.
  function showRecord(r) {
    let sawReadings = false;
    const split = r.split || "train";
    if (split === "train") {
      $("s-lr").textContent = fmt(r.lr, 3);
      $("s-samples").textContent = fmt(r.samples_per_s, 4);
      $("s-wait").textContent = r.data_wait_share == null ? "" : `${(r.data_wait_share * 100).toFixed(1)} %`;
      // The buckets' newest record carries no epoch (not a series): the page's own stays.
      if (r.epoch != null) $("s-epoch").textContent = fmt(r.epoch, 4);
      if (r.mfu != null) $("s-mfu").textContent = percent(r.mfu);
      updateEta(r);
    }
    if (split === "val") showValidation(r);
    if (r.step != null) $("s-step").textContent = r.step;
    for (const [key, value] of Object.entries(r)) {
      if (typeof value !== "number") continue;
      if (split === "telemetry" && !RECORD_KEYS.has(key)) {
        readings[key] = value;
        sawReadings = true;
      } else if ((split === "train" || split === "val") && !KNOWN.has(key)) {
        more[split === "val" ? `val ${key}` : key] = value;
      }
    }
    return sawReadings;
  }

  // The val accuracy tile says "no validation yet" until a validation ran; a task whose
  // validation measures no accuracy (a language model's perplexity) hides it.
  function showValidation(r) {
    const tile = $("s-val");
    if (r.accuracy != null) {
      tile.textContent = `${(r.accuracy * 100).toFixed(2)} %`;
      tile.classList.remove("muted");
      tile.parentElement.hidden = false;
    } else if (tile.classList.contains("muted")) {
      tile.parentElement.hidden = true;
    }
  }

  function addRecords(records) {
    let sawReadings = false;
    for (const r of records) {
      const split = r.split || "train";
      if (split === "train" || split === "val") {
        charts.loss.add(split, r.step, r.loss);
        charts.accuracy.add(split, r.step, r.accuracy);
      }
      if (split === "train") charts.lr.add("lr", r.step, r.lr);
      if (split === "telemetry") system.add(r);
      if (showRecord(r)) sawReadings = true;
    }
    showRecords(sawReadings);
  }

  function showRecords(sawReadings) {
    if (sawReadings) {
      TF.renderReadings($("telemetry"), readings);
      if (!readingsSeen) $("all-readings").open = false;  // the charts say it now
      readingsSeen = true;
    }
    showMore();
    Object.values(charts).forEach((c) => c.draw());
    system.draw();
    updateProgress();
  }

  function showMore() {
    const box = $("more-metrics");
    const keys = Object.keys(more).sort();
    box.hidden = !keys.length;
    box.replaceChildren(...keys.map((key) => {
      const stat = TF.el("div");
      stat.dataset.metric = key;
      stat.append(TF.el("span", key.replaceAll("_", " "), "label"), TF.el("span", fmt(more[key], 4)));
      return stat;
    }));
  }

  function updateProgress() {
    const bar = $("run-progress");
    if (run.total_steps) {
      bar.max = run.total_steps;
      bar.value = Number($("s-step").textContent) || 0;
      $("s-total").textContent = ` / ${run.total_steps}`;
    }
  }

  // A run that ended: its final numbers from summary.json, in place of the live ones (a
  // finished cosine schedule's "learning rate 0" says nothing about the run).
  function showFinal(final) {
    const box = $("final-metrics");
    const ended = final && !ACTIVE.includes(run.status);
    box.hidden = !ended;
    document.querySelectorAll("#live-stats [data-live]").forEach((n) => { n.hidden = Boolean(ended); });
    if (!ended) return;
    const stat = (label, value, key) => {
      const node = TF.el("div");
      node.dataset.metric = key;
      node.append(TF.el("span", label, "label"), TF.el("span", value));
      return node;
    };
    const items = Object.entries(final.metrics || {}).map(([key, value]) => stat(
      `final val ${key.replaceAll("_", " ")}`,
      key.includes("accuracy") ? percent(value) : fmt(value, 4), key));
    if (final.train_time_s != null) items.push(stat("training time", duration(final.train_time_s), "train_time_s"));
    if (final.mfu != null) {
      items.push(stat("MFU (whole run)", percent(final.mfu), "mfu"));
      $("s-mfu").textContent = percent(final.mfu);
    }
    box.replaceChildren(...items);
  }

  function showStatus(view) {
    run = view;
    if (!ACTIVE.includes(view.status)) $("run-eta").hidden = true;
    showFinal(view.final);
    const artefacts = $("artefacts");
    if (artefacts && view.folder) artefacts.hidden = view.status !== "completed";
    const badge = $("run-status");
    badge.textContent = view.status;
    badge.className = `status status-${view.status}`;
    const place = view.position ? ` (place ${view.position} in the queue)` : "";
    $("run-message").textContent = (view.message || "") + place;
    // A run started from the command line is stopped where it runs, or by this server where
    // it may signal the process (can_stop); a sweep's trial is stopped with its sweep.
    const foreign = view.origin !== "app" && !view.can_stop;
    const hint = $("stop-hint");
    hint.textContent = view.stop_hint || "";
    hint.hidden = !view.stop_hint;
    $("stop-button").hidden = foreign || !["queued", "running", "stopping"].includes(view.status);
    $("stop-button").textContent = view.status === "stopping" ? "Stop now (SIGTERM)"
      : view.status === "queued" ? "Cancel" : "Stop";
    $("resume-button").hidden = !view.resumable;
    const report = $("report-link");
    report.hidden = !view.report;
    if (view.report) report.href = view.report;
    const model = $("model-link");
    if (model) model.hidden = !view.model_ready;  // a failed or stopped run wrote no model
    const note = $("telemetry-note");
    if (note) note.textContent = view.telemetry_note;  // there until the first record
    updateProgress();
  }

  // The Output pane follows the newest lines (the stop message, the resume line) unless
  // the reader has scrolled up to read earlier ones. It holds the last 500 lines, so a
  // line that scrolled past between two refreshes (a resume's header on a fast run) can
  // still be scrolled back to; the server keeps the log's last 64 KiB in memory.
  async function refreshLog() {
    const { ok, data } = await TF.api("GET", `${run.api}/log?lines=500`);
    if (!ok) return;
    const log = $("run-log");
    const following = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    log.textContent = data.lines.length || run.origin === "app" ? data.lines.join("\n")
      : "Started from the command line: its output is in the terminal that started it.";
    if (following) log.scrollTop = log.scrollHeight;
  }

  function connect() {
    if (source) source.close();
    source = new EventSource(`${run.api}/events?offset=${offset}`);
    source.addEventListener("metrics", (event) => {
      offset = Number(event.lastEventId) || offset;
      addRecords(JSON.parse(event.data));
    });
    source.addEventListener("status", (event) => showStatus(JSON.parse(event.data)));
    source.addEventListener("end", (event) => {
      offset = JSON.parse(event.data).offset;
      source.close();
      source = null;
      clearInterval(logTimer);
      refreshLog();
    });
    clearInterval(logTimer);
    logTimer = setInterval(refreshLog, 3000);
    refreshLog();
  }

  $("stop-button").addEventListener("click", async () => {
    const { ok, data } = await TF.api("POST", `${run.api}/stop`);
    if (ok) showStatus(data); else $("run-message").textContent = data && data.detail;
  });
  $("smoothing").addEventListener("input", (event) => {
    const weight = Number(event.target.value);
    $("smoothing-value").textContent = weight.toFixed(2);
    charts.loss.setSmoothing(weight);
    charts.accuracy.setSmoothing(weight);
  });
  $("loss-log").addEventListener("change", (event) => charts.loss.setLog(event.target.checked));
  window.addEventListener("resize", () => {
    Object.values(charts).forEach((c) => c.draw());
    system.draw();
  });
  $("resume-button").addEventListener("click", async () => {
    const { ok, data } = await TF.api("POST", `${run.api}/resume`);
    if (!ok) { $("run-message").textContent = data && data.detail; return; }
    showStatus(data);
    connect();
  });

  // The first load: the whole run as buckets and the newest record per split, then the
  // live records after the offset those cover. Without /series (an older server), the event
  // stream sends every record from the start.
  async function load() {
    const { ok, data } = await TF.api("GET", `${run.api}/series`);
    if (ok && data && data.series) {
      const telemetry = {};
      for (const [name, cols] of Object.entries(data.series)) {
        const to = charted(name);
        if (to) charts[to[0]].setBuckets(to[1], cols, data.width, data.origin || 0);
        if (name.startsWith("telemetry/")) telemetry[name.slice("telemetry/".length)] = cols;
      }
      const latest = data.latest || {};
      system.setBuckets(telemetry, data.width, data.origin || 0, Object.keys(latest.telemetry || {}));
      let sawReadings = false;
      for (const split of Object.keys(latest).sort((a, b) => (latest[a].step || 0) - (latest[b].step || 0))) {
        if (showRecord({ split, ...latest[split] })) sawReadings = true;
      }
      showRecords(sawReadings);
      offset = data.offset || 0;
    }
    connect();
  }

  $("stop-button").disabled = false;
  $("resume-button").disabled = false;
  Object.values(charts).forEach((c) => c.draw());
  showStatus(run);
  load();
})();
