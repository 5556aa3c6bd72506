"""The schema comes only from Alembic migrations, and they agree with the SQLAlchemy models."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from db.migrate import upgrade
from db.models import Base, Job
from db.session import engine_for


def _differences(engine) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_migrated_postgres_matches_the_models(database_url):
    assert _differences(engine_for(database_url)) == []


def test_migrations_build_the_same_schema_on_sqlite_and_downgrade_cleanly(tmp_path):
    url = f"sqlite:///{tmp_path / 'schema.sqlite'}"
    upgrade(url)
    engine = create_engine(url)
    assert _differences(engine) == []
    assert set(inspect(engine).get_table_names()) >= {t.name for t in Base.metadata.sorted_tables}

    from alembic import command

    from db.migrate import alembic_config

    command.downgrade(alembic_config(url), "base")
    assert set(inspect(create_engine(url)).get_table_names()) <= {"alembic_version"}
    upgrade(url)
    assert _differences(create_engine(url)) == []


def test_a_job_stored_before_job_specs_reads_back_as_its_spec_and_downgrades_to_its_columns(tmp_path):
    from alembic import command
    from sqlalchemy import text

    from cuset_core.training.config import JobSpec, LoraSettings
    from db.migrate import alembic_config
    from db.session import session_scope

    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    upgrade(url, "0006")
    stored = {  # as the API stored a job before revision 0007: OpenAI's names beside the core fields
        "n_epochs": 2.0, "batch_size": 2, "learning_rate_multiplier": 0.5, "learning_rate": 1e-4, "epochs": 2.0,
        "max_seq_len": 512, "lora": {"rank": 8, "alpha": 16.0, "dropout": 0.0, "target_modules": ["q_proj"]},
        "save_steps": 5,
    }  # fmt: skip
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO files (id, owner, purpose, format, filename, bytes, path, records, total_rows, warnings,"
                " created_at) VALUES ('file-1', 'o', 'fine-tune', 'jsonl', 't.jsonl', 1, 'p', 1, 1, '[]', 0)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO fine_tuning_jobs (id, owner, model, training_file, method, hyperparameters, seed, status,"
                " cancel_requested, attempts, step, created_at, result_files, integrations) VALUES ('ftjob-old', 'o',"
                " 'tiny', 'file-1', :method, :hp, 7, 'queued', 0, 0, 0, 0, '[]', :integrations)"
            ),
            {"method": '{"type": "sft"}', "hp": json.dumps(stored), "integrations": '[{"type": "tensorboard"}]'},
        )
    upgrade(url)
    with session_scope(url) as session:
        spec = session.get(Job, "ftjob-old").spec
    assert isinstance(spec, JobSpec) and spec.method.type == "sft" and spec.seed == 7 and spec.save_steps == 5
    assert spec.hyperparameters.learning_rate == 1e-4 and spec.hyperparameters.max_seq_len == 512
    assert spec.lora == LoraSettings(rank=8, alpha=16.0, dropout=0.0, target_modules=["q_proj"])
    assert [integration.type for integration in spec.integrations] == ["tensorboard"]

    command.downgrade(alembic_config(url), "0006")
    with create_engine(url).connect() as connection:
        row = connection.execute(text("SELECT hyperparameters, seed FROM fine_tuning_jobs")).one()
    hp = json.loads(row.hyperparameters) if isinstance(row.hyperparameters, str) else row.hyperparameters
    assert (hp["n_epochs"], hp["batch_size"], hp["learning_rate_multiplier"], hp["save_steps"], row.seed) == (
        2.0, 2, 0.5, 5, 7
    )  # fmt: skip


def test_generations_stored_as_json_arrays_read_back_as_attempt_rows_and_downgrade_to_arrays(tmp_path):
    from alembic import command
    from sqlalchemy import text

    from db.generation_rows import load_samples
    from db.migrate import alembic_config
    from db.models import Generation
    from db.session import session_scope

    url = f"sqlite:///{tmp_path / 'generations.sqlite'}"
    upgrade(url, "0008")
    verified = {"verdict": "pass", "tier": "static", "reason": "ok"}
    attempts = [  # as the workers stored them before revision 0009, an old attempt lacking newer fields
        {"index": 0, "text": "no kernel", "finish_reason": "stop", "cancelled": True},
        {"index": 1, "text": "```cuda\n__global__ void k() {}\n```", "finish_reason": "stop", "prompt_tokens": 9,
         "completion_tokens": 4, "code": "__global__ void k() {}", "verification": verified},
        {"index": 2, "round": 1, "repair_of": 0, "text": ""},
    ]  # fmt: skip
    scores = {"tokens": [{"start": 0, "end": 3, "p": 0.5}], "regions": []}
    insert = (
        "INSERT INTO generations (id, owner, model, kind, request, status, samples, created_at)"
        " VALUES (:id, 'o', 'tiny', :kind, '{}', 'succeeded', :samples, 0)"
    )
    with create_engine(url).begin() as connection:
        connection.execute(text(insert), {"id": "gen-old", "kind": "generate", "samples": json.dumps(attempts)})
        connection.execute(text(insert), {"id": "gen-conf", "kind": "confidence", "samples": json.dumps([scores])})
    upgrade(url)
    with session_scope(url) as session:
        samples = load_samples(session, "gen-old")
        confidence = session.get(Generation, "gen-conf").confidence
        assert load_samples(session, "gen-conf") == []
    assert [(s.index, s.cancelled, s.round, s.repair_of) for s in samples] == [
        (0, True, 0, None), (1, False, 0, None), (2, False, 1, 0)
    ]  # fmt: skip
    assert samples[1].passed and (samples[1].prompt_tokens, samples[1].code) == (9, "__global__ void k() {}")
    assert confidence.tokens[0].p == 0.5

    command.downgrade(alembic_config(url), "0008")
    with create_engine(url).connect() as connection:
        rows = dict(connection.execute(text("SELECT id, samples FROM generations")).all())
    back = {key: json.loads(value) if isinstance(value, str) else value for key, value in rows.items()}
    assert [(a["index"], a["text"], a["cancelled"]) for a in back["gen-old"]] == [
        (0, "no kernel", True), (1, attempts[1]["text"], False), (2, "", False)
    ]  # fmt: skip
    assert back["gen-old"][1]["verification"]["verdict"] == "pass" and back["gen-conf"] == [scores]


def test_fine_tuned_model_ids_without_a_suffix_gain_its_empty_part_and_still_resolve(tmp_path):
    from alembic import command
    from sqlalchemy import text

    from db.migrate import alembic_config
    from db.model_specs import tuned_job
    from db.session import session_scope

    url = f"sqlite:///{tmp_path / 'ids.sqlite'}"
    upgrade(url, "0009")
    jobs = {  # (model, fine_tuned_model, suffix) as stored before revision 0010
        "ftjob-a": ("tiny", "ft:tiny:ftjob-a", None),
        "ftjob-b": ("ft:tiny:ftjob-a:ckpt-step-4", "ft:tiny:ftjob-b", None),
        "ftjob-c": ("ft:tiny:ftjob-a", "ft:tiny:kb:ftjob-c", "kb"),
    }
    with create_engine(url).begin() as connection:
        connection.execute(
            text(
                "INSERT INTO files (id, owner, purpose, format, filename, bytes, path, records, total_rows, warnings,"
                " created_at) VALUES ('file-1', 'o', 'fine-tune', 'jsonl', 't.jsonl', 1, 'p', 1, 1, '[]', 0)"
            )
        )
        for job_id, (model, tuned, suffix) in jobs.items():
            connection.execute(
                text(
                    "INSERT INTO fine_tuning_jobs (id, owner, model, training_file, status, cancel_requested, attempts,"
                    " step, created_at, result_files, spec, fine_tuned_model, suffix) VALUES (:id, 'o', :model,"
                    " 'file-1', 'succeeded', 0, 1, 4, 0, '[]', '{}', :tuned, :suffix)"
                ),
                {"id": job_id, "model": model, "tuned": tuned, "suffix": suffix},
            )
    upgrade(url)

    with session_scope(url) as session:
        rows = {job.id: (job.model, job.fine_tuned_model, job.tuned_model_name) for job in session.query(Job)}
        found = [tuned_job(session, "o", old).id for _, old, _ in jobs.values()]
    assert rows == {
        "ftjob-a": ("tiny", "ft:tiny::ftjob-a", "ft:tiny::ftjob-a"),
        "ftjob-b": ("ft:tiny::ftjob-a:ckpt-step-4", "ft:tiny::ftjob-b", "ft:tiny::ftjob-b"),
        "ftjob-c": ("ft:tiny::ftjob-a", "ft:tiny:kb:ftjob-c", "ft:tiny:kb:ftjob-c"),
    }
    assert found == ["ftjob-a", "ftjob-b", "ftjob-c"]  # the ids users kept from before still name them

    command.downgrade(alembic_config(url), "0009")
    with create_engine(url).connect() as connection:
        stored = connection.execute(text("SELECT id, model, fine_tuned_model FROM fine_tuning_jobs ORDER BY id")).all()
    assert [tuple(row) for row in stored] == [(job_id, model, tuned) for job_id, (model, tuned, _) in jobs.items()]
