/* Line charts of per-step training metrics with uPlot (stays smooth with 10,000+ points).
 * MetricCharts.update(rows) takes the metric rows ({step, <name>: number, ...}) seen so far and
 * redraws; charts are created for the groups that have data. */
"use strict";

const MetricCharts = (() => {
  const GROUPS = [
    { id: "loss", title: "Loss and plain cross-entropy", series: [["loss", "loss (objective)", "#2563eb"], ["ce", "plain CE", "#f97316"]] },
    { id: "kept", title: "Kept-token ratio", series: [["kept_ratio", "kept ratio", "#16a34a"]], range: [0, 1] },
    { id: "weight", title: "Sample weight", series: [["weight_mean", "mean", "#7c3aed"], ["weight_max", "max", "#c4b5fd"]] },
    { id: "lowconf", title: "Low-confidence region share", series: [["low_conf_region_share", "share", "#dc2626"]], range: [0, 1] },
    { id: "conf", title: "Mean confidence p (sensitive vs other)", series: [["p_sensitive_mean", "sensitive", "#c026d3"], ["p_nonsensitive_mean", "non-sensitive", "#64748b"]], range: [0, 1] },
    { id: "lr", title: "Learning rate", series: [["learning_rate", "lr", "#0891b2"]] },
    { id: "tps", title: "Tokens per second", series: [["tokens_per_s", "tokens/s", "#b45309"]] },
  ];
  const SKIP = new Set(["step", "epoch", "max_steps", "trained_tokens", "eta_s", "type", "created_at", "job_id", "object"]);
  const EXTRA_COLORS = ["#0d9488", "#be123c", "#4d7c0f", "#9333ea", "#0369a1"];

  function create(container) {
    const charts = new Map();
    let lastRows = [];

    function groupsFor(rows) {
      const seen = new Set();
      for (const r of rows) for (const [k, v] of Object.entries(r)) if (typeof v === "number" && !SKIP.has(k)) seen.add(k);
      const known = new Set(GROUPS.flatMap((g) => g.series.map((s) => s[0])));
      const groups = GROUPS.map((g) => ({ ...g, series: g.series.filter((s) => seen.has(s[0])) })).filter((g) => g.series.length);
      let i = 0;
      for (const name of [...seen].filter((k) => !known.has(k)).sort()) {
        groups.push({ id: `x-${name}`, title: name.replace(/_/g, " "), series: [[name, name, EXTRA_COLORS[i++ % EXTRA_COLORS.length]]] });
      }
      return groups;
    }

    // Plot width of a figure: its content box (the grid decides how wide each figure is).
    function width(box) { return Math.max(220, box.clientWidth - 12); }
    const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

    function build(group, data) {
      const box = Cuset.el("figure", { class: "chart", "data-chart": group.id },
        Cuset.el("figcaption", { text: group.title }));
      container.append(box);
      const opts = {
        width: width(box),
        height: 220,
        scales: { x: { time: false }, y: group.range ? { range: group.range } : {} },
        axes: [{ label: "step", stroke: "#475569", grid: { stroke: "#eef2f7" }, incrs: STEP_INCRS },
               { stroke: "#475569", grid: { stroke: "#eef2f7" }, size: 60,
                 values: (u, vals) => vals.map((v) => (Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(2) : +v.toPrecision(4))) }],
        series: [{ label: "step" }, ...group.series.map(([, label, color]) => ({ label, stroke: color, width: 1.75, spanGaps: true,
          // A line needs two steps: with fewer, the steps are drawn as dots so the chart is never empty.
          points: { show: (u) => u.data[0].length < 2, size: 7 } }))],
        legend: { live: true },
        cursor: { drag: { x: true, y: false }, sync: { key: "cuset-steps" } },
      };
      const plot = new uPlot(opts, data, box);
      charts.set(group.id, { plot, group, box });
    }

    function dataFor(group, rows) {
      const xs = rows.map((r) => r.step);
      return [xs, ...group.series.map(([key]) => rows.map((r) => (typeof r[key] === "number" ? r[key] : null)))];
    }

    function update(rows) {
      lastRows = rows;
      if (!rows.length) return;
      if (!charts.size) container.replaceChildren();
      for (const group of groupsFor(rows)) {
        const data = dataFor(group, rows);
        const existing = charts.get(group.id);
        if (existing && existing.group.series.length === group.series.length) existing.plot.setData(data);
        else {
          if (existing) { existing.plot.destroy(); existing.box.remove(); charts.delete(group.id); }
          build(group, data);
        }
      }
    }

    function resize() {
      for (const { plot, box } of charts.values()) plot.setSize({ width: width(box), height: 220 });
    }
    window.addEventListener("resize", () => { clearTimeout(resize.t); resize.t = setTimeout(resize, 120); });

    return { update, points: () => lastRows.length };
  }

  return { create };
})();
