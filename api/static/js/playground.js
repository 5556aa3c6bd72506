/* Playground: POST /v1/generate with stream=true and show the server-sent events as they come:
 * per attempt (a drawn sample, or a repair of a failed one) sample.start (its round), sample.delta
 * (text grows), sample.done (extracted code), sample.verification (verdict) or sample.cancelled
 * (another attempt passed first); generation.done (usage, timings, the chosen attempt), error,
 * then [DONE]. */
"use strict";
(() => {
  const { api, el, fmtNumber, showError } = Cuset;
  const demos = JSON.parse(document.getElementById("demo-problems").textContent);
  const $ = (id) => document.getElementById(id);
  const samplesBox = $("pg-samples");
  let controller = null;
  const FINISH = { stop: "finished", length: "stopped at max tokens" };

  async function loadModels() {
    const models = (await api("/v1/models")).data || [];
    const wanted = new URLSearchParams(location.search).get("model");
    const select = $("pg-model");
    if (!models.length) {
      select.replaceChildren(el("option", { value: "", text: "No models are served" }));
      return;
    }
    // Tuned models (owned by the user) first: they are what the playground is for.
    models.sort((a, b) => (a.owned_by === "system") - (b.owned_by === "system") || b.created - a.created);
    select.replaceChildren(...models.map((m) => el("option", { value: m.id, text: m.id })));
    if (wanted && models.some((m) => m.id === wanted)) select.value = wanted;
  }

  $("pg-demo").addEventListener("change", (ev) => {
    const demo = demos.find((d) => d.id === ev.target.value);
    if (demo) $("pg-problem").value = demo.code;
  });

  function sampleCard(index) {
    let card = samplesBox.querySelector(`[data-sample="${index}"]`);
    if (!card) {
      if (!samplesBox.querySelector("[data-sample]")) samplesBox.replaceChildren();
      card = el("article", { class: "card sample", "data-sample": index, "aria-live": "polite" },
        el("h3", {}, el("span", { class: "sample-title", text: `Sample ${index} ` }),
          el("span", { class: "sample-state badge status-running", text: "writing…" })),
        el("pre", { class: "code stream" }, el("code", { class: "sample-text" })),
        el("div", { class: "sample-verdict" }));
      const cards = [...samplesBox.querySelectorAll("[data-sample]")];
      const after = cards.find((c) => Number(c.dataset.sample) > index);
      samplesBox.insertBefore(card, after || null);
    }
    return card;
  }

  function handle(event, data) {
    if (event === "sample.start") {
      const card = sampleCard(data.index);
      card.dataset.round = data.round;
      if (data.round > 0) {
        card.querySelector(".sample-title").textContent =
          `Attempt ${data.index}: repair ${data.round} of attempt ${data.repair_of} `;
      }
    } else if (event === "sample.delta") {
      const text = sampleCard(data.index).querySelector(".sample-text");
      text.append(data.delta);
      const pre = text.parentElement;
      pre.scrollTop = pre.scrollHeight;
    } else if (event === "sample.done") {
      const card = sampleCard(data.index);
      const shown = data.code || data.text;
      card.querySelector(".sample-text").textContent = shown.trim() ? shown : "(the model wrote only whitespace)";
      card.querySelector(".sample-state").replaceWith(el("span", { class: "sample-state badge status-succeeded",
        text: FINISH[data.finish_reason] || "done" }));
      const verify = $("pg-verify").value;
      if (verify !== "none") card.querySelector(".sample-verdict").replaceChildren(el("p", { class: "muted small", text: `Verifying (${verify})…` }));
      if (data.code && data.code !== data.text) {
        card.append(el("details", {}, el("summary", { text: "Full answer" }), el("pre", { class: "code small-code" }, el("code", { text: data.text }))));
      }
    } else if (event === "sample.verification") {
      const card = sampleCard(data.index);
      card.dataset.verdict = data.verification.verdict;
      card.querySelector(".sample-verdict").replaceChildren(Verdict.details(data.verification));
    } else if (event === "sample.cancelled") {
      const card = sampleCard(data.index);
      card.dataset.verdict = "cancelled";
      card.querySelector(".sample-state").replaceWith(el("span", { class: "sample-state badge status-cancelled", text: "cancelled" }));
      card.querySelector(".sample-verdict").replaceChildren(el("p", { class: "muted small", text: "Not verified: another attempt passed first." }));
    } else if (event === "generation.done") {
      const u = data.usage || {}, t = data.timings || {};
      if (data.chosen !== null && data.chosen !== undefined) {
        const chosen = sampleCard(data.chosen);
        chosen.classList.add("chosen");
        chosen.querySelector("h3").append(el("span", { class: "badge chosen-badge", text: "chosen" }));
      }
      if ($("pg-verify").value !== "none") {
        $("pg-result").textContent = data.chosen === null || data.chosen === undefined
          ? "No attempt passed verification." : `Attempt ${data.chosen} passed verification and is the answer.`;
      }
      $("pg-summary").textContent = `${fmtNumber(u.prompt_tokens)} prompt + ${fmtNumber(u.completion_tokens)} generated tokens` +
        (t.total_s ? ` in ${t.total_s.toFixed(1)} s (queue ${(t.queue_s || 0).toFixed(1)} s, generate ${(t.generate_s || 0).toFixed(1)} s, verify ${(t.verify_s || 0).toFixed(1)} s)` : "");
    } else if (event === "error") {
      throw new Cuset.ApiError((data.error && data.error.message) || "Generation failed.", 500, data);
    }
  }

  /** Read a text/event-stream body and call handle(event, data) per event. */
  async function readEvents(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let event = "message";
        const dataLines = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) dataLines.push(line.slice(5).replace(/^ /, ""));
        }
        const payload = dataLines.join("\n");
        if (payload === "[DONE]") return;
        if (payload) handle(event, JSON.parse(payload));
      }
    }
  }

  $("gen-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const problem = $("pg-problem").value;
    if (!$("pg-model").value) { showError(new Error("Choose a model first.")); return; }
    showError(null);
    samplesBox.replaceChildren(el("p", { class: "muted", text: "Queued: waiting for a worker…" }));
    $("pg-summary").textContent = "";
    $("pg-result").textContent = "";
    $("pg-go").disabled = true;
    $("pg-stop").hidden = false;
    $("pg-state").textContent = "Generating…";
    controller = new AbortController();
    try {
      const verify = $("pg-verify").value;
      const samples = Number($("pg-n").value) || 1;
      // With verification the samples are candidates of one answer (best_of); without, plain samples.
      const search = verify === "none" ? { n: samples } : {
        best_of: samples,
        stop_at_first_pass: $("pg-first-pass").checked,
        repair_rounds: Number($("pg-repairs").value) || 0,
      };
      const response = await api("/v1/generate", { method: "POST", raw: true, signal: controller.signal, body: {
        model: $("pg-model").value,
        problem,
        temperature: Number($("pg-temp").value) || 0,
        max_tokens: Number($("pg-max").value) || 512,
        verify,
        ...($("pg-style").value ? { prompt_style: $("pg-style").value } : {}),
        stream: true,
        ...search,
      } });
      await readEvents(response);
      $("pg-state").textContent = "Done.";
    } catch (e) {
      if (e.name === "AbortError") $("pg-state").textContent = "Stopped.";
      else { showError(e); $("pg-state").textContent = ""; }
    } finally {
      $("pg-go").disabled = false;
      $("pg-stop").hidden = true;
      controller = null;
    }
  });
  $("pg-stop").addEventListener("click", () => controller && controller.abort());

  loadModels().catch(showError);
})();
