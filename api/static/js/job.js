/* Job page: header and progress, live curves, events, checkpoints; polls while the job is active. */
"use strict";
(() => {
  const { api, listAll, el, fmtTime, fmtNumber, fmtDuration, statusBadge, progressBar, poll, showError, ACTIVE_JOB } = Cuset;
  const jobId = window.CUSET_JOB_ID;
  const jobPath = `/v1/fine_tuning/jobs/${encodeURIComponent(jobId)}`;
  const charts = MetricCharts.create(document.getElementById("charts"));
  const metrics = new Map(); // step -> row
  const cancelBtn = document.getElementById("cancel-btn");
  let job = null;

  function fact(term, value) { return el("div", {}, el("dt", { text: term }), el("dd", {}, value)); }

  /** A null setting is one the service chooses (e.g. gradient checkpointing on a CPU). */
  function keyValues(obj) {
    return el("ul", { class: "kv" }, Object.entries(obj).map(([k, v]) =>
      el("li", { text: `${k}: ${v === null ? "default" : typeof v === "object" ? JSON.stringify(v) : v}` })));
  }

  /** What the job was asked to do; it does not change, so it is drawn once (details stay open). */
  let configShown = false;
  function renderConfig() {
    configShown = true;
    const { type, self_training: selfTraining, ...knobs } = job.method || {};
    const hp = job.hyperparameters || {};
    const main = ["n_epochs", "max_steps", "batch_size", "learning_rate", "max_seq_len"].filter((k) => hp[k] !== undefined && hp[k] !== null);
    // replaceChildren writes a null argument as the text "null": the absent facts drop out first.
    document.getElementById("job-config").replaceChildren(...[
      fact("Method", el("span", {}, el("span", { class: "pill", text: type || "—" }), " ",
        Object.keys(knobs).length ? el("details", {}, el("summary", { text: "knobs" }), keyValues(knobs)) : null)),
      fact("Base model", el("code", { text: job.model })),
      fact("Training file", job.training_file ? el("a", { href: `/files/${encodeURIComponent(job.training_file)}`, class: "mono", text: job.training_file }) : "—"),
      selfTraining ? fact("Self-training", el("span", {},
        el("a", { href: `/files/${encodeURIComponent(selfTraining.problems_file)}`, class: "mono", text: selfTraining.problems_file }),
        ` · ${selfTraining.rounds} rounds · ${selfTraining.samples_per_problem} samples per problem · tier ${selfTraining.tier}`)) : null,
      fact("Hyperparameters", el("span", {}, main.map((k) => `${k} ${hp[k]}`).join(" · ") || "defaults",
        Object.keys(hp).length > main.length ? el("details", {}, el("summary", { text: "all" }), keyValues(hp)) : null)),
    ].filter(Boolean));
  }

  function renderJob() {
    document.getElementById("job-status").replaceChildren(statusBadge(job.status));
    document.title = `Job ${job.id} (${job.status}) · CuSeT`;
    document.getElementById("job-progress").replaceChildren(progressBar(job));
    if (!configShown) renderConfig();
    const last = [...metrics.values()].pop() || {};
    document.getElementById("job-facts").replaceChildren(
      fact("Trained tokens", fmtNumber(job.trained_tokens)),
      fact("Tokens / s", fmtNumber(last.tokens_per_s, 0)),
      fact("Created", fmtTime(job.created_at)),
      fact("Finished", fmtTime(job.finished_at)),
    );
    const errBox = document.getElementById("job-error");
    if (job.error && (job.error.message || job.error.code)) {
      errBox.textContent = `${job.error.message || "The job failed."}${job.error.code ? ` (${job.error.code})` : ""}`;
      errBox.hidden = false;
    } else errBox.hidden = true;
    cancelBtn.hidden = !ACTIVE_JOB.has(job.status) || job.status === "cancelling";
    const result = document.getElementById("job-result");
    if (job.fine_tuned_model) {
      result.hidden = false;
      document.getElementById("result-model").textContent = job.fine_tuned_model;
      document.getElementById("result-try").href = `/playground?model=${encodeURIComponent(job.fine_tuned_model)}`;
    }
    document.getElementById("job-body").setAttribute("aria-busy", "false");
  }

  /** A metric point is flat ({step, loss, ce, ...}); null values (metrics a method lacks) drop out. */
  function metricRow(item) {
    return Object.fromEntries(Object.entries(item).filter(([, v]) => v !== null));
  }

  async function refreshMetrics() {
    // Only the steps after the last one seen; a long run arrives in pages of 10,000.
    let last = metrics.size ? Math.max(...metrics.keys()) : undefined;
    for (;;) {
      const page = await api(`${jobPath}/metrics`, { query: { after_step: last, limit: 10000 } });
      const data = page.data || [];
      for (const item of data) { const row = metricRow(item); metrics.set(row.step, row); }
      if (!page.has_more || !data.length) break;
      last = data[data.length - 1].step;
    }
    const rows = [...metrics.values()].sort((a, b) => a.step - b.step);
    if (job && job.method && job.method.self_training) renderRounds(rows);
    charts.update(rows);
    document.getElementById("charts").dataset.points = rows.length;
    document.getElementById("chart-count").textContent = rows.length ? `${fmtNumber(rows.length)} logged steps` : "";
  }

  /** A self-training job's metrics rows are its rounds (step = round). */
  function renderRounds(rows) {
    document.getElementById("rounds-panel").hidden = false;
    document.getElementById("charts-title").firstChild.textContent = "Round figures ";
    if (!rows.length) return;
    const secs = (v) => (typeof v === "number" ? fmtDuration(v) : "—");
    document.getElementById("rounds").replaceChildren(...rows.map((r) => el("tr", {},
      el("td", { class: "num", text: fmtNumber(r.step) }),
      el("td", { class: "num", text: fmtNumber(r.sampled) }),
      el("td", { class: "num", text: fmtNumber(r.compiled) }),
      el("td", { class: "num", text: fmtNumber(r.passed) }),
      el("td", { class: "num", text: `${fmtNumber(r.kept)} (${fmtNumber(r.kept_total)})` }),
      el("td", { class: "num", text: fmtNumber(r.problems_solved) }),
      el("td", { class: "num", text: secs(r.sample_verify_s) }),
      el("td", { class: "num", text: secs(r.train_s) }))));
  }

  async function refreshEvents() {
    const events = await listAll(`${jobPath}/events`, { max: 500 });
    events.sort((a, b) => (a.created_at - b.created_at) || ((a.seq ?? 0) - (b.seq ?? 0)));
    const list = document.getElementById("events");
    if (!events.length) return;
    list.replaceChildren(...events.reverse().map((e) => el("li", { class: `level-${e.level || "info"}` },
      el("time", { text: fmtTime(e.created_at) }), el("span", { class: "level", text: e.level || "info" }), el("span", { text: e.message }))));
  }

  async function refreshCheckpoints() {
    const items = await listAll(`${jobPath}/checkpoints`, { max: 200 });
    if (!items.length) return;
    items.sort((a, b) => (a.step_number ?? a.step) - (b.step_number ?? b.step));
    document.getElementById("checkpoints").replaceChildren(...items.map((c) => {
      const m = c.metrics || {};
      const shown = Object.entries(m).filter(([, v]) => typeof v === "number").slice(0, 3).map(([k, v]) => `${k} ${(+v).toPrecision(4)}`).join(", ");
      const name = c.fine_tuned_model_checkpoint || c.id;
      return el("tr", {},
        el("td", { class: "num", text: fmtNumber(c.step_number ?? c.step) }),
        el("td", {}, el("code", { class: "small", text: name }), " ",
          c.fine_tuned_model_checkpoint ? el("a", { href: `/playground?model=${encodeURIComponent(name)}`, class: "small", text: "try" }) : null),
        el("td", { class: "small", text: shown || "—" }),
        el("td", { text: fmtTime(c.created_at) }));
    }));
  }

  async function refresh() {
    job = await api(jobPath);
    const results = await Promise.allSettled([refreshMetrics(), refreshEvents(), refreshCheckpoints()]);
    renderJob();
    const failed = results.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
    return ACTIVE_JOB.has(job.status);
  }

  cancelBtn.addEventListener("click", async () => {
    if (!confirm(`Cancel job ${jobId}? The run stops within seconds (with a checkpoint when its step ends by then).`)) return;
    cancelBtn.disabled = true;
    try {
      job = await api(`${jobPath}/cancel`, { method: "POST" });
      renderJob();
      showError(null);
    } catch (e) { showError(e); }
    finally { cancelBtn.disabled = false; }
  });

  let stop = poll(async () => {
    try { return await refresh(); }
    catch (e) {
      if (e.status === 404) {
        document.getElementById("job-body").replaceChildren(el("div", { class: "empty" },
          el("h2", { text: "Job not found" }), el("p", { text: e.message }), el("p", {}, el("a", { href: "/", text: "Back to all jobs" }))));
        showError(null);
        return false;
      }
      throw e;
    }
  }, 1500);
  window.addEventListener("pagehide", () => stop());
})();
