"""Answers from a KernelBench ``runs/<run_name>`` folder, so ``cuset eval`` scores generations
made with KernelBench's own scripts (``generate_samples.py``).

Such a folder holds one file per generation, ``level_<L>_problem_<P>_sample_<S>_kernel.py``
(the code already taken out of the model's answer), and the run's settings in
``generation_config.yaml``. ``P`` is KernelBench's problem id, the number that starts the
problem's file name (``19_ReLU.py``); here it is matched to the problem of the set whose id
starts with the same number (``19_ReLU``, ``019_relu``). Files of other kinds (prompts,
``eval_results.json``) are ignored.

The samples become this project's: with temperature 0 in ``generation_config.yaml`` a problem's
sample 0 is its greedy sample; otherwise every sample is an i.i.d. one, in sample order (so
sample 0 is still the one KernelBench's fast_p scores). A sample missing below the run's
largest sample id (KernelBench writes nothing when a generation fails), and every sample of a
problem the run has no file for, is an empty answer (``no_code``): KernelBench's analysis
counts a missing generation as a failure too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from cuset_core.evaluation.inputs import EvalInputError, ProblemAnswers

KERNEL_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")
CONFIG_FILE = "generation_config.yaml"
_LEADING_NUMBER = re.compile(r"(\d+)(?:_|$)")


class _ConfigLoader(yaml.SafeLoader):
    """Safe YAML that also reads the Python tuples KernelBench's config writer emits (``subset``)."""


_ConfigLoader.add_constructor(
    "tag:yaml.org,2002:python/tuple", lambda loader, node: tuple(loader.construct_sequence(node))
)


def kernelbench_number(problem_id: str) -> int | None:
    """KernelBench's problem id of one of ours: the number its id starts with, else None."""
    match = _LEADING_NUMBER.match(problem_id)
    return int(match.group(1)) if match else None


def read_generation_config(folder: Path) -> dict[str, Any]:
    """The run's ``generation_config.yaml`` as a dict ({} when absent)."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        config = yaml.load(path.read_text(), Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise EvalInputError(f"answers: {CONFIG_FILE} is not readable YAML ({exc})") from None
    if not isinstance(config, dict):
        raise EvalInputError(f"answers: {CONFIG_FILE} is not a mapping")
    return config


def load_kernelbench_run(folder: Path, problem_ids: list[str]) -> dict[str, ProblemAnswers]:
    """Answers per problem id from the KernelBench run ``folder`` (see the module docstring)."""
    by_number: dict[int, str] = {}
    for problem_id in problem_ids:
        number = kernelbench_number(problem_id)
        if number is None:
            continue
        if number in by_number:
            raise EvalInputError(
                f"problems: {by_number[number]!r} and {problem_id!r} both have KernelBench id {number}"
            )
        by_number[number] = problem_id
    kernels: dict[str, dict[int, str]] = {}
    levels: set[int] = set()
    for path in sorted(folder.iterdir()):
        match = KERNEL_FILE.fullmatch(path.name)
        if match is None or not path.is_file():
            continue
        level, number, sample = (int(group) for group in match.groups())
        if number not in by_number:
            raise EvalInputError(
                f"answers: {path.name}: no problem of the set has KernelBench id {number} "
                "(a problem's id must start with its number, e.g. 19_ReLU)"
            )
        levels.add(level)
        kernels.setdefault(by_number[number], {})[sample] = path.read_text(errors="replace")
    if not kernels:
        raise EvalInputError(f"answers: {folder} holds no level_<L>_problem_<P>_sample_<S>_kernel.py files")
    if len(levels) > 1:
        raise EvalInputError(
            f"answers: {folder} mixes levels {sorted(levels)}; score one level at a time against its problems"
        )
    count = 1 + max(sample for samples in kernels.values() for sample in samples)
    greedy = read_generation_config(folder).get("temperature") in (0, 0.0, "0", "0.0")
    if greedy and count > 1:
        raise EvalInputError(
            f"answers: {CONFIG_FILE} says temperature 0 but the run has {count} samples per problem: "
            "greedy decodes are not i.i.d. samples for pass@k"
        )
    answers = {}
    for problem_id in problem_ids:
        texts = [kernels.get(problem_id, {}).get(sample, "") for sample in range(count)]
        answers[problem_id] = (
            ProblemAnswers(greedy=texts[0], sampled=[]) if greedy else ProblemAnswers(greedy=None, sampled=texts)
        )
    return answers
