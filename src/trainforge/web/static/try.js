// The Models page's Try it box: POST /api/models/try, the answers side by side. Text from
// the server is inserted as text, never as HTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const form = $("try-form");
  if (!form) return;

  function showBase() {
    const option = $("try-model").selectedOptions[0];
    const base = option ? option.dataset.base : "";
    $("try-base").disabled = !base;
    if (!base) $("try-base").checked = false;
    $("try-base-name").textContent = base ? `(${base})` : "(none recorded)";
  }

  async function ask(event) {
    event.preventDefault();
    const body = {
      model: $("try-model").value,
      prompt: $("try-prompt").value,
      compare_base: $("try-base").checked,
    };
    if (!body.model || !body.prompt.trim()) return;
    $("try-ask").disabled = true;
    $("try-status").textContent = "asking…";
    $("try-answers").replaceChildren();
    const { ok, data } = await TF.api("POST", "/api/models/try", body);
    $("try-ask").disabled = false;
    if (!ok) {
      const detail = data && data.detail;
      $("try-status").textContent = typeof detail === "string" ? detail : "the model did not answer";
      return;
    }
    $("try-status").textContent = "";
    for (const [label, text] of Object.entries(data.answers)) {
      const column = TF.el("div", null, "try-answer");
      column.append(TF.el("h3", label), TF.el("pre", text || "(empty answer)"));
      $("try-answers").append(column);
    }
  }

  $("try-model").addEventListener("change", showBase);
  form.addEventListener("submit", ask);
  showBase();
})();
