/* Eval page: aggregate metrics, failures by verdict, and every problem with its kernels and logs. */
"use strict";
(() => {
  const { api, listAll, el, fmtTime, fmtDuration, statusBadge, poll, evalMetrics, ACTIVE_EVAL } = Cuset;
  const evalId = window.CUSET_EVAL_ID;
  const path = `/v1/evals/${encodeURIComponent(evalId)}`;
  const open = new Set(); // problems the reader unfolded survive refreshes

  function fact(term, value) { return el("div", {}, el("dt", { text: term }), el("dd", {}, value)); }

  function tile(label, value, hint) {
    return el("div", { class: "tile" }, el("span", { class: "tile-value", text: value }), el("span", { class: "tile-label", text: label }),
      hint ? el("span", { class: "tile-hint", text: hint }) : null);
  }

  function renderEval(e) {
    document.getElementById("eval-status").replaceChildren(statusBadge(e.status));
    const c = e.config || {};
    const p = e.progress;
    document.getElementById("eval-facts").replaceChildren(...[
      fact("Model", el("code", { text: e.model })),
      fact("Problems", e.eval_file ? el("a", { href: `/files/${encodeURIComponent(e.eval_file)}`, text: e.eval_file }) : (e.problems || "—")),
      fact("Progress", p ? `${p.generated ?? p.done} generated · ${p.done} verified, of ${p.total} problems` : "—"),
      fact("Verified up to", c.tier || "—"),
      fact("Greedy sample", c.greedy === false ? "no" : "yes, drawn apart"),
      fact("i.i.d. samples per problem", c.samples ?? "—"),
      fact("Repair rounds", c.repair_rounds ? `${c.repair_rounds}: a failing sample is sent back with its verifier error` : "none"),
      fact("Correctness trials", c.trials ?? "—"),
      fact("Tolerances", c.tolerance_profile ? `${c.tolerance_profile}${c.atol != null ? `, atol ${c.atol}` : ""}${c.rtol != null ? `, rtol ${c.rtol}` : ""}` : "—"),
      fact("Created", fmtTime(e.created_at)),
      fact("Finished", fmtTime(e.finished_at)),
      fact("Took", e.finished_at ? fmtDuration(e.finished_at - e.created_at) : "—"),
    
    ]);
    const err = document.getElementById("eval-error");
    err.hidden = !e.error;
    if (e.error) err.textContent = `${e.error.message} (${e.error.code})`;
    const agg = e.aggregate;
    if (agg) {
      const metrics = evalMetrics(agg);
      const tiles = metrics.map(([k, v]) => tile(k, `${(100 * v).toFixed(1)}%`, k.includes("fast_") ? "correct and faster than PyTorch" : null));
      for (const [pth, v] of Object.entries(agg.fast_p || {})) tiles.push(tile(`fast_${pth}`, `${(100 * v).toFixed(1)}%`, "correct and faster than PyTorch"));
      const kb = agg.kernelbench;
      if (kb) {
        for (const pth of ["0.0", "1.0", "1.5"]) tiles.push(tile(`KernelBench fast_${pth}`, `${(100 * kb.fast_p[pth]).toFixed(1)}%`, "one scored sample per problem, vs eager"));
        if (kb.geo_mean_speedup != null) tiles.push(tile("geo-mean speedup", `×${kb.geo_mean_speedup.toFixed(2)}`, "correct kernels, vs eager"));
      }
      tiles.push(tile("problems", String(agg.problems)), tile("samples", String(agg.samples)));
      if (agg.repaired) tiles.push(tile("repair attempts", String(agg.repaired.repairs), `within ${agg.repaired.rounds} rounds; not counted in samples`));
      if (agg.internal_errors) tiles.push(tile("internal errors", String(agg.internal_errors), "verifier faults, left out of every metric"));
      if (!metrics.length) {
        tiles.push(el("p", { class: "muted small", text: `No pass@k metrics: verification stopped at the ${agg.tier || c.tier} tier; compile@k needs the compile tier or above.` }));
      }
      document.getElementById("metric-tiles").replaceChildren(...tiles);
    }
  }

  function problemCard(pr) {
    const row = pr.row || {};
    const verdicts = Object.entries(row.verdicts || {});
    const greedy = row.greedy ? [el("span", { class: "muted small", text: "greedy " }),
      Object.keys(row.greedy.verdicts || {}).map((v) => [Verdict.badge(v), " "])] : [];
    const summary = el("summary", {},
      el("strong", { class: "mono", text: pr.id }), " ", greedy,
      row.n ? el("span", { class: "muted small", text: "i.i.d. " }) : null,
      verdicts.map(([v, n]) => [Verdict.badge(v), n > 1 ? ` ×${n} ` : " "]),
      row.n ? el("span", { class: "muted small", text: `compiled ${row.compiled ?? 0}/${row.n} · cpu-correct ${row.cpu_correct ?? 0} · mixed ${row.mixed_correct ?? 0} · correct ${row.correct ?? 0}` }) : null);
    const samples = (pr.samples || []).map((s) => el("div", { class: "sample" },
      el("h4", { text: `${s.round ? `Repair ${s.round} of attempt ${s.repair_of}${s.greedy ? " (greedy)" : ""}` : s.greedy ? "Greedy sample" : `Sample ${s.index}`}${s.finish_reason === "length" ? " · stopped at max tokens" : ""}${s.completion_tokens ? ` · ${s.completion_tokens} tokens` : ""}` }),
      Verdict.details(s.result),
      el("pre", { class: "code small-code" }, el("code", { text: (s.code || s.answer || "").trim() ? (s.code || s.answer) : "(the model wrote only whitespace)" }))));
    const details = el("details", { class: "problem", "data-problem": pr.id, open: open.has(pr.id) }, summary, ...samples);
    details.addEventListener("toggle", () => (details.open ? open.add(pr.id) : open.delete(pr.id)));
    return details;
  }

  async function refresh() {
    const e = await api(path);
    renderEval(e);
    const problems = await listAll(`${path}/problems`, { max: 2000 });
    if (problems.length) document.getElementById("problems").replaceChildren(...problems.map(problemCard));
    const counts = (e.aggregate && e.aggregate.verdicts) || problems.reduce((acc, pr) => {
      for (const [v, n] of Object.entries((pr.row || {}).verdicts || {})) acc[v] = (acc[v] || 0) + n;
      return acc;
    }, {});
    document.getElementById("verdict-chart").replaceChildren(Verdict.bars(counts));
    document.getElementById("eval-body").setAttribute("aria-busy", "false");
    return ACTIVE_EVAL.has(e.status);
  }

  poll(async () => {
    try { return await refresh(); }
    catch (e) {
      if (e.status === 404) {
        document.getElementById("eval-body").replaceChildren(el("div", { class: "empty" }, el("h2", { text: "Eval not found" }),
          el("p", { text: e.message }), el("p", {}, el("a", { href: "/evals", text: "Back to all evals" }))));
        return false;
      }
      throw e;
    }
  }, 3000);

  // The samples as KernelBench writes a run (a tar), fetched with the page's API key.
  for (const button of document.querySelectorAll("[data-kb-level]")) {
    button.addEventListener("click", async () => {
      try {
        const response = await Cuset.api(`/v1/evals/${encodeURIComponent(evalId)}/kernelbench_run`,
          { query: { level: button.dataset.kbLevel }, raw: true });
        const link = el("a", { href: URL.createObjectURL(await response.blob()), download: `${evalId}-kernelbench-run.tar` });
        link.click();
        URL.revokeObjectURL(link.href);
      } catch (e) { Cuset.showError(e); }
    });
  }
})();
