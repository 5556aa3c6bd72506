#!/usr/bin/env bash
# The demo's verification path on the newest Python this machine has (issue 25: the demo once
# failed only on 3.13): a virtual environment for it in .cache/venv-<version> (scripts/setup.sh
# with VENV and PYTHON), then tier-2 verdicts of a demo problem there: its solution passes and a
# wrong answer is value_mismatch (neither may be internal_error). Looks on PATH and in pyenv's
# versions; exits 0 with a note when the newest is the one .venv already runs.
# `--prepare` only sets up: the environment and this interpreter's tier-2 preludes (scripts/test.sh
# starts it at nice 19 when the suite starts, so that it takes the cores the other lanes leave idle).
set -euo pipefail
cd "$(dirname "$0")/.."
newest="" best=0
for candidate in python3.13 python3.12 python3.11 $(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.1[1-9]*/bin/python3 2>/dev/null); do
    version=$("$candidate" -c 'import sys; print(sys.version_info[0] * 100 + sys.version_info[1])' 2>/dev/null) || continue
    if [ "$version" -gt "$best" ]; then best=$version newest=$candidate; fi
done
[ -n "$newest" ] || { echo "newest python: none found" >&2; exit 1; }
name=$("$newest" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
ours=$(.venv/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || true)
if [ "$name" = "$ours" ]; then
    echo "newest python: $name is the one .venv runs; the other lanes covered it"
    exit 0
fi
venv=.cache/venv-$name
echo "newest python: $name ($newest) in $venv"
# The project without its dev tools (pytest, the gates, the browser driver): this lane runs none of them.
PYTHON=$newest VENV=$venv EXTRAS= bash scripts/setup.sh
# This interpreter's own preludes (its Python headers are part of them); a no-op once built.
"$venv/bin/python" -c 'from cuset_core.verify.cpu.build import prepare_preludes; prepare_preludes()'
if [ "${1:-}" = --prepare ]; then exit 0; fi
"$venv/bin/python" - <<'PY'
import sys

from cuset_core.demo import demo_problems
from cuset_core.verify.result import Tier, Verdict
from cuset_core.verify.run import verify
from cuset_core.verify.settings import VerifySettings

problem = {p.id: p for p in demo_problems()}["02_relu"]
settings = VerifySettings(tier=Tier.CPU)
right = verify(problem.problem_code, problem.solution_code, settings, use_cache=False)
wrong = verify(problem.problem_code, problem.solution_code.replace("0.0f", "1.0f"), settings, use_cache=False)
print(f"newest python {sys.version.split()[0]}: the demo solution: {right.verdict}; a wrong answer: {wrong.verdict}")
for result in (right, wrong):
    if result.verdict not in (Verdict.PASS, Verdict.VALUE_MISMATCH):
        print(f"  {result.verdict}: {result.reason}", file=sys.stderr)
sys.exit(0 if (right.verdict, wrong.verdict) == (Verdict.PASS, Verdict.VALUE_MISMATCH) else 1)
PY
