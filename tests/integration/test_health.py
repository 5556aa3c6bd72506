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
    from tests.service import wait_for

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
