/* Jobs page: the table of fine-tuning jobs, polled while any is active. */
"use strict";
(() => {
  const { listAll, el, fmtTime, fmtNumber, statusBadge, progressBar, poll, ACTIVE_JOB } = Cuset;
  const body = document.getElementById("jobs-body");
  const filter = document.getElementById("status-filter");
  const empty = document.getElementById("jobs-empty");
  const pollState = document.getElementById("poll-state");
  const params = new URLSearchParams(location.search);
  filter.value = params.get("status") || "";
  let jobs = [];
  let stop = null;

  function methodOf(job) {
    const m = job.method || {};
    return m.type || (typeof m === "string" ? m : "—");
  }

  function render() {
    const wanted = filter.value;
    const shown = jobs.filter((j) => !wanted || (wanted === "active" ? ACTIVE_JOB.has(j.status) : j.status === wanted));
    empty.hidden = jobs.length > 0;
    document.getElementById("jobs-table").hidden = jobs.length === 0;
    body.replaceChildren(...shown.map((job) => el("tr", { "data-job": job.id },
      el("td", {}, el("a", { href: `/jobs/${encodeURIComponent(job.id)}`, class: "mono", text: job.id }),
         job.suffix ? el("div", { class: "muted small", text: job.suffix }) : null),
      el("td", {}, statusBadge(job.status)),
      el("td", {}, el("span", { class: "pill", text: methodOf(job) })),
      el("td", { class: "mono small", text: job.model }),
      el("td", { class: "col-progress" }, progressBar(job)),
      el("td", { class: "num", text: fmtNumber(job.trained_tokens) }),
      el("td", { text: fmtTime(job.created_at) }),
      el("td", { text: fmtTime(job.finished_at) }),
    )));
    if (jobs.length && !shown.length) {
      body.append(el("tr", {}, el("td", { colspan: 8, class: "muted", text: `No ${filter.selectedOptions[0].text.toLowerCase()} jobs.` })));
    }
  }

  async function refresh() {
    jobs = await listAll("/v1/fine_tuning/jobs", { max: 300 });
    render();
    const active = jobs.some((j) => ACTIVE_JOB.has(j.status));
    pollState.textContent = active ? "Live: refreshing every 2 s" : "Nothing running; refresh the page to update.";
    return active;
  }

  filter.addEventListener("change", () => {
    const url = new URL(location.href);
    if (filter.value) url.searchParams.set("status", filter.value); else url.searchParams.delete("status");
    history.replaceState(null, "", url);
    render();
  });
  stop = poll(refresh, 2000);
  window.addEventListener("pagehide", () => stop && stop());
})();
