// The run page's management and artefacts: rename, tag and note (PATCH …/meta), delete
// with confirmation (refused by the server while the run is active, and the button says
// so), and Export (POST …/export, then its progress and the artefacts' summaries, latency
// and TensorRT command, polled until it ends).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const data = () => JSON.parse($("run-data").textContent);
  const run = data();
  const ACTIVE = ["queued", "running", "stopping"];

  function showMeta(view) {
    $("run-title").textContent = view.display_name || view.id;
    document.title = `${view.display_name || view.id} · trainforge`;
    $("run-tags").replaceChildren(...view.tags.map((t) => TF.el("span", t, "tag")));
    $("run-note").textContent = view.note;
    $("run-note").hidden = !view.note;
  }

  const form = $("manage-form");
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = {
        display_name: $("m-name").value,
        tags: $("m-tags").value.split(",").map((t) => t.trim()).filter(Boolean),
        note: $("m-note").value,
      };
      const { ok, data: view } = await TF.api("PATCH", `/api/runs/${encodeURIComponent(run.id)}/meta`, body);
      $("m-saved").textContent = ok ? "Saved." : (view && JSON.stringify(view.detail)) || "not saved";
      if (ok) showMeta(view);
    });
    $("m-save").disabled = false;
  }

  // Delete is offered only for a run that ended; the server refuses it otherwise too.
  async function refreshDelete() {
    const button = $("delete-button");
    if (!button) return;
    const response = await fetch(run.api, { headers: { Accept: "application/json" } });
    const view = response.ok ? await response.json() : run;
    const active = ACTIVE.includes(view.status);
    button.disabled = active;
    $("delete-hint").textContent = active ? `The run is ${view.status}: stop it before deleting it.` : "";
  }

  const del = $("delete-button");
  if (del) {
    del.addEventListener("click", async () => {
      const model = run.output_model ? ` Its model models/${run.output_model} is kept.` : "";
      if (!window.confirm(`Delete run ${run.id}? Its run folder ${run.folder} (checkpoints, metrics, report) is removed.${model}`)) return;
      const { ok, data: answer } = await TF.api("DELETE", `/api/runs/${encodeURIComponent(run.id)}`);
      if (ok) { window.location.assign("/runs"); return; }
      $("delete-hint").textContent = (answer && answer.detail) || "not deleted";
    });
    refreshDelete();
    setInterval(refreshDelete, 3000);
  }

  const sizeText = (bytes) => (bytes == null ? "" : `${(bytes / 1e6).toFixed(2)} MB`);

  function showExport(state) {
    const rows = state.artifacts.map((a) => {
      const row = TF.el("tr");
      row.dataset.format = a.format;
      const metric = a.value == null ? "" : a.metric === "accuracy"
        ? `accuracy ${(a.value * 100).toFixed(2)} %${a.delta == null ? "" : ` (${a.delta >= 0 ? "+" : ""}${(a.delta * 100).toFixed(2)} pt)`}`
        : `${a.metric} ${Number(a.value.toPrecision(4))}`;
      const latency = a.latency_p50_ms == null ? "" : `${a.latency_p50_ms.toFixed(3)} ms (${a.runtime})`;
      row.append(TF.el("td", a.format), TF.el("td", a.file),
        TF.el("td", `${sizeText(a.size_bytes)}${a.size_ratio ? ` (${a.size_ratio.toFixed(2)}x fp32)` : ""}`),
        TF.el("td", metric), TF.el("td", latency));
      return row;
    });
    $("export-results").tBodies[0].replaceChildren(...rows);
    $("export-results").hidden = !rows.length;
    const trt = state.artifacts.flatMap((a) => Object.entries(a.tensorrt || {}).map(
      ([kind, line]) => `# ${kind.toUpperCase()}\n${line}`));
    $("trtexec").textContent = trt.join("\n");
    $("tensorrt").hidden = !trt.length;
    const log = $("export-log");
    log.textContent = state.log.join("\n");
    log.hidden = !state.log.length;
    $("export-button").disabled = state.running;
    $("export-status").textContent = state.running ? "exporting…"
      : state.exit_code == null ? "" : state.exit_code === 0 ? "done" : `failed (exit ${state.exit_code}): see the output below`;
  }

  let polling = null;
  async function pollExport() {
    const { ok, data: state } = await TF.api("GET", `${run.api}/export`);
    if (!ok) return;
    showExport(state);
    if (state.running && !polling) polling = setInterval(pollExport, 1000);
    if (!state.running && polling) { clearInterval(polling); polling = null; }
  }

  const exportForm = $("export-form");
  if (exportForm && run.folder) {
    exportForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const formats = [...exportForm.querySelectorAll("input[name=format]:checked")].map((b) => b.value);
      if (!formats.length) { $("export-status").textContent = "pick a format"; return; }
      const { ok, data: state } = await TF.api("POST", `${run.api}/export`, { formats });
      if (!ok) { $("export-status").textContent = (state && JSON.stringify(state.detail)) || "refused"; return; }
      showExport(state);
      if (!polling) polling = setInterval(pollExport, 1000);
    });
    $("export-button").disabled = false;
    if (run.status === "completed") pollExport();
  }
})();
