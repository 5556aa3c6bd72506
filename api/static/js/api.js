/* CuSeT dashboard: the one way pages talk to the API, and small shared helpers.
 *
 * Every request goes through Cuset.api(), which adds the API key saved in localStorage as an
 * `Authorization: Bearer` header and turns the API's error shape
 * {"error": {"message", "type", "param", "code"}} into an ApiError with that plain message.
 */
"use strict";

const Cuset = (() => {
  const KEY_STORAGE = "cuset.apiKey";

  class ApiError extends Error {
    constructor(message, status, body) {
      super(message);
      this.status = status;
      this.body = body;
    }
  }

  function headers(extra) {
    const h = new Headers(extra || {});
    const key = localStorage.getItem(KEY_STORAGE);
    if (key) h.set("Authorization", `Bearer ${key}`);
    return h;
  }

  async function errorFrom(response) {
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    const err = body && body.error;
    let message = err && err.message ? err.message : `The server answered ${response.status} ${response.statusText}.`;
    if (err && err.param && !message.includes(err.param)) message += ` (field: ${err.param})`;
    return new ApiError(message, response.status, body);
  }

  /** fetch() against the API: JSON in and out; throws ApiError with the API's message. */
  async function api(path, { method = "GET", body, form, query, raw = false, signal } = {}) {
    let url = path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") params.set(k, v);
      const qs = params.toString();
      if (qs) url += (url.includes("?") ? "&" : "?") + qs;
    }
    const init = { method, headers: headers(), signal };
    if (body !== undefined) {
      init.headers.set("Content-Type", "application/json");
      init.body = JSON.stringify(body);
    } else if (form) {
      init.body = form; // the browser sets the multipart boundary
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ApiError("Cannot reach the CuSeT server. Is it running?", 0, null);
    }
    if (!response.ok) throw await errorFrom(response);
    if (raw) return response;
    if (response.status === 204) return null;
    return response.json();
  }

  /** Every item of a list endpoint (OpenAI envelope), following `after` up to `max` items. */
  async function listAll(path, { query = {}, max = 1000, pageSize = 100 } = {}) {
    const items = [];
    let after;
    for (;;) {
      const page = await api(path, { query: { ...query, limit: pageSize, after } });
      const data = Array.isArray(page) ? page : page.data || [];
      items.push(...data);
      if (Array.isArray(page) || !page.has_more || !data.length || items.length >= max) break;
      after = page.last_id || data[data.length - 1].id;
    }
    return items;
  }

  /* ---------- DOM helpers ---------- */

  /** el("td", {class: "num", text: "3"}, child, ...) */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") node.textContent = v;
      else if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    // Any depth: a row builder may pass arrays of arrays of nodes (stringifying one would print
    // "[object HTMLSpanElement]").
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function $(selector, root = document) { return root.querySelector(selector); }

  /** Show an error in the page's alert box (or in `target`); null clears it. */
  function showError(error, target) {
    const box = target || document.getElementById("page-error");
    if (!box) return;
    if (!error) { box.hidden = true; box.textContent = ""; return; }
    box.textContent = error.message || String(error);
    box.hidden = false;
  }

  /* ---------- formatting ---------- */

  function fmtTime(seconds) {
    if (!seconds) return "—";
    // Always with its date: a time alone is ambiguous on a page left open overnight or read later.
    const d = new Date(seconds * 1000);
    const thisYear = d.getFullYear() === new Date().getFullYear();
    return d.toLocaleString([], {
      ...(thisYear ? {} : { year: "numeric" }), month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
  }

  function fmtDuration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 60) return `${seconds} s`;
    const m = Math.floor(seconds / 60), s = seconds % 60;
    if (m < 60) return `${m} min ${String(s).padStart(2, "0")} s`;
    const h = Math.floor(m / 60);
    return `${h} h ${String(m % 60).padStart(2, "0")} min`;
  }

  function fmtNumber(n, digits = 0) {
    if (n === null || n === undefined || n === "") return "—";
    return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KB", "MB", "GB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function statusBadge(status) {
    const label = (status || "unknown").replace(/_/g, " ");
    return el("span", { class: `badge status-${status || "unknown"}`, text: label });
  }

  // The unfinished statuses of each kind of row, rendered by the server from db/statuses.py.
  const STATUSES = JSON.parse(document.getElementById("cuset-statuses").textContent);
  const ACTIVE_JOB = new Set(STATUSES.job_active);
  const ACTIVE_EVAL = new Set(STATUSES.eval_active);

  /** Progress of a job (its `progress` object): {step, total, fraction (0..1 or null), eta (seconds or null)}. */
  function jobProgress(job) {
    const p = job.progress || {};
    const step = p.step ?? 0;
    const total = p.total_steps ?? null;
    let fraction = p.percent !== null && p.percent !== undefined ? p.percent / 100 : total ? step / total : null;
    if (job.status === "succeeded") fraction = 1;
    const eta = ACTIVE_JOB.has(job.status) ? p.eta_s ?? null : null;
    return { step, total, fraction: fraction === null ? null : Math.min(1, fraction), eta };
  }

  /** A progress bar with percent and ETA text. */
  function progressBar(job) {
    const { step, total, fraction, eta } = jobProgress(job);
    const pct = fraction === null ? null : Math.round(fraction * 1000) / 10;
    const label = pct === null ? (job.status === "running" ? "starting…" : "—") : `${pct.toFixed(pct < 100 ? 1 : 0)}%`;
    const bar = el("div", {
      class: `progress status-${job.status}`, role: "progressbar",
      "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": pct ?? undefined,
      "aria-label": `Progress of ${job.id}`,
    }, el("div", { class: "progress-fill", style: `width:${pct ?? 0}%` }));
    const detail = [label];
    // A self-training job counts its progress in rounds (each samples, verifies, keeps and tunes).
    const unit = job.method && job.method.self_training ? "round" : "step";
    if (total) detail.push(`${unit} ${fmtNumber(step)} / ${fmtNumber(total)}`);
    if (eta !== null && eta !== undefined) detail.push(`ETA ${fmtDuration(eta)}`);
    return el("div", { class: "progress-cell" }, bar, el("div", { class: "progress-text", text: detail.join(" · ") }));
  }

  /** Run `fn` every `ms` while it returns true; stops when it returns false. Errors are shown
   * and polling continues (the server may be restarting). Returns a stop function. */
  /** Table cells still saying "Loading…" say why nothing came instead (a missing API key, say). */
  function settleLoading(error) {
    for (const cell of document.querySelectorAll("td.muted")) {
      if (cell.textContent === "Loading…") cell.textContent = `Not loaded: ${error.message || error}`;
    }
  }

  function poll(fn, ms) {
    let timer = null, stopped = false;
    async function tick() {
      let again = true;
      try { again = await fn(); showError(null); } catch (e) { showError(e); settleLoading(e); }
      if (!stopped && again) timer = setTimeout(tick, ms);
    }
    tick();
    return () => { stopped = true; clearTimeout(timer); };
  }

  function init() {
    const form = document.getElementById("apikey-form");
    if (!form) return;
    const input = document.getElementById("apikey");
    input.value = localStorage.getItem(KEY_STORAGE) || "";
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = input.value.trim();
      if (v) localStorage.setItem(KEY_STORAGE, v); else localStorage.removeItem(KEY_STORAGE);
      location.reload();
    });
  }
  document.addEventListener("DOMContentLoaded", init);

  /** An eval aggregate's metrics as [label, share] pairs: the greedy block ("greedy compile@1"),
   *  then pass@k from the i.i.d. samples ("pass@k compile@4"); aggregates stored before the
   *  greedy sample was drawn apart have one flat ``metrics`` map. */
  function evalMetrics(agg) {
    if (!agg) return [];
    if (agg.metrics) return Object.entries(agg.metrics);
    const greedy = Object.entries((agg.greedy || {}).metrics || {}).map(([k, v]) => [`greedy ${k}`, v]);
    const sampled = agg.sampled || {};
    const repaired = agg.repaired;
    const within = repaired ? ` within ${repaired.rounds} repair${repaired.rounds === 1 ? "" : "s"}` : "";
    return greedy.concat(
      Object.entries(sampled.metrics || {}).map(([k, v]) => [`pass@k ${k}`, v]),
      Object.entries(sampled.fast_p || {}).map(([k, v]) => [`pass@k fast_${k}`, v]),
      repaired ? Object.entries((repaired.greedy || {}).metrics || {}).map(([k, v]) => [`greedy ${k}${within}`, v]) : [],
      repaired ? Object.entries((repaired.sampled || {}).metrics || {}).map(([k, v]) => [`pass@k ${k}${within}`, v]) : []);
  }

  return { api, listAll, ApiError, el, $, showError, fmtTime, fmtDuration, fmtNumber, fmtBytes,
           statusBadge, jobProgress, progressBar, poll, ACTIVE_JOB, ACTIVE_EVAL, evalMetrics };
})();
