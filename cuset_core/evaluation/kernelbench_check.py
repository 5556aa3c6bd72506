"""Which problems of a KernelBench checkout tier 2 can verify: every problem file's reference side,
run as a verification runs it, with the reason for each one it cannot (``cuset kernelbench check``).

KernelBench's problem files change (today's level 1 sizes an elementwise op at 1.6 G elements and
writes ``N = 2048 * 2``); this check is how a user learns, in minutes and before an eval, which
problems of the benchmark they hold can be judged on a CPU.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel

from cuset_core.evaluation.inputs import EvalInputError
from cuset_core.evaluation.kernelbench_runs import kernelbench_number
from cuset_core.verify.cpu.reference_check import check_reference
from cuset_core.verify.result import Verdict
from cuset_core.verify.settings import VerifySettings

LEVELS = (1, 2, 3)
REPORT_JSON, REPORT_MD = "kernelbench_check.json", "kernelbench_check.md"


class ProblemCheck(BaseModel):
    """One problem file's check: ``pass`` when tier 2 can verify kernels for it."""

    level: int
    problem: str  # the file's stem, e.g. "1_Square_matrix_multiplication_"
    verdict: Verdict
    reason: str
    unsupported_feature: str | None = None
    seconds: float


def level_folders(path: Path, levels: Iterable[int] = LEVELS) -> dict[int, Path]:
    """The ``levelN`` folders of a KernelBench checkout, by level: ``path`` is the repository, its
    ``KernelBench`` folder or one ``levelN`` folder (then only that level). ``EvalInputError``
    when none of the asked levels is there."""
    path = path.expanduser()
    if path.name.startswith("level") and path.name[5:].isdigit():
        found = {int(path.name[5:]): path} if path.is_dir() else {}
    else:
        root = path / "KernelBench" if (path / "KernelBench").is_dir() else path
        found = {level: root / f"level{level}" for level in levels if (root / f"level{level}").is_dir()}
    found = {level: folder for level, folder in found.items() if level in set(levels)}
    if not found:
        wanted = ", ".join(f"level{level}" for level in levels)
        raise EvalInputError(f"{path}: no KernelBench problem folder ({wanted}) here")
    return found


def problem_files(folder: Path) -> list[Path]:
    """The problem files of a level folder in KernelBench's order (by the number each name starts with)."""
    files = [path for path in folder.glob("*.py") if kernelbench_number(path.stem) is not None]
    return sorted(files, key=lambda path: (kernelbench_number(path.stem) or 0, path.name))


def check_checkout(
    path: Path,
    settings: VerifySettings,
    *,
    levels: Iterable[int] = LEVELS,
    workers: int = 1,
    done: Callable[[ProblemCheck], None] = lambda check: None,
) -> list[ProblemCheck]:
    """Check every problem of the asked levels, ``workers`` at a time (each is a sandboxed process);
    ``done`` is called as each finishes. Returns the checks in KernelBench's order."""
    jobs = [
        (level, file) for level, folder in sorted(level_folders(path, levels).items()) for file in problem_files(folder)
    ]

    def one(job: tuple[int, Path]) -> ProblemCheck:
        level, file = job
        started = time.monotonic()
        result = check_reference(file.read_text(encoding="utf-8"), settings)
        check = ProblemCheck(
            level=level,
            problem=file.stem,
            verdict=result.verdict,
            reason=result.reason,
            unsupported_feature=result.unsupported_feature,
            seconds=round(time.monotonic() - started, 2),
        )
        done(check)
        return check

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, jobs))


def write_report(checks: list[ProblemCheck], out: Path) -> tuple[Path, Path]:
    """``kernelbench_check.json`` (every check) and ``kernelbench_check.md`` (counts per level, then
    every problem tier 2 cannot verify with its reason) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    data = out / REPORT_JSON
    data.write_text(json.dumps([check.model_dump(mode="json") for check in checks], indent=1) + "\n")
    lines = [
        "# Which KernelBench problems tier 2 can verify",
        "",
        "| level | problems | verifiable | unsupported | failing |",
    ]
    lines.append("|---|---|---|---|---|")
    for level in sorted({check.level for check in checks}):
        counts = Counter(check.verdict for check in checks if check.level == level)
        total = sum(counts.values())
        failing = total - counts[Verdict.PASS] - counts[Verdict.UNSUPPORTED]
        lines.append(f"| {level} | {total} | {counts[Verdict.PASS]} | {counts[Verdict.UNSUPPORTED]} | {failing} |")
    lines += ["", "## Not verifiable", "", "| level | problem | verdict | reason |", "|---|---|---|---|"]
    for check in checks:
        if check.verdict is not Verdict.PASS:
            reason = check.reason.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {check.level} | {check.problem} | {check.verdict.value} | {reason} |")
    markdown = out / REPORT_MD
    markdown.write_text("\n".join(lines) + "\n")
    return data, markdown
