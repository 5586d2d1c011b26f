// trainforge web app: the Train Model dialog, live run lists and telemetry. Plain JavaScript,
// no build step. Text from the server is always inserted as text, never as HTML.
"use strict";

const TF = (() => {
  const $ = (id) => document.getElementById(id);
  const FIELDS = ["config", "profile", "task", "base_model", "dataset", "epochs",
                  "learning_rate", "batch_size", "output_name"];

  async function api(method, url, body) {
    const options = { method, headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(url, options);
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    return { ok: response.ok, status: response.status, data };
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function fillSelect(select, options, value, blank) {
    select.replaceChildren();
    if (blank !== undefined) select.append(new Option(blank, ""));
    for (const option of options) select.append(new Option(option, option));
    if (value !== undefined && value !== null) select.value = value;
  }

  // ------------------------------------------------------------------ the dialog
  function clearErrors() {
    for (const node of document.querySelectorAll("#train-form .error")) node.textContent = "";
    for (const node of document.querySelectorAll("#train-form .invalid")) {
      node.classList.remove("invalid");
    }
  }

  function showErrors(errors) {
    clearErrors();
    for (const [field, messages] of Object.entries(errors || {})) {
      const target = document.querySelector(`#train-form .error[data-for="${field}"]`) ||
        document.querySelector('#train-form .error[data-for="_form"]');
      target.textContent = messages.join(" ");
      const input = $(`f-${field}`);
      if (input) input.classList.add("invalid");
    }
  }

  function showTaskFields() {
    $("base-model-field").hidden = $("f-task").value !== "causal-lm";
  }

  // The Target field: this machine, or a cluster target with its Slurm fields.
  let targets = [];
  async function loadTargets() {
    const select = $("f-target");
    const chosen = select.value || "local";
    const { ok, data } = await api("GET", "/api/targets");
    if (!ok) return;
    targets = data;
    select.replaceChildren(...data.map((t) => new Option(
      t.name === "local" ? "local: this machine" : `${t.name}: Slurm on ${t.where}`, t.name)));
    select.value = data.some((t) => t.name === chosen) ? chosen : "local";
    const broken = data.find((t) => t.error);
    if (broken) showErrors({ target: [broken.error] });
    showTargetFields();
  }

  function showTargetFields() {
    const target = targets.find((t) => t.name === $("f-target").value);
    const cluster = Boolean(target) && target.name !== "local";
    for (const node of document.querySelectorAll("#train-form .target-field")) node.hidden = !cluster;
    if (cluster) $("f-partition").placeholder = target.partition || "the cluster's default";
  }

  // The values the dialog showed, per field: a field still at its value is sent empty, so
  // the run keeps the config's value and a changed batch scales the learning rate as
  // `trainforge train --batch_size N` does (a rate sent along would be kept as given).
  let shown = {};
  const CONFIG_VALUES = ["base_model", "dataset", "epochs", "learning_rate", "batch_size"];

  async function loadDefaults(config, profile) {
    const params = new URLSearchParams();
    if (config) params.set("config", config);
    if (profile) params.set("profile", profile);
    const { data } = await api("GET", `/api/train/defaults?${params}`);
    const choices = data.choices;
    const values = data.values || {};
    fillSelect($("f-config"), choices.configs, values.config);
    fillSelect($("f-profile"), choices.profiles, profile || values.profile);
    fillSelect($("f-task"), choices.tasks, values.task);
    fillSelect($("f-base_model"), choices.models, values.base_model, "(choose a model)");
    // A config may name (or create on first use) its own base model; the field may stay empty.
    $("f-base_model").dataset.configDefault = values.base_model || "";
    shown = values;
    const list = $("image-datasets");
    list.replaceChildren(...choices.image_datasets.map((name) => new Option(name)));
    for (const name of ["dataset", "epochs", "learning_rate", "batch_size", "output_name"]) {
      $(`f-${name}`).value = values[name] ?? "";
    }
    $("detected").textContent =
      `Detected: ${data.detected.platform.replace("platform: ", "")} → profile ${data.detected.profile}`;
    const notes = $("profile-notes");
    notes.replaceChildren();
    if (data.profile) {
      notes.append(el("div", `Profile ${data.profile.name}: ${data.profile.reason}`, "muted"));
      if (data.profile.notes) notes.append(el("p", data.profile.notes, "profile-note"));
    }
    if (data.notes) notes.append(el("p", data.notes, "config-note"));
    if (data.profile && data.profile.guide) {
      const guide = el("p", "Guide: ", "guide");
      guide.append(el("code", data.profile.guide));
      notes.append(guide);
    }
    showTaskFields();
    showErrors(data.errors);
  }

  function number(value) {
    if (value === "" || value === null) return null;
    const parsed = Number(value);
    return Number.isFinite(parsed) ? parsed : value;
  }

  function formValues() {
    const body = {};
    for (const name of FIELDS) body[name] = $(`f-${name}`).value.trim();
    for (const name of CONFIG_VALUES) {
      if (body[name] === String(shown[name] ?? "")) body[name] = "";  // unchanged
    }
    for (const name of ["epochs", "learning_rate", "batch_size"]) body[name] = number(body[name]);
    if (body.task !== "causal-lm" || !body.base_model) body.base_model = null;
    if (!body.dataset) body.dataset = null;
    body.overrides = $("f-overrides").value.split("\n").map((s) => s.trim()).filter(Boolean);
    body.overwrite = $("f-overwrite").checked;
    if ($("f-target").value !== "local") {
      body.target = $("f-target").value;
      for (const name of ["nodes", "gpus_per_node"]) body[name] = number($(`f-${name}`).value.trim());
      body.time = $("f-time").value.trim();
      body.partition = $("f-partition").value.trim() || null;
    }
    return body;
  }

  async function submit(event) {
    event.preventDefault();
    const button = $("train-start");
    button.disabled = true;
    try {
      const body = formValues();
      const base = $("f-base_model");
      if (body.task === "causal-lm" && !body.base_model && !base.dataset.configDefault) {
        showErrors({ base_model: [
          "A causal-lm run fine-tunes a base model: pick one in Base model (the Models page lists them)."] });
        base.focus();
        return;
      }
      const url = body.target ? "/api/targets/runs" : "/api/runs";
      const { ok, status, data } = await api("POST", url, body);
      if (ok) { location.href = `/runs/${encodeURIComponent(data.id)}`; return; }
      if (status === 422 && data && data.errors) showErrors(data.errors);
      else showErrors({ _form: [data && data.detail ? String(data.detail) : `error ${status}`] });
    } finally {
      button.disabled = false;
    }
  }

  function setUpDialog() {
    const dialog = $("train-dialog");
    if (!dialog) return;
    const open = () => { dialog.showModal(); loadDefaults(); loadTargets(); };  // re-read on every open
    $("open-train").addEventListener("click", open);
    $("train-cancel").addEventListener("click", () => dialog.close());
    $("train-form").addEventListener("submit", submit);
    $("f-config").addEventListener("change", () => loadDefaults($("f-config").value));
    $("f-profile").addEventListener("change",
      () => loadDefaults($("f-config").value, $("f-profile").value));
    $("f-task").addEventListener("change", showTaskFields);
    $("f-target").addEventListener("change", showTargetFields);
    if (dialog.dataset.open) open();
  }

  // ------------------------------------------------------------------ live lists
  function watchRuns(onChange) {
    const source = new EventSource("/api/events");
    let first = true;
    source.addEventListener("runs", (event) => {
      const data = JSON.parse(event.data);
      if (first) { first = false; return; }
      const completed = data.changed.filter((id) => data.runs[id] === "completed");
      onChange({ runs: data.runs, changed: data.changed, completed });
    });
    return source;
  }

  function formatTime(seconds) {
    return seconds ? new Date(seconds * 1000).toLocaleString() : "";
  }

  // Run id -> {target, job_id, reason, unreachable}: what the Runs page shows of each target.
  async function targetViews() {
    const { ok, data } = await api("GET", "/api/targets/runs");
    return ok ? data : {};
  }

  function targetCell(where) {
    const cell = el("span", where.target || "local");
    if (where.job_id) cell.append(" ", el("span", `job ${where.job_id}`, "muted"));
    if (where.unreachable) {
      const badge = el("span", "unreachable", "badge unreachable");
      badge.title = where.unreachable;
      cell.append(" ", badge);
    }
    return cell;
  }

  // The filter box: rows whose name (or display name), status, target or tags hold every word
  // typed.
  function filterRuns() {
    const box = $("runs-filter");
    if (!box) return;
    const words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const row of document.querySelectorAll("#runs-table tbody tr[data-run]")) {
      const text = [row.dataset.run, row.dataset.status, row.dataset.target,
                    row.dataset.tags || ""].join(" ").toLowerCase();
      row.hidden = !words.every((word) => text.includes(word));
    }
  }

  async function refreshRunsTable() {
    const [{ ok, data }, where] = await Promise.all([api("GET", "/api/runs"), targetViews()]);
    if (!ok) return;
    const body = document.querySelector("#runs-table tbody");
    body.replaceChildren(...data.map((run) => {
      const row = el("tr");
      const place = where[run.id] || { target: "local" };
      row.dataset.run = run.id;
      row.dataset.status = run.status;
      row.dataset.target = place.target;
      row.dataset.tags = [...(run.tags || []), run.display_name || ""].join(" ");
      const link = el("span");
      const anchor = el("a", run.id);
      anchor.href = run.page;  // a sweep opens the sweep's page
      link.append(anchor);
      if (run.origin !== "app") link.append(" ", el("span", `(${run.origin})`, "muted origin"));
      const train = run.latest.train || {};
      const val = run.latest.val || {};
      const status = el("span");
      status.append(el("span", run.status, `status status-${run.status}`));
      if (place.reason) status.append(" ", el("span", `(${place.reason})`, "muted reason"));
      const cells = [
        link, targetCell(place), run.task, status,
        run.total_steps ? `${run.step} / ${run.total_steps}` : run.step,
        train.loss != null ? train.loss.toFixed(4) : "",
        val.accuracy != null ? `${(val.accuracy * 100).toFixed(2)} %` : "",
        formatTime(run.started_at),
      ];
      for (const [i, cell] of cells.entries()) {
        const td = el("td");
        if (cell instanceof Node) td.append(cell); else td.textContent = cell;
        if (i === 1) td.className = "target";
        if (i === 6) td.className = "val-accuracy";
        row.append(td);
      }
      return row;
    }));
    filterRuns();
  }

  // The Runs page: refreshed when a run changes, and every few seconds while a cluster run
  // is live (its step, pending reason and badge come from the server's target watcher).
  function watchRunsPage() {
    watchRuns(() => refreshRunsTable());
    const box = $("runs-filter");
    if (box) box.addEventListener("input", filterRuns);
    setInterval(() => {
      const rows = document.querySelectorAll("#runs-table tr[data-target]");
      const live = [...rows].some((row) => row.dataset.target !== "local" &&
        ["queued", "running", "stopping"].includes(row.dataset.status));
      if (live) refreshRunsTable();
    }, 3000);
  }

  function humanBytes(n) {
    let value = n;
    for (const unit of ["B", "KiB", "MiB", "GiB"]) {
      if (value < 1024 || unit === "GiB") return unit === "B" ? `${value} B` : `${value.toFixed(1)} ${unit}`;
      value /= 1024;
    }
    return "";
  }

  async function refreshModelsTable() {
    const { ok, data } = await api("GET", "/api/models");
    if (!ok) return;
    const body = document.querySelector("#models-table tbody");
    body.replaceChildren(...data.map((model) => {
      const row = el("tr");
      row.dataset.model = model.name;
      const summary = el("td", null, "summary");
      for (const [key, value] of Object.entries(model.summary || {})) {
        const entries = key === "metrics" ? Object.entries(value) : [[key, value]];
        for (const [k, v] of entries) {
          const span = el("span");
          span.append(el("b", k), ` ${typeof v === "number" ? Number(v.toPrecision(4)) : v} `);
          summary.append(span);
        }
      }
      if (!model.summary) summary.append(el("span", "no trainforge.json", "muted"));
      const kind = model.kind === "model" ? "" : ` (${model.kind})`;
      row.append(el("td", model.name + kind), el("td", model.architecture),
        el("td", model.num_parameters ? model.num_parameters.toLocaleString("en") : "?"),
        el("td", humanBytes(model.size_bytes)), summary);
      return row;
    }));
  }

  // ------------------------------------------------------------------ telemetry
  function renderReadings(table, readings) {
    const keys = Object.keys(readings).sort();
    if (!keys.length) return;
    table.tBodies[0].replaceChildren(...keys.map((key) => {
      const row = el("tr");
      const value = readings[key];
      row.append(el("th", key), el("td", typeof value === "number" ? Number(value.toFixed(2)) : value));
      return row;
    }));
  }

  function pollTelemetry() {
    const tick = async () => {
      const { ok, data } = await api("GET", "/api/system");
      if (ok) {
        renderReadings($("telemetry"), data.telemetry.readings);
        $("telemetry-notes").replaceChildren(...data.telemetry.notes.map((n) => el("li", n)));
      }
    };
    tick();
    setInterval(tick, 2000);
  }

  document.addEventListener("DOMContentLoaded", () => {
    setUpDialog();
    for (const node of document.querySelectorAll(".time[data-time]")) {
      node.textContent = formatTime(Number(node.dataset.time));
    }
  });
  return { api, el, watchRuns, watchRunsPage, refreshRunsTable, refreshModelsTable, pollTelemetry,
           renderReadings };
})();
