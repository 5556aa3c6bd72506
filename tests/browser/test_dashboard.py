"""The dashboard in a real browser against the real service: empty states, a running job's
progress and curves, cancelling from the page, the kernel view, an eval and the playground."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.integration.job_support import FINISHED, insert_job, job_request, upload_demo_dataset
from tests.real_service import wait_for

PAGES = ["/", "/files", "/evals", "/playground"]


def test_every_page_loads_without_errors_and_explains_empty_lists(page, api):
    empty = {
        "/": not api.get("/v1/fine_tuning/jobs").json()["data"],
        "/files": not api.get("/v1/files").json()["data"],
        "/evals": not api.get("/v1/evals").json()["data"],
    }
    for path in PAGES:
        tab = page.open(path)
        tab.wait_for_load_state("networkidle")
        expect(tab.locator("#page-error")).to_be_hidden()
        assert "[object " not in tab.locator("body").inner_text()
        if empty.get(path):
            expect(tab.locator(".empty").first).to_be_visible()
            if path == "/":
                expect(tab.locator("#poll-state")).to_contain_text("Nothing running")
            page.shot(f"empty-{path.strip('/') or 'jobs'}")
    assert not page.errors


def test_the_api_docs_render_without_a_cdn(page):
    tab = page.open("/docs")
    expect(tab.locator(".swagger-ui .info .title")).to_contain_text("CuSeT")
    expect(tab.locator(".opblock").first).to_be_visible()
    assert not page.errors


def test_unknown_ids_and_api_errors_are_shown_in_plain_words(page):
    tab = page.open("/jobs/ftjob-000000000000000000000000")
    expect(tab.locator(".empty h2")).to_have_text("Job not found")
    expect(tab.locator(".empty p").first).to_contain_text("No fine-tuning job found")
    tab = page.open("/files/file-000000000000000000000000/records/0")
    expect(tab.locator(".empty h2")).to_have_text("No kernel to show")


def test_the_api_key_field_adds_a_bearer_header_to_every_api_call(page):
    tab = page.open("/files")
    tab.fill("#apikey", "sk-dashboard-test")
    with tab.expect_request(lambda request: "/v1/files" in request.url) as first:
        tab.click("#apikey-form button")
    assert first.value.headers.get("authorization") == "Bearer sk-dashboard-test"
    tab.fill("#apikey", "")
    tab.click("#apikey-form button")
    tab.wait_for_load_state("networkidle")
    assert tab.evaluate("localStorage.getItem('cuset.apiKey')") is None


def test_without_a_key_the_jobs_table_says_why_it_is_empty_instead_of_loading_forever(page):
    tab = page.open("/")
    tab.evaluate("localStorage.removeItem('cuset.apiKey')")
    tab.reload()
    expect(tab.locator("#page-error")).to_be_visible()
    expect(tab.locator("table.data tbody td").first).to_contain_text("Not loaded:")
    page.errors.clear()  # the 401s are the point here


@pytest.fixture(scope="module")
def training_file(api) -> str:
    return upload_demo_dataset(api)


@pytest.fixture(scope="module")
def long_job(api, worker, training_file) -> dict:
    """A CuSeT job on the tiny model long enough to watch (it is cancelled by the tests)."""
    body = job_request(training_file, max_steps=400)
    body["hyperparameters"]["save_steps"] = 50
    job = api.post("/v1/fine_tuning/jobs", json=body).json()
    yield job
    api.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel")


def _progress(tab, job_id: str) -> float:
    value = tab.locator(f'tr[data-job="{job_id}"] [role="progressbar"]').get_attribute("aria-valuenow")
    return float(value) if value else 0.0


def test_jobs_page_shows_a_running_jobs_progress_advancing(page, long_job):
    tab = page.open("/")
    row = tab.locator(f'tr[data-job="{long_job["id"]}"]')
    expect(row.locator(".badge")).to_have_text("running", timeout=90_000)
    first = wait_for(lambda: _progress(tab, long_job["id"]), timeout=90, what="first progress")
    later = wait_for(
        lambda: (p := _progress(tab, long_job["id"])) > first and p, timeout=60, what="progress to advance"
    )
    assert 0 < first < later <= 100
    expect(row.locator(".progress-text")).to_contain_text("ETA")
    expect(tab.locator("#poll-state")).to_contain_text("Live")
    page.shot("jobs")
    tab.select_option("#status-filter", "succeeded")
    expect(row).to_have_count(0)
    tab.select_option("#status-filter", "active")
    expect(row).to_be_visible()
    assert not page.errors


def test_job_page_chart_gains_points_while_it_runs(page, long_job):
    tab = page.open(f"/jobs/{long_job['id']}")
    charts = tab.locator("#charts")
    points = lambda: int(charts.get_attribute("data-points") or 0)  # noqa: E731
    first = wait_for(points, timeout=90, what="first metric points")
    wait_for(lambda: points() > first, timeout=60, what="the chart to gain points")
    expect(tab.locator('[data-chart="loss"] canvas')).to_be_visible()
    expect(tab.locator('[data-chart="kept"]')).to_be_visible()
    expect(tab.locator("#events li").first).not_to_contain_text("No events yet")
    page.shot("job-running")
    assert not page.errors


def test_a_chart_with_one_logged_step_draws_it(page, service_settings, training_file):
    from db.models import JobMetric
    from db.session import session_scope

    job_id = insert_job(
        service_settings.resolved_database_url, training_file, status="succeeded", step=1, total_steps=1,
        finished_at=time.time(),
    )  # fmt: skip
    with session_scope(service_settings.resolved_database_url) as session:
        session.add(JobMetric(job_id=job_id, step=1, values={"loss": 1.5, "ce": 1.6}))
    tab = page.open(f"/jobs/{job_id}")
    expect(tab.locator("#charts")).to_have_attribute("data-points", "1")
    canvas = tab.locator('[data-chart="loss"] canvas')
    expect(canvas).to_be_visible()
    # The one step is drawn as dots in the series' colours, not an empty plot (axes and grid are grey).
    coloured = canvas.evaluate(
        """(c) => { const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
                    let n = 0;
                    for (let i = 0; i < d.length; i += 4) {
                      const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
                      if (a > 200 && (Math.max(r, g, b) - Math.min(r, g, b)) > 100) n += 1; }
                    return n; }"""
    )
    assert coloured > 10
    # Times carry their date ("Dec 3, 01:22:09 PM"), today's too.
    # The job's summary loads apart from its metrics: wait for it as for the chart.
    expect(tab.locator("body")).to_contain_text(re.compile(r"[A-Z][a-z]{2} \d{1,2}, \d{1,2}:\d{2}:\d{2}"))
    # A job without self-training shows no word of it, not a bare "null" after its training file.
    expect(tab.locator("#job-config")).to_contain_text(training_file)
    tab.locator("#job-config details").last.evaluate("(d) => { d.open = true; }")
    assert not re.search(r"\bnull\b", tab.locator("#job-config").inner_text()), tab.locator("#job-config").inner_text()
    assert not page.errors


def test_a_self_training_job_shows_its_rounds_and_counts_progress_in_them(page, service_settings, training_file):
    from cuset_core.training.config import JobSpec, SelfTrainingRounds
    from db.models import File, JobMetric
    from db.session import session_scope
    from tests.integration.job_support import insert_file

    url = service_settings.resolved_database_url
    pool = insert_file(url, filename="pool.jsonl", purpose="problems")
    spec = JobSpec(self_training=SelfTrainingRounds(rounds=3, samples_per_problem=4))
    job_id = insert_job(url, training_file, status="running", spec=spec, problems_file=pool, step=1, total_steps=3)
    figures = {"sampled": 96, "compiled": 30, "passed": 7, "kept": 5, "kept_total": 5, "problems_solved": 4}
    with session_scope(url) as session:
        session.add(JobMetric(job_id=job_id, step=1, values=figures | {"sample_verify_s": 640.0, "train_s": 95.0}))
        assert session.get(File, pool) is not None
    tab = page.open(f"/jobs/{job_id}")
    row = tab.locator("#rounds tr").first
    expect(row).to_contain_text("96")
    assert [c.strip() for c in row.locator("td").all_inner_texts()][:6] == ["1", "96", "30", "7", "5 (5)", "4"]
    expect(tab.locator("#job-progress")).to_contain_text("round 1 / 3")
    expect(tab.locator("#job-config")).to_contain_text(f"{pool} · 3 rounds · 4 samples per problem · tier cpu")
    expect(tab.locator("#charts-title")).to_contain_text("Round figures")
    assert not page.errors


def test_job_charts_draw_ten_thousand_steps(page, service_settings, training_file):
    """A finished long run: 10,000 logged steps are fetched in one call and drawn at once."""
    from db.models import JobMetric
    from db.session import session_scope

    steps = 10_000
    job_id = insert_job(
        service_settings.resolved_database_url,
        training_file,
        status="succeeded",
        step=steps,
        total_steps=steps,
        finished_at=time.time(),
    )
    with session_scope(service_settings.resolved_database_url) as session:
        session.add_all(
            JobMetric(
                job_id=job_id,
                step=step,
                values={
                    "loss": 2.0 / step**0.3,
                    "ce": 2.2 / step**0.3,
                    "kept_ratio": 0.8,
                    "learning_rate": 2e-4 * (1 - step / steps),
                    "tokens_per_s": 900.0 + step % 50,
                },
            )
            for step in range(1, steps + 1)
        )
    # Drawn within the locator's timeout; how fast is the dashboard's bench to say, not a test's
    # clock (a crowded CI host is slow at everything).
    tab = page.open(f"/jobs/{job_id}")
    expect(tab.locator("#charts")).to_have_attribute("data-points", str(steps), timeout=20_000)
    expect(tab.locator('[data-chart="loss"] canvas')).to_be_visible()
    # Hovering a chart across its width keeps the page working.
    box = tab.locator('[data-chart="loss"] .u-over').bounding_box()
    for x in range(10):
        tab.mouse.move(box["x"] + box["width"] * (x + 0.5) / 10, box["y"] + box["height"] / 2)
    page.shot("job-10k-steps")
    assert not page.errors


def test_cancel_from_the_job_page_stops_the_job(page, api, long_job):
    # Cancelled once it trains (a run cancelled while it starts has no checkpoint to save).
    wait_for(
        lambda: api.get(f"/v1/fine_tuning/jobs/{long_job['id']}").json()["progress"]["step"] >= 1,
        timeout=120,
        what="the first training step",
    )
    tab = page.open(f"/jobs/{long_job['id']}")
    cancel = tab.locator("#cancel-btn")
    expect(cancel).to_be_visible()
    cancel.click()
    # The page says so at once; the worker stops the run within seconds.
    expect(tab.locator("#job-status .badge")).to_have_text(re.compile(r"^cancell(ing|ed)$"))
    expect(tab.locator("#job-status .badge")).to_have_text("cancelled", timeout=90_000)
    expect(cancel).to_be_hidden()
    assert api.get(f"/v1/fine_tuning/jobs/{long_job['id']}").json()["status"] == "cancelled"
    expect(tab.locator("#checkpoints tr").first).not_to_contain_text("No checkpoints", timeout=30_000)
    page.shot("job-cancelled")


def test_kernel_view_outlines_the_sensitive_regions_of_a_demo_record(page, api, training_file):
    analysis = api.get(f"/v1/files/{training_file}/records/0/analysis").json()
    regions = analysis["analysis"]["regions"]
    assert regions, "the demo answer has sensitive regions"
    tab = page.open(f"/files/{training_file}/records/0")
    expect(tab.locator("#code .region").first).to_be_visible()
    assert tab.locator("#code .region").count() == len(regions)
    assert tab.locator("#code .sspan").count() == len(analysis["analysis"]["spans"])
    assert tab.locator("#region-list li").count() == len(regions)
    # The code view shows the answer exactly; regions cover exactly their answer text.
    assert tab.locator("#code").inner_text() == analysis["answer"]
    first = regions[0]
    assert (
        tab.locator('#code .region[data-region="0"]').inner_text() == analysis["answer"][first["start"] : first["end"]]
    )
    # The legend counts the categories present; picking a region in the list focuses it in the code.
    present = {r["category"] for r in regions}
    for category in present:
        expect(tab.locator(f"#cat-{category}")).to_be_enabled()
    last = regions[-1]["id"]
    tab.locator(f'#region-list [data-region="{last}"] button').click()
    expect(tab.locator(f'#code .region[data-region="{last}"]')).to_have_class(re.compile(r"\bfocus\b"))
    page.shot("kernel-view")
    tab.set_viewport_size({"width": 760, "height": 900})
    assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.shot("kernel-view-narrow")
    assert not page.errors


def test_files_pages_list_the_upload_and_its_records(page, training_file):
    tab = page.open("/files")
    expect(tab.locator(f'tr[data-file="{training_file}"]')).to_be_visible()
    page.shot("files")
    tab = page.open(f"/files/{training_file}")
    expect(tab.locator("#records-body tr").first).to_have_attribute("data-record", "0")
    expect(tab.locator("#job-form")).to_be_visible()
    # What a job on the chosen model would train on: validation cannot know its token limit.
    # (The server's first count loads the model's tokenizer.)
    fit = re.compile(r"\d+ of 50 records fit 1,?024 tokens for \S+; \d+ longer")
    expect(tab.locator("#job-fit")).to_contain_text(fit, timeout=60_000)
    tab.fill("#job-max-seq-len", "8192")
    tab.locator("#job-max-seq-len").dispatch_event("change")
    # Counted again by the server: under a loaded machine (CI's lanes side by side) past 5 s.
    expect(tab.locator("#job-fit")).to_contain_text("50 of 50 records fit 8,192 tokens", timeout=60_000)
    page.shot("file")


def test_the_file_pages_job_form_sends_hyperparameters_and_self_training(page, api, training_file):
    from cuset_core.demo import demo_problems
    from tests.integration.job_support import upload_problems

    pool = upload_problems(api, {"relu": demo_problems()[1].problem_code})
    tab = page.open(f"/files/{training_file}")
    expect(tab.locator("#job-form")).to_be_visible()
    expect(tab.locator(f'#job-st-problems option[value="{pool}"]')).to_have_count(1)
    tab.select_option("#job-model", "tiny")
    tab.select_option("#job-method", "sft")
    tab.select_option("#job-prompt-style", "kernelbench")
    tab.fill("#job-max-steps", "3")
    tab.fill("#job-learning-rate", "0.001")
    tab.fill("#job-lora-rank", "8")
    tab.fill("#job-suffix", "from-page")
    tab.check("#job-st-on")
    tab.select_option("#job-st-problems", pool)
    tab.fill("#job-st-rounds", "3")
    tab.fill("#job-st-samples", "6")
    tab.locator("#job-form button[type=submit]").click()
    tab.wait_for_url(re.compile(r"/jobs/ftjob-"))
    job_id = tab.url.rsplit("/", 1)[-1]
    job = api.get(f"/v1/fine_tuning/jobs/{job_id}").json()
    api.post(f"/v1/fine_tuning/jobs/{job_id}/cancel")  # the form's request is the point, not the run
    assert (job["method"]["type"], job["prompt_style"], job["user_provided_suffix"]) == (
        "sft",
        "kernelbench",
        "from-page",
    )
    hp = job["hyperparameters"]
    assert (hp["max_steps"], hp["learning_rate"], hp["lora"]["rank"]) == (3, 0.001, 8)
    rounds = job["method"]["self_training"]
    assert (rounds["problems_file"], rounds["rounds"], rounds["samples_per_problem"], rounds["tier"]) == (
        pool,
        3,
        6,
        "cpu",
    )
    assert not page.errors


def test_the_eval_form_sends_prompt_style_and_decoding_and_defaults_to_the_models_own_style(page, api):
    tab = page.open("/evals")
    expect(tab.locator("#eval-model option").first).to_be_attached()
    tab.select_option("#eval-model", "cuset-ew-135m")
    tab.select_option("#eval-tier", "static")
    tab.fill("#eval-temperature", "0.5")
    tab.fill("#eval-top-p", "0.9")
    tab.fill("#eval-max-tokens", "48")
    tab.fill("#eval-samples", "1")
    tab.click("#eval-form button[type=submit]")
    link = tab.locator("#eval-form-status a")
    expect(link).to_be_visible()
    eval_id = link.inner_text()
    api.post(f"/v1/evals/{eval_id}/cancel")
    config = api.get(f"/v1/evals/{eval_id}").json()["config"]
    assert (config["prompt_style"], config["temperature"], config["top_p"]) == ("compact", 0.5, 0.9)
    assert (config["max_new_tokens"], config["samples"]) == (48, 1)
    tab.select_option("#eval-prompt-style", "kernelbench")
    tab.click("#eval-form button[type=submit]")
    expect(tab.locator("#eval-form-status a")).not_to_have_text(eval_id)
    second = tab.locator("#eval-form-status a").inner_text()
    api.post(f"/v1/evals/{second}/cancel")
    assert api.get(f"/v1/evals/{second}").json()["config"]["prompt_style"] == "kernelbench"
    assert not page.errors


def test_the_eval_form_measures_an_uploaded_eval_file_on_the_problems_it_names(page, api):
    from tests.integration.job_support import upload_eval_problems

    file_id = upload_eval_problems(api)  # two demo problems
    tab = page.open("/evals")
    expect(tab.locator(f'#eval-problems option[value="{file_id}"]')).to_be_attached()
    tab.select_option("#eval-problems", file_id)
    tab.select_option("#eval-tier", "static")
    tab.fill("#eval-problem-ids", "1")
    tab.click("#eval-form button[type=submit]")
    link = tab.locator("#eval-form-status a")
    expect(link).to_be_visible()
    created = api.get(f"/v1/evals/{link.inner_text()}").json()
    api.post(f"/v1/evals/{created['id']}/cancel")
    assert (created["eval_file"], created["config"]["problem_ids"], created["progress"]["total"]) == (file_id, "1", 1)
    assert not page.errors
    tab.fill("#eval-problem-ids", "99")
    tab.click("#eval-form button[type=submit]")
    expect(tab.locator("#eval-form-status")).to_contain_text("names no problem")
    assert [error.split()[0] for error in page.errors] == ["400"]  # the refused request, shown in the form


def test_an_eval_shows_metrics_and_failures_by_verdict(page, api, worker):
    created = api.post(
        "/v1/evals",
        json={"model": "tiny", "samples": 1, "max_tokens": 32, "tier": "static", "problems": "demo:held-out"},
    ).json()
    wait_for(lambda: api.get(f"/v1/evals/{created['id']}").json()["status"] in FINISHED, timeout=240, what="the eval")
    tab = page.open(f"/evals/{created['id']}")
    expect(tab.locator("#eval-status .badge")).to_have_text("succeeded")
    expect(tab.locator("#eval-facts")).to_contain_text("4 generated · 4 verified, of 4 problems")
    expect(tab.locator(".tile").first).to_be_visible()
    expect(tab.locator(".bar-row").first).to_be_visible()
    problems = tab.locator("details.problem")
    expect(problems).to_have_count(4)
    problems.first.locator("> summary").click()
    expect(problems.first.locator(".verification .badge").first).to_be_visible()
    assert "[object " not in tab.locator("body").inner_text()  # a node printed as text
    page.shot("eval")
    page.open("/evals")
    expect(page.tab.locator(f'tr[data-eval="{created["id"]}"]')).to_be_visible()
    assert not page.errors


def test_two_evals_picked_on_the_evals_page_compare_metric_by_metric(page, service_settings):
    from tests.integration.job_support import insert_scored_eval

    problems = [f"p{i:02d}" for i in range(12)]
    url = service_settings.resolved_database_url
    better = insert_scored_eval(url, "eval-cmp-better", problems, set(problems[:10]))
    worse = insert_scored_eval(url, "eval-cmp-worse", problems, set(problems[:2]))
    tab = page.open("/evals")
    compare = tab.locator("#compare-btn")
    tab.locator(f'input[data-pick="{better}"]').check()
    expect(compare).to_be_disabled()
    tab.locator(f'input[data-pick="{worse}"]').check()
    compare.click()
    tab.wait_for_url(re.compile(r"/evals/compare\?a="))
    greedy = tab.locator('tr[data-metric="greedy:cpu_correct@1"]')
    expect(greedy).to_contain_text("A better")
    assert [c.strip() for c in greedy.locator("td").all_inner_texts()][1:5] == ["12", "0.833", "0.167", "+0.667"]
    page.shot("eval-compare")
    # An eval's page downloads its samples as a KernelBench run.
    tab = page.open(f"/evals/{better}")
    with tab.expect_download() as download:
        tab.locator('[data-kb-level="1"]').click()
    assert download.value.suggested_filename == f"{better}-kernelbench-run.tar"
    assert not page.errors


def test_playground_streams_a_kernel_and_shows_its_verdict(page, worker):
    tab = page.open("/playground?model=tiny")
    expect(tab.locator("#pg-model")).to_have_value("tiny")
    tab.select_option("#pg-demo", "10_softplus")
    assert "class Model" in tab.locator("#pg-problem").input_value()
    tab.fill("#pg-max", "24")
    tab.select_option("#pg-verify", "static")
    started = time.monotonic()
    tab.click("#pg-go")
    sample = tab.locator('[data-sample="0"]')
    expect(sample.locator(".verification .badge")).to_be_visible(timeout=120_000)
    assert sample.locator(".sample-text").evaluate("node => node.textContent.length") > 0  # streamed text
    assert sample.get_attribute("data-verdict")
    expect(tab.locator("#pg-state")).to_have_text("Done.")
    expect(tab.locator("#pg-summary")).to_contain_text("generated tokens")
    assert time.monotonic() - started < 240
    page.shot("playground")
    assert not page.errors


def test_playground_shows_every_attempt_of_a_best_of_search_with_repairs(page, worker):
    tab = page.open("/playground?model=tiny")
    expect(tab.locator("#pg-model")).to_have_value("tiny")
    tab.select_option("#pg-demo", "02_relu")
    tab.fill("#pg-n", "2")
    tab.fill("#pg-temp", "1")
    tab.fill("#pg-max", "12")
    tab.select_option("#pg-verify", "static")
    tab.fill("#pg-repairs", "1")
    tab.check("#pg-first-pass")
    tab.click("#pg-go")

    # The random model fails both samples; each gets one repair, shown under a title naming it.
    expect(tab.locator("#pg-state")).to_have_text("Done.", timeout=180_000)
    cards = tab.locator("[data-sample]")
    expect(cards).to_have_count(4)
    expect(tab.locator('[data-round="1"] .sample-title')).to_have_text(
        [re.compile(r"Attempt [23]: repair 1 of attempt [01]")] * 2
    )
    for index in range(4):
        expect(cards.nth(index).locator(".verification .badge")).to_be_visible()
    expect(tab.locator("#pg-result")).to_have_text("No attempt passed verification.")
    expect(tab.locator(".chosen")).to_have_count(0)
    page.shot("playground-repairs")
    assert not page.errors


def test_kernel_view_tints_tokens_by_the_confidence_of_a_picked_model(page, api, worker, training_file):
    tab = page.open(f"/files/{training_file}/records/0")
    expect(tab.locator("#code .region").first).to_be_visible()
    expect(tab.locator("#code .tok")).to_have_count(0)
    expect(tab.locator("#conf-legend")).to_be_hidden()
    tab.select_option("#conf-model", "tiny")
    # The tiny random model is unsure of everything: every token is tinted and every scored region is low.
    expect(tab.locator("#code .tok").first).to_be_visible(timeout=120_000)
    expect(tab.locator("#conf-state")).to_contain_text("confidence of tiny")
    expect(tab.locator("#conf-legend")).to_be_visible()
    expect(tab.locator("#conf-scale li")).to_have_count(6)
    assert (
        tab.locator("#code").inner_text() == api.get(f"/v1/files/{training_file}/records/0/analysis").json()["answer"]
    )
    first_token = tab.locator("#code .tok").first
    assert 0 <= float(first_token.get_attribute("data-p")) <= 1
    assert first_token.evaluate("node => getComputedStyle(node).backgroundColor") not in ("", "rgba(0, 0, 0, 0)")
    expect(tab.locator("#code .region.low-conf").first).to_be_visible()
    expect(tab.locator("#region-list li").first).to_have_class(re.compile(r"\blow-conf\b"))
    expect(tab.locator("#region-list li").first.locator(".region-p")).to_contain_text("p̄")
    assert "model=tiny" in tab.url  # the choice is kept in the address, so the view can be linked
    page.shot("kernel-view-confidence")
    # Back to no model: the tints go, the regions stay.
    tab.select_option("#conf-model", "")
    expect(tab.locator("#code .tok")).to_have_count(0)
    expect(tab.locator("#code .region").first).to_be_visible()
    assert not page.errors
