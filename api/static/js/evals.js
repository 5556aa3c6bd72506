/* Evals page: start an evaluation and list them, polling while any is running. */
"use strict";
(() => {
  const { api, el, fmtTime, statusBadge, poll, showError, evalMetrics, ACTIVE_EVAL } = Cuset;

  function metricsText(agg) {
    const metrics = evalMetrics(agg);
    if (!metrics.length) return "—";
    return metrics.map(([k, v]) => `${k} ${(+v).toFixed(2)}`).join(" · ");
  }

  const picked = new Set(); // eval ids ticked for comparison, in order
  const compareBtn = document.getElementById("compare-btn");
  function syncCompare() { compareBtn.disabled = picked.size !== 2; }
  compareBtn.addEventListener("click", () => {
    const [a, b] = [...picked];
    location.href = `/evals/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
  });

  function pickBox(e) {
    const box = el("input", { type: "checkbox", "aria-label": `Compare ${e.id}`, "data-pick": e.id });
    box.checked = picked.has(e.id);
    box.disabled = e.status !== "succeeded";
    box.addEventListener("change", () => {
      if (box.checked) picked.add(e.id); else picked.delete(e.id);
      syncCompare();
    });
    return box;
  }

  async function refresh() {
    const evals = (await api("/v1/evals", { query: { limit: 100 } })).data || [];
    document.getElementById("evals-empty").hidden = evals.length > 0;
    document.getElementById("evals-table").hidden = evals.length === 0;
    document.getElementById("evals-body").replaceChildren(...evals.map((e) => {
      const p = e.progress;
      return el("tr", { "data-eval": e.id },
        el("td", {}, pickBox(e)),
        el("td", {}, el("a", { href: `/evals/${encodeURIComponent(e.id)}`, class: "mono", text: e.id })),
        el("td", {}, statusBadge(e.status)),
        el("td", { class: "mono small", text: e.model }),
        el("td", { text: e.eval_file || e.problems || "—" }),
        el("td", { text: p ? `${p.done} / ${p.total}` : "—" }),
        el("td", { class: "small", text: metricsText(e.aggregate) }),
        el("td", { text: fmtTime(e.created_at) }));
    }));
    const active = evals.some((e) => ACTIVE_EVAL.has(e.status));
    document.getElementById("poll-state").textContent = active ? "Live: refreshing every 3 s" : "";
    return active;
  }

  async function loadEvalFiles() {
    const files = (await api("/v1/files", { query: { purpose: "eval", limit: 100 } })).data || [];
    document.getElementById("eval-problems").append(...files.map((f) =>
      el("option", { value: f.id, text: `${f.filename} (${f.records} problems, ${f.id})` })));
  }

  async function loadModels() {
    const models = (await api("/v1/models")).data || [];
    document.getElementById("eval-model").replaceChildren(...models.map((m) => el("option", { value: m.id, text: m.id })));
  }

  let stop = null;
  document.getElementById("eval-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const status = document.getElementById("eval-form-status");
    status.className = "small";
    status.textContent = "Starting…";
    try {
      const value = (id) => document.getElementById(id).value;
      // An option of the problems list is a demo set ("demo", "demo:held-out") or an eval file's id.
      const source = value("eval-problems");
      const body = {
        model: value("eval-model"),
        ...(source.startsWith("demo") ? { problems: source } : { eval_file: source }),
        tier: value("eval-tier"),
        samples: Number(value("eval-samples")) || 0,
        temperature: Number(value("eval-temperature")),
        top_p: Number(value("eval-top-p")),
      };
      if (value("eval-prompt-style")) body.prompt_style = value("eval-prompt-style");
      if (value("eval-max-tokens")) body.max_tokens = Number(value("eval-max-tokens"));
      if (value("eval-problem-ids").trim()) body.problem_ids = value("eval-problem-ids").trim();
      const created = await api("/v1/evals", { method: "POST", body });
      status.replaceChildren("Started ", el("a", { href: `/evals/${encodeURIComponent(created.id)}`, text: created.id }), ".");
      if (stop) stop();
      stop = poll(refresh, 3000);
    } catch (e) {
      status.className = "small alert error";
      status.textContent = e.message;
    }
  });

  loadModels().catch(showError);
  loadEvalFiles().catch(showError);
  stop = poll(refresh, 3000);
})();
