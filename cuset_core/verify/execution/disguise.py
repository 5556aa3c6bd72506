"""What the candidate's process shows of the verifier, made to read as a GPU process reads.

A candidate that recognises tier 2 (its module's name, its working folder, its command line, a
patched torch function's name, the device's name, the type of its tensors) can be right there and
wrong on a GPU: two programs. What costs nothing to hide is hidden here; what the verifier cannot
hide without running the candidate elsewhere (the timing of its operations, the verifier's modules
in ``sys.modules``) is written down in docs/verification.md's threat model.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

GPU_NAME = "NVIDIA H100 80GB HBM3"  # what torch.cuda.get_device_name says of the device tier 2 models
CANDIDATE_MODULE = "model_new"  # the candidate's module, as a user's script would import its file
CUDA_VERSION = "12.8"  # torch.version.cuda of the CUDA build tier 2 stands in for
CUDNN_VERSION = 90100

Named = TypeVar("Named", bound=Callable[..., Any])


def as_if(function: Named, owner: str, name: str) -> Named:
    """``function`` carrying the module and name of torch's own ``owner.name``, which it stands in for."""
    function.__module__ = owner
    function.__name__ = name
    function.__qualname__ = name
    return function


def plain_command_line() -> None:
    """The interpreter's command line as an embedding script leaves it: nothing of the harness."""
    sys.argv = [""]
