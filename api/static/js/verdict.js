/* Rendering of a verification result (cuset_core's VerifyResult) shared by evals and the playground. */
"use strict";

const Verdict = (() => {
  const { el } = Cuset;
  const WORDS = {
    pass: "pass", no_code: "no code", static_reject: "static reject", compile_error: "compile error",
    runtime_error: "runtime error", shape_mismatch: "shape mismatch", value_mismatch: "value mismatch",
    timeout: "timeout", unsupported: "unsupported", internal_error: "internal error (verifier)",
  };
  const ORDER = Object.keys(WORDS);

  function badge(verdict) {
    return el("span", { class: `badge verdict verdict-${verdict}`, text: WORDS[verdict] || verdict });
  }

  /** A verdict line with tier and reason, and the details (diagnostics, numbers, log) folded. */
  function details(result) {
    if (!result) return el("p", { class: "muted small", text: "Not verified." });
    const facts = [];
    if (result.tier) facts.push(`decided at tier ${result.tier}`);
    if (result.tiers_run && result.tiers_run.length) facts.push(`ran ${result.tiers_run.join(" → ")}`);
    if (result.max_abs_diff !== null && result.max_abs_diff !== undefined) facts.push(`max |diff| ${(+result.max_abs_diff).toExponential(2)}`);
    if (result.speedup) facts.push(`speedup ×${(+result.speedup).toFixed(2)}`);
    const timings = Object.entries(result.timings_s || {}).map(([k, v]) => `${k} ${(+v).toFixed(2)} s`).join(", ");
    const diags = (result.diagnostics || []).slice(0, 20);
    const extra = [];
    if (diags.length) extra.push(el("ul", { class: "diagnostics" }, diags.map((d) =>
      el("li", { class: `diag-${d.severity}` }, el("strong", { text: d.severity }), d.line ? ` line ${d.line}: ` : ": ", d.message))));
    if (timings) extra.push(el("p", { class: "muted small", text: `Timings: ${timings}` }));
    if (result.log) extra.push(el("pre", { class: "log", text: result.log }));
    return el("div", { class: "verification" },
      el("p", {}, badge(result.verdict), " ", el("span", { text: result.reason || "" }), " ",
        el("span", { class: "muted small", text: facts.length ? `(${facts.join("; ")})` : "" })),
      extra.length ? el("details", {}, el("summary", { text: result.log ? "Verification log and details" : "Details" }), ...extra) : null);
  }

  /** Horizontal bars of sample counts by verdict (pass first, then failures). */
  function bars(counts) {
    const entries = Object.entries(counts || {}).sort((a, b) => ORDER.indexOf(a[0]) - ORDER.indexOf(b[0]));
    if (!entries.length) return el("p", { class: "muted", text: "No verdicts yet." });
    const max = Math.max(...entries.map(([, c]) => c));
    const total = entries.reduce((s, [, c]) => s + c, 0);
    return el("div", { role: "list", class: "bar-list" }, entries.map(([verdict, count]) =>
      el("div", { role: "listitem", class: "bar-row", "aria-label": `${WORDS[verdict] || verdict}: ${count} of ${total} samples` },
        el("span", { class: "bar-label", text: WORDS[verdict] || verdict }),
        el("span", { class: "bar-track" }, el("span", { class: `bar-fill verdict-${verdict}`, style: `width:${(100 * count / max).toFixed(1)}%` })),
        el("span", { class: "bar-value", text: `${count}` }))));
  }

  return { badge, details, bars, WORDS };
})();
