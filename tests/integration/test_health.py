"""Liveness and readiness against the real Postgres and Redis."""


def test_healthz_answers_while_the_process_is_up(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_reports_database_and_broker_reachable(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert {k: v for k, v in response.json().items() if k != "sandbox"} == {
        "status": "ready",
        "database": "ok",
        "broker": "ok",
        "engines": {},  # every model decodes in the workers
    }


def test_readyz_reports_the_sandbox_isolation_each_worker_found_at_start(client, worker):
    from cuset_core.verify.sandbox import isolation
    from tests.real_service import wait_for

    wait_for(lambda: client.get("/readyz").json()["sandbox"], timeout=60, what="a worker's sandbox entry")
    entries = list(client.get("/readyz").json()["sandbox"].values())
    expected = "isolated" if isolation().available else "refusing"
    assert expected in [entry["state"] for entry in entries]
    assert all((entry["reason"] == "") == (entry["state"] == "isolated") for entry in entries)


def test_unknown_routes_use_the_error_shape(client):
    body = client.get("/v1/nothing-here").json()
    assert body["error"]["type"] == "not_found_error"
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_worker_process_starts_and_serves_the_queues(worker):
    assert worker.process.poll() is None
    assert "cuset.reap" in worker.log() or "[queues]" in worker.log()


def test_readyz_is_degraded_with_the_reason_while_a_worker_refuses_verification(client, service_settings):
    from db.worker_status import forget_sandbox, record_sandbox

    record_sandbox(service_settings, "cpu@no-bwrap", False, "bubblewrap (bwrap) is not installed", False)
    try:
        response = client.get("/readyz")
        body = response.json()
        assert response.status_code == 200  # the rest of the service works
        assert body["status"] == "degraded"
        assert body["sandbox"]["cpu@no-bwrap"]["state"] == "refusing"
        [reason] = [r for r in body["reasons"] if "cpu@no-bwrap" in r]
        assert "bubblewrap (bwrap) is not installed" in reason and "tiers 1-3" in reason
    finally:
        forget_sandbox(service_settings, "cpu@no-bwrap")
    assert client.get("/readyz").json()["status"] == "ready"


def test_readyz_is_not_ready_with_the_reason_while_a_workers_tier_2_side_cannot_run(client, service_settings):
    from db.worker_status import forget_sandbox, record_sandbox

    # What a worker records when its venv's Python, reached through a link folder, exits 127 in the sandbox.
    why = "tier 2's side (/venv/bin/python importing torch in the sandbox) exited with status 127: python: not found"
    record_sandbox(service_settings, "cpu@broken-venv", True, "", False, tier2=why)
    try:
        response = client.get("/readyz")
        body = response.json()
        assert response.status_code == 503
        assert body["status"] == "not ready"
        assert body["sandbox"]["cpu@broken-venv"]["state"] == "not ready"
        [reason] = [r for r in body["reasons"] if "cpu@broken-venv" in r]
        assert why in reason and "internal_error" in reason
        assert body["error"]["code"] == "verifier_unavailable" and why in body["error"]["message"]
        assert body["error"]["type"] == "service_unavailable_error"
    finally:
        forget_sandbox(service_settings, "cpu@broken-venv")
    assert client.get("/readyz").json()["status"] == "ready"
