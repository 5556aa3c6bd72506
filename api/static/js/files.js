/* Files page: upload a dataset and list the uploaded ones. */
"use strict";
(() => {
  const { api, listAll, el, fmtTime, fmtNumber, fmtBytes, showError } = Cuset;

  async function load() {
    const files = await listAll("/v1/files", { max: 500 });
    document.getElementById("files-empty").hidden = files.length > 0;
    document.getElementById("files-table").hidden = files.length === 0;
    document.getElementById("files-body").replaceChildren(...files.map((f) => el("tr", { "data-file": f.id },
      el("td", {}, el("a", { href: `/files/${encodeURIComponent(f.id)}`, class: "mono", text: f.id })),
      el("td", { text: f.filename }),
      el("td", {}, el("span", { class: "pill", text: f.purpose })),
      el("td", { text: f.format || "—" }),
      el("td", { class: "num", text: `${fmtNumber(f.records)}${f.total_rows && f.total_rows !== f.records ? ` of ${fmtNumber(f.total_rows)}` : ""}` }),
      el("td", { class: "num" }, f.warnings ? el("span", { class: "badge warn", text: fmtNumber(f.warnings) }) : "0"),
      el("td", { class: "num", text: fmtBytes(f.bytes) }),
      el("td", { text: fmtTime(f.created_at) }))));
  }

  async function upload(file, purpose) {
    const status = document.getElementById("upload-status");
    const form = new FormData();
    form.append("purpose", purpose);
    form.append("file", file);
    status.className = "small";
    status.textContent = "Uploading and validating…";
    try {
      const response = await api("/v1/files", { method: "POST", form });
      status.replaceChildren("Uploaded ", el("a", { href: `/files/${encodeURIComponent(response.id)}`, text: response.id }),
        ` (${fmtNumber(response.records)} records, ${fmtNumber(response.warnings)} warnings).`);
      await load();
    } catch (e) {
      status.className = "small alert error";
      status.textContent = e.message;
    }
  }

  document.getElementById("upload-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("upload-file");
    if (input.files.length) upload(input.files[0], document.getElementById("upload-purpose").value);
  });

  async function uploadDemo() {
    // The demo set is package data the dashboard serves; it goes through the API like any upload.
    const response = await fetch("/dashboard/demo-dataset.jsonl");
    const blob = await response.blob();
    await upload(new File([blob], "cuset-demo.jsonl", { type: "application/jsonl" }), "fine-tune");
    document.getElementById("upload-form").scrollIntoView({ block: "nearest" });
  }
  for (const id of ["upload-demo", "upload-demo-inline"]) document.getElementById(id).addEventListener("click", uploadDemo);

  load().catch(showError);
})();
