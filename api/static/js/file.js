/* File page: the file's facts, its records with validation warnings, and a form to start a job. */
"use strict";
(() => {
  const { api, el, fmtTime, fmtNumber, fmtBytes, showError } = Cuset;
  const fileId = window.CUSET_FILE_ID;
  const filePath = `/v1/files/${encodeURIComponent(fileId)}`;
  const PAGE = 50;
  let offset = Number(new URLSearchParams(location.search).get("offset")) || 0;

  function fact(term, value) { return el("div", {}, el("dt", { text: term }), el("dd", {}, value)); }

  /** What a prompt asks for: the reference Model's docstring when the excerpt holds one. */
  function promptGist(prompt) {
    const at = prompt.indexOf("class Model");
    if (at < 0) return prompt;
    const doc = /"""\s*([^"\n]+)/.exec(prompt.slice(at));
    return doc ? `Model: ${doc[1].trim()}` : prompt.slice(at);
  }

  /** The answer without its opening fence and import lines, which every record shares. */
  function answerGist(answer) {
    return answer.split("\n").filter((line) => !/^(```\w*|import .*|from \S+ import .*|\s*)$/.test(line)).join("\n") || answer;
  }

  function warningList(warnings) {
    if (!warnings.length) return el("span", { class: "ok", text: "✓ valid" });
    return el("ul", { class: "warnings" }, warnings.map((w) => el("li", {},
      el("span", { class: "badge warn", text: w.code }), " ", w.message, w.field ? el("span", { class: "muted small", text: ` (${w.field})` }) : null)));
  }

  async function loadRecords() {
    const page = await api(`${filePath}/records`, { query: { offset, limit: PAGE } });
    const rows = page.data || [];
    document.getElementById("records-count").textContent = `${fmtNumber(page.total)} in total`;
    const body = document.getElementById("records-body");
    if (!rows.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "This file holds no records." })));
    } else {
      body.replaceChildren(...rows.map((r) => el("tr", { "data-record": r.index },
        el("td", { class: "num" }, r.answer !== null
          ? el("a", { href: `/files/${encodeURIComponent(fileId)}/records/${r.index}`, "aria-label": `Open record ${r.index} in the kernel view`, text: r.index })
          : String(r.index)),
        el("td", { class: "num", text: r.line }),
        el("td", {}, el("div", { class: "excerpt", title: r.prompt, text: promptGist(r.prompt) })),
        el("td", {}, r.answer === null ? el("span", { class: "muted", text: "(eval problem)" }) : el("code", { class: "excerpt mono", text: answerGist(r.answer) })),
        el("td", {}, warningList(r.warnings || [])))));
    }
    const prev = document.getElementById("prev-page"), next = document.getElementById("next-page");
    prev.disabled = offset <= 0;
    next.disabled = offset + PAGE >= page.total;
    document.getElementById("page-info").textContent = page.total ? `${offset + 1}–${Math.min(offset + PAGE, page.total)} of ${fmtNumber(page.total)}` : "";
  }

  async function loadModels(file) {
    if (file.purpose !== "fine-tune") return;
    const [models, problems] = await Promise.all([api("/v1/models"), api("/v1/files", { query: { purpose: "problems", limit: 100 } })]);
    const select = document.getElementById("job-model");
    select.replaceChildren(...(models.data || []).map((m) => el("option", { value: m.id, text: m.id })));
    if ((problems.data || []).length) {
      document.getElementById("job-st-problems").replaceChildren(...problems.data.map((f) =>
        el("option", { value: f.id, text: `${f.filename} (${fmtNumber(f.records)} problems, ${f.id})` })));
    }
    document.getElementById("job-form").hidden = false;
    showFit();
  }

  /** How many records the chosen model and token limit train on (validation cannot know them). */
  let fitAsked = 0;
  async function showFit() {
    const asked = ++fitAsked;
    const line = document.getElementById("job-fit");
    const model = document.getElementById("job-model").value;
    if (!model) return;
    const maxSeqLen = document.getElementById("job-max-seq-len").value.trim();
    try {
      const fit = await api(`${filePath}/fit`, { query: {
        model, prompt_style: document.getElementById("job-prompt-style").value, ...(maxSeqLen ? { max_seq_len: maxSeqLen } : {}),
      } });
      if (asked !== fitAsked) return; // a newer choice answered first
      const over = fit.records - fit.fit;
      line.className = over ? "small badge warn" : "small muted";
      line.textContent = `${fmtNumber(fit.fit)} of ${fmtNumber(fit.records)} records fit ${fmtNumber(fit.max_seq_len)} tokens for ${fit.model}`
        + (over ? `; ${fmtNumber(over)} longer (line${over > 1 ? "s" : ""} ${fit.over_lines.slice(0, 8).join(", ")}${over > 8 ? ", …" : ""}) would be left out` : "");
    } catch (e) {
      if (asked === fitAsked) { line.className = "small muted"; line.textContent = `Token count unavailable: ${e.message}`; }
    }
  }
  for (const id of ["job-model", "job-max-seq-len", "job-prompt-style"]) {
    document.getElementById(id).addEventListener("change", () => showFit());
  }

  /** The create request the form stands for; blank fields are left to the server's defaults. */
  function jobBody() {
    const number = (id) => { const v = document.getElementById(id).value.trim(); return v === "" ? undefined : Number(v); };
    const hyperparameters = {
      n_epochs: number("job-epochs"),
      max_steps: number("job-max-steps"),
      learning_rate: number("job-learning-rate"),
      batch_size: number("job-batch-size"),
      max_seq_len: number("job-max-seq-len"),
    };
    const rank = number("job-lora-rank");
    if (rank === 0) hyperparameters.lora = null;
    else if (rank !== undefined) hyperparameters.lora_rank = rank;
    const method = { type: document.getElementById("job-method").value };
    if (document.getElementById("job-st-on").checked) {
      method.self_training = {
        problems_file: document.getElementById("job-st-problems").value,
        rounds: number("job-st-rounds"),
        samples_per_problem: number("job-st-samples"),
        max_kept_per_problem: number("job-st-kept"),
        tier: document.getElementById("job-st-tier").value,
      };
    }
    const suffix = document.getElementById("job-suffix").value.trim();
    return {
      model: document.getElementById("job-model").value,
      training_file: fileId,
      method,
      hyperparameters: Object.fromEntries(Object.entries(hyperparameters).filter(([, v]) => v !== undefined)),
      prompt_style: document.getElementById("job-prompt-style").value,
      ...(suffix ? { suffix } : {}),
    };
  }

  async function load() {
    const file = await api(filePath);
    document.getElementById("file-name").textContent = file.filename;
    document.getElementById("file-facts").replaceChildren(...[
      fact("Purpose", el("span", { class: "pill", text: file.purpose })),
      fact("Format", file.format),
      fact("Records", `${fmtNumber(file.records)} kept of ${fmtNumber(file.total_rows)} rows by validation`),
      fact("Warnings", file.warnings ? el("span", { class: "badge warn", text: fmtNumber(file.warnings) }) : "none"),
      fact("Size", fmtBytes(file.bytes)),
      fact("Uploaded", fmtTime(file.created_at)),
    
    ]);
    document.getElementById("file-body").setAttribute("aria-busy", "false");
    if (file.purpose === "fine-tune-results") {
      // A job's adapter archive holds model files, not records: say how to get it instead.
      document.getElementById("records-body").replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "muted",
        text: `A fine-tuning job's adapter (adapter_config.json + adapter_model.safetensors) in one tar file: `
          + `download it with GET /v1/files/${fileId}/content.` })));
      return;
    }
    await Promise.all([loadRecords(), loadModels(file)]);
  }

  function go(delta) {
    offset = Math.max(0, offset + delta);
    const url = new URL(location.href);
    url.searchParams.set("offset", offset);
    history.replaceState(null, "", url);
    loadRecords().catch(showError);
  }
  document.getElementById("prev-page").addEventListener("click", () => go(-PAGE));
  document.getElementById("next-page").addEventListener("click", () => go(PAGE));

  document.getElementById("job-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const status = document.getElementById("job-form-status");
    status.className = "small";
    status.textContent = "Creating the job…";
    try {
      const job = await api("/v1/fine_tuning/jobs", { method: "POST", body: jobBody() });
      location.href = `/jobs/${encodeURIComponent(job.id)}`;
    } catch (e) {
      status.className = "small alert error";
      status.textContent = e.message;
    }
  });

  load().catch((e) => {
    if (e.status === 404) {
      document.getElementById("file-body").replaceChildren(el("div", { class: "empty" },
        el("h2", { text: "File not found" }), el("p", { text: e.message }), el("p", {}, el("a", { href: "/files", text: "Back to all files" }))));
    } else showError(e);
  });
})();
