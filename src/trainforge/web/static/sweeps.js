// The Sweeps page: start a sweep (queued like a run), list the sweeps, and for the one picked
// (/sweeps/NAME) its trials, each linked to its run page, and their validation curves
// overlaid (each trial's curve as the chart's buckets), refreshed every two seconds.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  let current = $("sweep-detail").dataset.sweep || new URLSearchParams(location.search).get("sweep");

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  async function getJSON(url) {
    const response = await fetch(url);
    return response.ok ? response.json() : null;
  }

  async function refreshList() {
    const sweeps = (await getJSON("/api/sweeps")) || [];
    const body = $("sweeps-table").tBodies[0];
    if (!sweeps.length) return;
    body.replaceChildren();
    for (const s of sweeps) {
      const row = document.createElement("tr");
      const link = document.createElement("a");
      link.href = s.page;
      link.textContent = s.name;
      cell(row, "").appendChild(link);
      cell(row, s.status);
      body.appendChild(row);
    }
    if (!current) current = sweeps[0].name;
  }

  function fmt(v) { return typeof v === "number" ? Number(v.toPrecision(5)) : v; }

  async function refreshDetail() {
    if (!current) return;
    const s = await getJSON(`/api/sweeps/${encodeURIComponent(current)}`);
    if (!s) return;
    $("sweep-detail").hidden = false;
    $("sweep-title").textContent = s.trials_total == null ? s.name
      : `${s.name}: ${s.trials.length} of ${s.trials_total} trials`;
    $("sweep-status").textContent = s.status;
    $("sweep-status").className = `status status-${s.status}`;
    const about = s.metric ? ` · ${s.metric} (${s.direction}), pruner ${s.pruner}` : "";
    $("sweep-message").textContent = `${s.status}${s.message ? ": " + s.message : ""}${about}`;
    $("sweep-metric").textContent = s.metric;
    $("sweep-stop").hidden = !["queued", "running", "stopping"].includes(s.status);
    $("sweep-resume").hidden = !["stopped", "failed"].includes(s.status);
    $("sweep-report").href = `/sweeps/${encodeURIComponent(s.name)}/report`;
    $("sweep-compare").href = "/compare?" + s.trials.map((t) => `run=${encodeURIComponent(s.name + "/" + t.trial)}`).join("&");
    $("compare-best").href = `/compare?sweep=${encodeURIComponent(s.name)}`;  // its best trials
    const body = $("sweep-trials").tBodies[0];
    body.replaceChildren();
    for (const t of s.trials) {
      const row = document.createElement("tr");
      row.dataset.state = t.state;
      const link = document.createElement("a");
      link.href = t.page;
      link.textContent = t.trial;
      cell(row, t.best ? "★ " : "").appendChild(link);
      cell(row, t.state + (t.reason ? ` (${t.reason})` : ""));
      cell(row, fmt(t.value));
      cell(row, t.steps);
      cell(row, Object.entries(t.params).map(([k, v]) => `${k}=${fmt(v)}`).join(" "));
      body.appendChild(row);
    }
    // A drag-zoom asks for that step window of every trial's curve, finer (as Compare runs).
    const fetchWindow = (lo, hi) => fetchCurvesWindow(
      s.trials.filter((t) => t.curve).map((t) => [`${s.name}/${t.trial}`, t.trial]),
      [`val_${s.metric}`], lo, hi);
    const chart = new LineChart($("sweep-curves"),
      s.trials.map((t, i) => ({ name: t.trial, color: COLORS[i % COLORS.length] })),
      { fetchWindow });
    for (const t of s.trials) if (t.curve) chart.setBuckets(t.trial, t.curve, t.curve.width);
    chart.draw();
  }

  async function start(event) {
    event.preventDefault();
    const body = {
      config: $("sw-config").value, name: $("sw-name").value, trials: Number($("sw-trials").value),
      pruner: $("sw-pruner").value, space: $("sw-space").value,
      args: $("sw-args").value.split(/\s+/).filter(Boolean),
    };
    if ($("sw-target") && $("sw-target").value !== "local") {  // a job array on a cluster
      Object.assign(body, { target: $("sw-target").value, time: $("sw-time").value.trim(),
                            parallel: Number($("sw-parallel").value) });
    }
    const response = await fetch("/api/sweeps", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const data = await response.json().catch(() => ({}));
    const errors = $("sw-errors");
    errors.replaceChildren();
    if (!response.ok) {
      const lines = data.errors || [typeof data.detail === "string" ? data.detail : "refused"];
      for (const line of lines) { const li = document.createElement("li"); li.textContent = line; errors.appendChild(li); }
      return;
    }
    location.href = `/sweeps/${encodeURIComponent(body.name)}`;
  }

  async function stop() {
    if (current) await fetch(`/api/sweeps/${encodeURIComponent(current)}/stop`, { method: "POST" });
    refreshDetail();
  }

  async function resume() {
    // A sweep started here is a queue entry: Resume queues the same command, which continues.
    if (current) await fetch(`/api/runs/${encodeURIComponent(current)}/resume`, { method: "POST" });
    refreshDetail();
  }

  $("sweep-form").addEventListener("submit", start);
  $("sweep-resume").addEventListener("click", resume);
  $("sweep-stop").addEventListener("click", stop);
  const tick = async () => { await refreshList(); await refreshDetail(); };
  tick();
  setInterval(tick, 2000);
})();
