"""An eval's work so far, one JSON line per finished piece, so a stopped run resumes where it stopped.

A long eval (a KernelBench level, a self-training round's samples: hours on a CPU) that is stopped
should not draw or verify again what it already has. The checkpoint file holds, after a first line
naming the run (its :class:`EvalConfig`), a line per problem whose answers were drawn and a line per
problem whose drawn answers were verified. A resumed run skips every generation batch whose
problems are all drawn and every problem already verified; answers are drawn with the same seeds
batch by batch, so a resumed run gives what an unstopped one would have.

A stop can cut the last line short: a last line that does not parse is dropped (its work is done
again). A checkpoint written by another run (other model, decoding or verification knobs) is
refused, naming the fields that differ. Each piece's line records the wall seconds its run spent
since its previous line, so a resumed run's elapsed time counts the earlier runs' too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from cuset_core.evaluation.config import EvalConfig
from cuset_core.evaluation.decoding import Answer
from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.scoring import SampleRecord

CHECKPOINT_FILE = "checkpoint.jsonl"  # its name in an eval's folder

# Fields that change neither which answers are drawn nor their verdicts: a resumed run may differ here.
RUN_ONLY_FIELDS = frozenset({"workers", "cache", "cache_dir", "k", "problem_ids", "repair_rounds"})


class RunLine(BaseModel):
    kind: Literal["run"] = "run"
    config: EvalConfig


# Checkpoints written before lines carried their seconds read as 0 s.
_SECONDS = Field(0.0, ge=0, description="wall seconds the run spent since its previous line (or since it started)")


class DrawnLine(BaseModel):
    """One problem's drawn answers, greedy first, in the order they are scored."""

    kind: Literal["drawn"] = "drawn"
    problem_id: str
    answers: list[Answer]
    seconds: float = _SECONDS


class VerifiedLine(BaseModel):
    """One problem's drawn (or given) answers with their verdicts; repairs are never checkpointed."""

    kind: Literal["verified"] = "verified"
    problem_id: str
    records: list[SampleRecord]
    seconds: float = _SECONDS


CheckpointLine = Annotated[RunLine | DrawnLine | VerifiedLine, Field(discriminator="kind")]
_LINE = TypeAdapter(CheckpointLine)


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` so that ``path`` is never seen half-written (a stop can come at any time, and
    a resume trusts every file it finds)."""
    partial = path.with_name(path.name + ".part")
    partial.write_text(text)
    partial.replace(path)


def _differences(recorded: EvalConfig, config: EvalConfig) -> list[str]:
    """The fields (outside :data:`RUN_ONLY_FIELDS`) whose values differ between two runs."""
    a, b = recorded.model_dump(mode="json"), config.model_dump(mode="json")
    return sorted(name for name in a.keys() | b.keys() if name not in RUN_ONLY_FIELDS and a.get(name) != b.get(name))


class EvalCheckpoint:
    """The checkpoint file of one run: what it held when opened (``drawn``, ``verified``, and the
    wall seconds earlier runs spent on it, ``earlier_s``), and each new piece appended as it finishes."""

    def __init__(self, path: Path, config: EvalConfig) -> None:
        """Open (or start) ``path`` for ``config``. Raises EvalInputError when it was written by
        another run or a line other than the last is damaged."""
        self.path, self.config = path, config
        self.drawn: dict[str, list[Answer]] = {}
        self.verified: dict[str, list[SampleRecord]] = {}
        self.earlier_s = 0.0
        lines = path.read_text().splitlines() if path.is_file() else []
        for number, text in enumerate(lines, start=1):
            try:
                line = _LINE.validate_json(text)
            except ValidationError as exc:
                if number == len(lines):  # a stop cut it short: keep the whole lines, so the next starts afresh
                    write_whole(path, "".join(line + "\n" for line in lines[:-1]))
                    break
                raise EvalInputError(
                    f"checkpoint: {path}, line {number}: not a checkpoint line ({exc.errors()[0]['msg']})"
                ) from None
            if number == 1 and not isinstance(line, RunLine):
                raise EvalInputError(f"checkpoint: {path}, line 1: expected the run's configuration")
            if isinstance(line, RunLine):
                differing = _differences(line.config, config)
                if differing:
                    raise EvalInputError(
                        f"checkpoint: {path} was written by another run ({', '.join(differing)} differ); "
                        "remove it to start afresh, or write this run elsewhere"
                    )
            elif isinstance(line, DrawnLine):
                self.drawn[line.problem_id] = line.answers
                self.earlier_s += line.seconds
            else:
                self.verified[line.problem_id] = line.records
                self.earlier_s += line.seconds
        self._since = time.perf_counter()

    def _seconds(self) -> float:
        """Wall seconds since this run's previous line (or since it opened the checkpoint)."""
        now = time.perf_counter()
        seconds, self._since = now - self._since, now
        return round(seconds, 3)

    def _append(self, line: BaseModel) -> None:
        """Append ``line``; the file (and its folder) is made with the first piece of work, so a
        run refused before any leaves nothing behind."""
        if not self.path.is_file():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(RunLine(config=self.config).model_dump_json() + "\n")
        with self.path.open("a") as out:
            out.write(line.model_dump_json() + "\n")

    def add_drawn(self, answers: dict[str, list[Answer]]) -> None:
        """Record a generation batch's answers, problem by problem."""
        for problem_id, drawn in answers.items():
            self.drawn[problem_id] = drawn
            self._append(DrawnLine(problem_id=problem_id, answers=drawn, seconds=self._seconds()))

    def add_verified(self, problem_id: str, records: list[SampleRecord]) -> None:
        """Record one problem's verified answers."""
        self.verified[problem_id] = records
        self._append(VerifiedLine(problem_id=problem_id, records=records, seconds=self._seconds()))
