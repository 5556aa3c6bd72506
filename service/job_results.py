"""The files a succeeded fine-tuning job leaves its owner: the LoRA adapter as one tar file
(purpose fine-tune-results) and, for a self-training job, the answers its rounds kept (a training
file). Each is written under the job's folder and returned as its ``files`` row, not yet added:
the caller adds it only when the job's end is recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

from cuset_core.training.export import write_archive
from db.ids import new_id
from db.models import RESULTS_PURPOSE, File, Job
from db.settings import Settings


def kept_file(settings: Settings, job: Job, kept: Path) -> File:
    """The answers a self-training job kept, copied out as a training file of its owner (purpose
    fine-tune, one chat row per answer); its ``files`` row, not yet added."""
    file_id = new_id("file")
    relative = Path("jobs") / job.id / f"{file_id}.jsonl"
    shutil.copyfile(kept, settings.artifacts / relative)
    rows = sum(1 for line in kept.read_text().splitlines() if line.strip())
    return File(
        id=file_id,
        owner=job.owner,
        filename=f"{job.id}-kept.jsonl",
        purpose="fine-tune",
        format="jsonl",
        bytes=(settings.artifacts / relative).stat().st_size,
        path=relative.as_posix(),
        records=rows,
        total_rows=rows,
        warnings=[],
    )


def adapter_archive(settings: Settings, job: Job, adapter_dir: Path) -> File:
    """Write the LoRA adapter in ``adapter_dir`` (adapter_config.json + adapter_model.safetensors)
    into one tar file in the job's folder; returns its ``files`` row (purpose fine-tune-results),
    not yet added.

    The adapter config names its base as engines and peft can find it: the Hugging Face repo id
    when the base is served from one, else the model id the job tuned (never a server path)."""
    file_id = new_id("file")
    relative = Path("jobs") / job.id / f"{file_id}.tar"
    spec = settings.base_models.get(job.model)
    base_model = spec if spec is not None and not Path(spec).expanduser().exists() else job.model
    size = write_archive(adapter_dir, settings.artifacts / relative, folder=job.id, base_model=base_model)
    return File(
        id=file_id,
        owner=job.owner,
        filename=f"{job.id}-adapter.tar",
        purpose=RESULTS_PURPOSE,
        format="tar",
        bytes=size,
        path=relative.as_posix(),
        records=0,
        total_rows=0,
        warnings=[],
    )
