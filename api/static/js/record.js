/* The kernel view: one record's answer with its CUDA-sensitive regions outlined by category,
 * sensitive spans tinted, a legend with category toggles, and the list of regions.
 * Picking a model fetches the analysis again with ?model=: every answer token is then tinted by
 * p, the model's probability of it (a sequential warm scale: the less sure, the warmer), and the
 * regions whose mean p is below the threshold get a dashed outline and lead the region list.
 * Offsets in the analysis are answer characters (JavaScript string indices match them for the
 * BMP text code is written in). */
"use strict";
(() => {
  const { api, el, fmtNumber, showError } = Cuset;
  const fileId = window.CUSET_FILE_ID;
  const n = window.CUSET_RECORD;

  // Order and wording follow cuset_core.analysis.categories (DOMINANCE order).
  const CATEGORIES = [
    ["launch", "Launch", "<<<grid, block>>>, dim3 and the values feeding a launch"],
    ["sync", "Barrier / fence", "__syncthreads, __syncwarp, memory fences"],
    ["warp", "Warp primitive", "__shfl*, __ballot*, lane masks"],
    ["atomic", "Atomic", "atomicAdd and other read-modify-writes"],
    ["bounds_guard", "Bounds guard", "conditions comparing an index with a size"],
    ["indexing", "Thread indexing", "threadIdx / blockIdx / blockDim arithmetic"],
    ["qualifier", "Qualifier", "__global__, __device__, __launch_bounds__"],
    ["memory_space", "Memory space", "__shared__, __constant__, __restrict__"],
    ["memory_api", "CUDA runtime API", "cudaMalloc, cudaMemcpy, …"],
    ["binding", "PyTorch binding", "tensors, data_ptr, checks, streams, load_inline"],
  ];
  const LABEL = Object.fromEntries(CATEGORIES.map(([id, label]) => [id, label]));
  // Upper bounds of the p classes; class i is tinted by .conf-b{i} (dashboard.css).
  const P_BINS = [0.1, 0.25, 0.5, 0.75, 0.9, Infinity];
  const binOf = (p) => P_BINS.findIndex((upper) => p < upper);
  const fmtP = (p) => (p === null || p === undefined ? "—" : p < 0.001 ? p.toExponential(1) : p.toFixed(3));

  const codeEl = document.getElementById("code");
  const modelSelect = document.getElementById("conf-model");
  const stateEl = document.getElementById("conf-state");
  const analysisPath = `/v1/files/${encodeURIComponent(fileId)}/records/${n}/analysis`;
  let focused = null;
  let base = null; // the analysis without confidence, fetched once
  let pending = null; // AbortController of the confidence request in flight

  /** Token pieces cut at every region and span boundary, so they nest inside the outlines. */
  function tokenPieces(text, tokens, regions, spans) {
    const cuts = [...new Set([...regions, ...spans].flatMap((r) => [r.start, r.end]))].sort((a, b) => a - b);
    const pieces = [];
    let c = 0;
    for (const t of tokens) {
      while (c < cuts.length && cuts[c] <= t.start) c++;
      let start = t.start;
      for (let k = c; k < cuts.length && cuts[k] < t.end; k++) {
        pieces.push({ start, end: cuts[k], p: t.p });
        start = cuts[k];
      }
      pieces.push({ start, end: t.end, p: t.p });
    }
    // Indentation and line breaks keep their p (in the title) but no tint: code stays legible.
    for (const piece of pieces) piece.blank = !/\S/.test(text.slice(piece.start, piece.end));
    return pieces;
  }

  /** Nest regions, spans and tokens (intervals sorted outer-first) into DOM nodes over `text`.
   * `conf` (or null): {tokens, scores: region id -> {mean_p, min_p}, threshold}. */
  function renderCode(text, regions, spans, conf) {
    const regionNode = (r) => {
      const score = conf && conf.scores[r.id];
      const low = score && score.mean_p < conf.threshold;
      const title = `${LABEL[r.category] || r.category} · ${r.kind.replace(/_/g, " ")}` +
        (score ? ` · mean p ${fmtP(score.mean_p)}${low ? " (low confidence)" : ""}` : "");
      return el("span", { class: `region cat-${r.category}${low ? " low-conf" : ""}`, "data-region": r.id,
        "data-category": r.category, title });
    };
    const intervals = [
      ...regions.map((r) => ({ start: r.start, end: r.end, rank: 0, make: () => regionNode(r) })),
      ...spans.map((s, i) => ({ start: s.start, end: s.end, rank: 1, make: () => el("span", {
        class: `sspan cat-${s.category}`, "data-span": i, "data-category": s.category }) })),
      ...(conf ? tokenPieces(text, conf.tokens, regions, spans) : []).map((t) => ({ start: t.start, end: t.end, rank: 2,
        make: () => el("span", { class: `tok conf-b${binOf(t.p)}${t.blank ? " blank" : ""}`, "data-p": t.p.toPrecision(3),
                                 title: `p = ${fmtP(t.p)}` }) })),
    ].sort((a, b) => a.start - b.start || b.end - a.end || a.rank - b.rank);
    const root = document.createElement("code");
    const stack = [{ end: text.length, node: root }];
    let pos = 0;
    const emit = (node, upto) => { if (upto > pos) { node.append(text.slice(pos, upto)); pos = upto; } };
    for (const iv of intervals) {
      while (iv.start >= stack[stack.length - 1].end && stack.length > 1) {
        const top = stack.pop();
        emit(top.node, top.end);
      }
      const parent = stack[stack.length - 1];
      emit(parent.node, iv.start);
      const node = iv.make();
      parent.node.append(node);
      stack.push({ end: Math.min(iv.end, parent.end), node });
    }
    while (stack.length) { const top = stack.pop(); emit(top.node, top.end); }
    return root;
  }

  function lineOf(text, offset) {
    let line = 1;
    for (let i = 0; i < offset; i++) if (text.charCodeAt(i) === 10) line++;
    return line;
  }

  function focusRegion(id, scroll) {
    if (focused !== null) {
      for (const node of document.querySelectorAll(`[data-region="${focused}"]`)) node.classList.remove("focus");
    }
    focused = id;
    const codeNode = codeEl.querySelector(`.region[data-region="${id}"]`);
    const item = document.querySelector(`#region-list [data-region="${id}"]`);
    codeNode && codeNode.classList.add("focus");
    item && item.classList.add("focus");
    if (scroll && codeNode) codeNode.scrollIntoView({ block: "center", inline: "nearest", behavior: "smooth" });
  }

  /** The confidence of `record` for renderCode, or null when it has none. */
  function confidenceOf(record) {
    const c = record.confidence;
    if (!c) return null;
    return { model: c.model, tokens: c.tokens, threshold: c.low_confidence_threshold,
             scores: Object.fromEntries(c.regions.map((r) => [r.index, r])) };
  }

  function render(record) {
    const { answer, analysis } = record;
    const regions = analysis.regions || [], spans = analysis.spans || [];
    const conf = confidenceOf(record);
    const isLow = (r) => conf && conf.scores[r.id] && conf.scores[r.id].mean_p < conf.threshold;
    codeEl.replaceChildren(renderCode(answer, regions, spans, conf));
    codeEl.classList.toggle("with-confidence", Boolean(conf));
    codeEl.setAttribute("aria-label", conf ? `Answer with tokens tinted by the confidence of ${conf.model} and CUDA-sensitive regions outlined`
                                           : "Answer with CUDA-sensitive regions outlined");
    focused = null;
    const lines = answer.split("\n").length;
    document.getElementById("gutter").textContent = Array.from({ length: lines }, (_, i) => i + 1).join("\n");

    const sensitiveChars = spans.reduce((sum, s) => sum + (s.end - s.start), 0);
    const stats = [
      [fmtNumber(regions.length), "regions"],
      [fmtNumber(spans.length), "sensitive spans"],
      [analysis.cuda_chars ? `${(100 * sensitiveChars / analysis.cuda_chars).toFixed(1)}%` : "—", "of CUDA/C++ characters sensitive"],
      [`${(100 * (analysis.parse_coverage || 0)).toFixed(0)}%`, "parsed cleanly"],
      [analysis.language === "cu" ? ".cu" : "Python + load_inline", "answer language"],
    ];
    if (conf) {
      const meanP = conf.tokens.length ? conf.tokens.reduce((sum, t) => sum + t.p, 0) / conf.tokens.length : null;
      stats.push([fmtP(meanP), `mean p of ${fmtNumber(conf.tokens.length)} tokens`],
                 [`${regions.filter(isLow).length} / ${regions.length}`, "low-confidence regions"]);
    }
    document.getElementById("kernel-stats").replaceChildren(...stats.map(([value, label]) =>
      el("div", { class: "stat" }, el("strong", { text: value }), el("span", { text: label }))));

    const regionCount = {}, spanCount = {};
    for (const r of regions) regionCount[r.category] = (regionCount[r.category] || 0) + 1;
    for (const s of spans) spanCount[s.category] = (spanCount[s.category] || 0) + 1;
    document.getElementById("legend").replaceChildren(...CATEGORIES.map(([id, label, hint]) => {
      const box = el("input", { type: "checkbox", id: `cat-${id}`, checked: !codeEl.classList.contains(`hide-${id}`),
        disabled: !spanCount[id], onchange: (ev) => codeEl.classList.toggle(`hide-${id}`, !ev.target.checked) });
      return el("li", { class: spanCount[id] ? "" : "absent" }, box,
        el("label", { for: `cat-${id}` }, el("span", { class: `swatch cat-${id}`, "aria-hidden": "true" }),
          el("span", { class: "legend-label", text: label }),
          el("span", { class: "legend-count", text: spanCount[id] ? `${spanCount[id]} spans · ${regionCount[id] || 0} regions` : "none" }),
          el("span", { class: "legend-hint", text: hint })));
    }));
    renderConfidenceLegend(conf);

    document.getElementById("region-count").textContent = `(${regions.length})`;
    const list = document.getElementById("region-list");
    if (!regions.length) {
      list.replaceChildren(el("li", { class: "muted", text: "No CUDA-sensitive code found in this answer." }));
    } else {
      // With a model: the low-confidence regions first, least sure first; the rest in answer order.
      const meanOf = (r) => conf.scores[r.id].mean_p;
      const ordered = conf ? [...regions.filter(isLow).sort((a, b) => meanOf(a) - meanOf(b)),
                              ...regions.filter((r) => !isLow(r))] : regions;
      list.replaceChildren(...ordered.map((r) => {
        const excerpt = answer.slice(r.start, r.end).replace(/\s+/g, " ").trim();
        const score = conf && conf.scores[r.id];
        const low = isLow(r);
        const where = `${LABEL[r.category] || r.category}, line ${lineOf(answer, r.start)}`;
        const confidenceText = score ? `, mean p ${fmtP(score.mean_p)}${low ? ", low confidence" : ""}` : "";
        return el("li", { "data-region": r.id, class: low ? "low-conf" : "" },
          el("button", { type: "button", class: "region-item", "aria-label": `Region ${r.id}: ${where}${confidenceText}`,
            onclick: () => focusRegion(r.id, true) },
            el("span", { class: `swatch cat-${r.category}`, "aria-hidden": "true" }),
            el("span", { class: "region-head" }, el("strong", { text: LABEL[r.category] || r.category }),
              el("span", { class: "muted small", text: ` ${r.kind.replace(/_/g, " ")} · line ${lineOf(answer, r.start)}` }),
              score ? el("span", { class: `region-p conf-b${binOf(score.mean_p)}`, text: `p̄ ${fmtP(score.mean_p)}` }) : null,
              low ? el("span", { class: "badge low-conf-badge", text: "low confidence" }) : null),
            el("code", { class: "region-text", text: excerpt.length > 90 ? `${excerpt.slice(0, 88)}…` : excerpt })));
      }));
    }
  }

  /** The p colour scale and the threshold, shown while a model's confidence is on screen. */
  function renderConfidenceLegend(conf) {
    const legend = document.getElementById("conf-legend");
    legend.hidden = !conf;
    if (!conf) return;
    let lower = 0;
    document.getElementById("conf-scale").replaceChildren(...P_BINS.map((upper, i) => {
      const text = upper === Infinity ? `≥ ${lower}` : `${lower}–${upper}`;
      lower = upper;
      return el("li", {}, el("span", { class: `conf-chip conf-b${i}`, "aria-hidden": "true" }), el("span", { text }));
    }));
    document.getElementById("conf-threshold").textContent = String(conf.threshold);
  }

  function showNoKernel(e) {
    const body = document.getElementById("record-body");
    body.replaceChildren(el("div", { class: "empty" }, el("h2", { text: "No kernel to show" }), el("p", { text: e.message }),
      el("p", {}, el("a", { href: `/files/${encodeURIComponent(fileId)}`, text: "Back to the file's records" }))));
    const next = document.getElementById("next-record");
    next && next.remove();
  }

  function setState(text, kind) {
    stateEl.textContent = text;
    stateEl.className = `conf-state small ${kind || "muted"}`;
  }

  /** Show `model`'s confidence (or none for ""); the request in flight for another model is dropped. */
  async function showModel(model) {
    if (pending) pending.abort();
    pending = null;
    const url = new URL(location.href);
    if (model) url.searchParams.set("model", model); else url.searchParams.delete("model");
    history.replaceState(null, "", url);
    if (!model) { setState(""); render(base); return; }
    const controller = pending = new AbortController();
    setState(`Computing the confidence of ${model}…`, "busy");
    document.getElementById("record-body").setAttribute("aria-busy", "true");
    try {
      const record = await api(analysisPath, { query: { model }, signal: controller.signal });
      render(record);
      setState(`Tokens tinted by the confidence of ${model}.`);
    } catch (e) {
      if (e.name === "AbortError") return;
      render(base);
      setState(e.message, "bad");
    } finally {
      if (pending === controller) {
        pending = null;
        document.getElementById("record-body").setAttribute("aria-busy", "false");
      }
    }
  }

  async function loadModels(wanted) {
    try {
      const models = (await api("/v1/models")).data || [];
      modelSelect.append(...models.map((m) => el("option", { value: m.id, text: m.id })));
      if (wanted && models.some((m) => m.id === wanted)) {
        modelSelect.value = wanted;
        showModel(wanted);
      }
    } catch (e) {
      setState(`Models are unavailable: ${e.message}`, "bad");
    }
  }

  codeEl.addEventListener("click", (ev) => {
    const node = ev.target.closest(".region");
    if (node) {
      focusRegion(Number(node.dataset.region), false);
      const item = document.querySelector(`#region-list [data-region="${node.dataset.region}"]`);
      item && item.scrollIntoView({ block: "nearest" });
    }
  });
  modelSelect.addEventListener("change", () => showModel(modelSelect.value));

  api(analysisPath).then((record) => {
    base = record;
    render(record);
    document.getElementById("record-body").setAttribute("aria-busy", "false");
    loadModels(new URLSearchParams(location.search).get("model"));
  }).catch((e) => {
    if (e.status === 404 || e.status === 400) showNoKernel(e);
    else showError(e);
  });
})();
