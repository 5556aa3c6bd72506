/* The kernel view: one record's answer with its CUDA-sensitive regions outlined by category,
 * sensitive spans tinted, a legend with category toggles, and the list of regions.
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

  const codeEl = document.getElementById("code");
  let focused = null;

  /** Nest regions and spans (intervals sorted outer-first) into DOM nodes over `text`. */
  function renderCode(text, regions, spans) {
    const intervals = [
      ...regions.map((r) => ({ start: r.start, end: r.end, rank: 0, make: () => el("span", {
        class: `region cat-${r.category}`, "data-region": r.id, "data-category": r.category,
        title: `${LABEL[r.category] || r.category} · ${r.kind.replace(/_/g, " ")}` }) })),
      ...spans.map((s, i) => ({ start: s.start, end: s.end, rank: 1, make: () => el("span", {
        class: `sspan cat-${s.category}`, "data-span": i, "data-category": s.category }) })),
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

  function render(record) {
    const { answer, analysis } = record;
    const regions = analysis.regions || [], spans = analysis.spans || [];
    codeEl.replaceChildren(renderCode(answer, regions, spans));
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
    document.getElementById("kernel-stats").replaceChildren(...stats.map(([value, label]) =>
      el("div", { class: "stat" }, el("strong", { text: value }), el("span", { text: label }))));

    const regionCount = {}, spanCount = {};
    for (const r of regions) regionCount[r.category] = (regionCount[r.category] || 0) + 1;
    for (const s of spans) spanCount[s.category] = (spanCount[s.category] || 0) + 1;
    document.getElementById("legend").replaceChildren(...CATEGORIES.map(([id, label, hint]) => {
      const box = el("input", { type: "checkbox", id: `cat-${id}`, checked: true, disabled: !spanCount[id],
        onchange: (ev) => codeEl.classList.toggle(`hide-${id}`, !ev.target.checked) });
      return el("li", { class: spanCount[id] ? "" : "absent" }, box,
        el("label", { for: `cat-${id}` }, el("span", { class: `swatch cat-${id}`, "aria-hidden": "true" }),
          el("span", { class: "legend-label", text: label }),
          el("span", { class: "legend-count", text: spanCount[id] ? `${spanCount[id]} spans · ${regionCount[id] || 0} regions` : "none" }),
          el("span", { class: "legend-hint", text: hint })));
    }));

    document.getElementById("region-count").textContent = `(${regions.length})`;
    const list = document.getElementById("region-list");
    if (!regions.length) {
      list.replaceChildren(el("li", { class: "muted", text: "No CUDA-sensitive code found in this answer." }));
    } else {
      list.replaceChildren(...regions.map((r) => {
        const excerpt = answer.slice(r.start, r.end).replace(/\s+/g, " ").trim();
        return el("li", { "data-region": r.id },
          el("button", { type: "button", class: "region-item", "aria-label": `Region ${r.id}: ${LABEL[r.category] || r.category}, line ${lineOf(answer, r.start)}`,
            onclick: () => focusRegion(r.id, true) },
            el("span", { class: `swatch cat-${r.category}`, "aria-hidden": "true" }),
            el("span", { class: "region-head" }, el("strong", { text: LABEL[r.category] || r.category }),
              el("span", { class: "muted small", text: ` ${r.kind.replace(/_/g, " ")} · line ${lineOf(answer, r.start)}` })),
            el("code", { class: "region-text", text: excerpt.length > 90 ? `${excerpt.slice(0, 88)}…` : excerpt })));
      }));
    }
    codeEl.addEventListener("click", (ev) => {
      const node = ev.target.closest(".region");
      if (node) {
        focusRegion(Number(node.dataset.region), false);
        const item = document.querySelector(`#region-list [data-region="${node.dataset.region}"]`);
        item && item.scrollIntoView({ block: "nearest" });
      }
    });
    document.getElementById("record-body").setAttribute("aria-busy", "false");
  }

  api(`/v1/files/${encodeURIComponent(fileId)}/records/${n}/analysis`).then(render).catch((e) => {
    const body = document.getElementById("record-body");
    if (e.status === 404 || e.status === 400) {
      body.replaceChildren(el("div", { class: "empty" }, el("h2", { text: "No kernel to show" }), el("p", { text: e.message }),
        el("p", {}, el("a", { href: `/files/${encodeURIComponent(fileId)}`, text: "Back to the file's records" }))));
      const next = document.getElementById("next-record");
      next && next.remove();
    } else showError(e);
  });
})();
