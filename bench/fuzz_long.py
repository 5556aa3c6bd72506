"""The long fuzzing pass: tests/integration/test_fuzz.py asked for 2,500 cases (operations
with few distinct inputs run out early, so the pass makes fewer; it must make at least 1,000),
against the machine's Postgres and Redis like the integration tests. Prints the pass's
counts (operations, cases, statuses, server errors, schema failures) and exits with its status.

    .venv/bin/python bench/fuzz_long.py [--cases N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIN_CASES = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2500, help=f"cases asked for (at least {MIN_CASES})")
    args = parser.parse_args()
    if args.cases < MIN_CASES:
        parser.error(f"--cases must be at least {MIN_CASES}")
    env = {**os.environ, "CUSET_FUZZ_CASES": str(args.cases)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration/test_fuzz.py", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    report = [line for line in run.stdout.splitlines() if line.startswith(("fuzz:", "  5xx:", "  check x"))]
    print("\n".join(report) or run.stdout[-3000:] + run.stderr[-3000:])
    made = re.search(r"fuzz: \d+ operations, (\d+) cases", run.stdout)
    if made is None or int(made.group(1)) < MIN_CASES:
        print(f"fewer than {MIN_CASES} cases were made; ask for more with --cases")
        return 1
    print(f"pytest exit status {run.returncode}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
