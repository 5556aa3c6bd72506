/* Compare page: two evals of the same problems, metric by metric, with paired bootstrap intervals. */
"use strict";
(() => {
  const { api, el, showError } = Cuset;
  const params = new URLSearchParams(location.search);
  const a = params.get("a"), b = params.get("b");
  const fmt = (v) => (+v).toFixed(3);
  const signed = (v) => `${v >= 0 ? "+" : ""}${fmt(v)}`;

  function reading(interval) {
    if (interval.low > 0) return el("span", { class: "badge verdict-pass", text: "A better" });
    if (interval.high < 0) return el("span", { class: "badge verdict-value_mismatch", text: "B better" });
    return el("span", { class: "muted small", text: "no clear difference" });
  }

  async function load() {
    const link = (id) => el("a", { href: `/evals/${encodeURIComponent(id)}`, class: "mono", text: id });
    document.getElementById("compare-sides").replaceChildren("A: ", link(a), " · B: ", link(b));
    const comparison = await api("/v1/evals/compare", { query: { a, b } });
    document.getElementById("compare-rows").replaceChildren(...comparison.intervals.map((i) => el("tr", { "data-metric": i.metric },
      el("td", { class: "mono small", text: i.metric }),
      el("td", { class: "num", text: String(i.problems) }),
      el("td", { class: "num", text: fmt(i.a) }),
      el("td", { class: "num", text: fmt(i.b) }),
      el("td", { class: "num", text: signed(i.difference) }),
      el("td", { class: "mono small", text: `[${signed(i.low)}, ${signed(i.high)}]` }),
      el("td", {}, reading(i)))));
    document.getElementById("compare-skipped").textContent = (comparison.skipped || []).length
      ? `Left out: ${comparison.skipped.join("; ")}` : "";
    document.getElementById("compare-body").setAttribute("aria-busy", "false");
  }

  if (!a || !b) {
    document.getElementById("compare-rows").replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "muted",
      text: "Pick two evals on the Evals page (the boxes in the first column), then Compare." })));
  } else {
    load().catch((e) => {
      document.getElementById("compare-rows").replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "muted", text: e.message })));
      showError(e);
    });
  }
})();
