"""The verifier's canary: the project's own known-good candidate, run through a tier's path.

Attribution by construction (issue 47, item 6): an exception of any type (``RecursionError``
and ``MemoryError`` included) while the verifier analyses or compiles a candidate's material is
the candidate's verdict, unless the verifier itself is broken at that moment. Which of the two
it is, the canary says: the demo ReLU solution (``cuset_core/demo``), which every tier passes, is
run through the same function with the same settings right then. Only when it fails too is the
verdict ``internal_error``; else the exception came from what the candidate wrote.
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

from cuset_core.verify.settings import VerifySettings

CANARY_NAME = "02_relu"


def canary_answer() -> str:
    """The known-good answer the canary verifies: the demo ReLU solution's text."""
    return resources.files("cuset_core.demo").joinpath("solutions", f"{CANARY_NAME}.py").read_text()


def static_canary_fails() -> bool:
    """Whether tier 0's analysis (``parse_candidate``, ``check_static``, ``static_warnings``)
    fails on the canary now: it raises or rejects it."""
    from cuset_core.verify.candidate import parse_candidate
    from cuset_core.verify.source.static import check_static, static_warnings

    try:
        candidate = parse_candidate(canary_answer())
        static_warnings(candidate)
        return check_static(candidate) is not None
    except Exception:  # noqa: BLE001 - any failure of the verifier's own path is what is asked
        return True


def compile_canary_fails(settings: VerifySettings) -> bool:
    """Whether tier 1 (``compile_candidate`` with ``settings``) fails on the canary now: it
    raises or does not compile it."""
    from cuset_core.verify.candidate import parse_candidate
    from cuset_core.verify.compile import compile_candidate

    try:
        with tempfile.TemporaryDirectory(prefix="cuset-canary-") as folder:
            return not compile_candidate(parse_candidate(canary_answer()), settings, Path(folder)).ok
    except Exception:  # noqa: BLE001
        return True
