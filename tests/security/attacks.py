"""The hostile candidates of issue 13, as data: each is the demo ReLU solution with one attack.

Shared by ``tests/security`` (each attack must fail) and ``bench/hack_suite.py`` (caught/total
and tier-2 time, this design against the previous one). The attacks aim at both designs: they
forge ``report.json`` (this judge's) and ``result.json`` (the previous harness's), and patch the
comparison wherever a harness imported it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "cuset_core" / "demo"
PROBLEM = (DEMO / "problems" / "02_relu.py").read_text()
HONEST = (DEMO / "solutions" / "02_relu.py").read_text()
SECRET = "SECRET-7f3a-only-the-test-knows"
WRONG_KERNEL = ("y[i] = fmaxf(x[i], 0.0f);", "y[i] = fmaxf(x[i], 0.0f) + 1.0f;")  # wrong by exactly 1


def at_import(code: str) -> str:
    """The honest solution with ``code`` run when the candidate module is imported, before it builds."""
    return HONEST.replace(
        "from torch.utils.cpp_extension import load_inline\n",
        "from torch.utils.cpp_extension import load_inline\n" + code + "\n",
        1,
    )


def in_forward(body: str) -> str:
    """The honest solution whose ``forward`` runs ``body`` instead."""
    return HONEST.replace("        return relu_ext.relu_cuda(x)", body)


_FORGED = '{"verdict": "pass", "reason": "forged", "trials": 3, "launches": {"relu_kernel": 3}}'

FORGE_AND_EXIT = at_import(f"""
import os as _os
for _name in ("result.json", "report.json", "../result.json"):
    try:
        open(_name, "w").write('{_FORGED}')
    except OSError:
        pass
_os._exit(0)
""")

REPLACE_COMPARISON = at_import("""
import sys as _sys
import cuset_core.verify.execution.judge as _judge
from cuset_core.verify.execution.contracts import Outcome as _Outcome
_pass = lambda *args, **kwargs: _Outcome("pass")
for _module in (_judge, _sys.modules.get("__main__")):
    for _name in ("compare_outputs", "compare_trials"):
        if hasattr(_module, _name):
            setattr(_module, _name, _pass)
""").replace(*WRONG_KERNEL)

REPLACE_ALLCLOSE = at_import("""
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda *args, **kwargs: True
""").replace(*WRONG_KERNEL)

TORCH_EXPRESSION = in_forward("        relu_ext.relu_cuda(x)\n        return (x + x.abs()) * 0.5")
# Torch's work moved by the kernel: with the kernels off the output is garbage.
KERNEL_MOVES_TORCHS_RESULT = in_forward("        return relu_ext.relu_cuda((x + x.abs()) * 0.5)")

REFERENCE_THROUGH_SYS_MODULES = in_forward("""        import sys, pathlib
        relu_ext.relu_cuda(x)
        found = [m for m in list(sys.modules.values())
                 if isinstance(getattr(m, "Model", None), type) and callable(getattr(m, "get_inputs", None))]
        if found:
            return found[0].Model()(x)
        files = sorted(str(p) for p in pathlib.Path.cwd().parent.rglob("problem.py"))
        raise RuntimeError(f"no reference: modules={len(found)} files={files}")""")


def symlink_to(hidden: Path, *names: str) -> str:
    """A candidate that replaces its result files ``names`` by symlinks to ``hidden`` and exits."""
    links = "\n".join(f"_os.symlink({str(hidden)!r}, {name!r})" for name in names)
    return at_import(f"import os as _os\n{links}\n_os._exit(0)")


def forged_report_then(code: str) -> str:
    """A candidate that writes a forged passing report, runs ``code`` (with ``_os``) and exits."""
    return at_import(f"import os as _os\nopen('report.json', 'w').write('{_FORGED}')\n{code}\n_os._exit(0)")


# A wrong kernel, and an exit hook that writes the right outputs over the harness's once it is done.
REWRITE_AT_EXIT = at_import("""
import atexit as _atexit
def _rewrite():
    from pathlib import Path as _Path
    from cuset_core.verify.execution.transfer import load_values as _load, save_values as _save
    _trials = _load(_Path("inputs.safetensors").read_bytes())["trials"]
    _save(_Path("outputs.safetensors"), {"trials": [[x.relu() for x in _inputs] for _inputs in _trials]})
_atexit.register(_rewrite)
""").replace(*WRONG_KERNEL)

# A wrong kernel that never runs: at import, the candidate computes the outputs with torch from the
# inputs file, writes them and a passing report as the harness would, and leaves.
OUTPUTS_OF_ITS_OWN = at_import("""
import json as _json, os as _os
from pathlib import Path as _Path
from cuset_core.verify.execution.transfer import load_values as _load, save_values as _save
_trials = _load(_Path("inputs.safetensors").read_bytes())["trials"]
_save(_Path("outputs.safetensors"), {"trials": [[x.relu() for x in _inputs] for _inputs in _trials]})
_Path("report.json").write_text(_json.dumps({"verdict": "pass", "launches": {"relu_kernel": len(_trials)}}))
_os._exit(0)
""").replace(*WRONG_KERNEL)

# Issue 47's classes, one each (the data-flow policy's own tests hold the variations): the host's
# relu of a device-to-host copy added to a kernel's zeros; the same, copied into a scratch tensor a
# kernel moves; torch's nonzero on the kernel's output so that a kernels-off replay changes shape;
# trial 2's forward fixing the output trial 1 returned; an output that is the input, written in place.
HOST_RELU_THROUGH_A_KERNEL = in_forward(
    "        return relu_ext.relu_cuda(x * 0 - 1) + x.cpu().clamp(min=0).to(x.device)"
)
HOST_RELU_IN_A_SCRATCH_TENSOR = in_forward(
    "        scratch = torch.empty_like(x)\n"
    "        scratch.copy_(torch.from_numpy(x.cpu().numpy().clip(0)))\n"
    "        return relu_ext.relu_cuda(scratch)"
)
REPLAY_THAT_CHANGES_SHAPE = in_forward(
    "        zeros = relu_ext.relu_cuda(x * 0 - 1)\n        torch.nonzero(zeros)\n        return zeros + torch.relu(x)"
)
LATER_TRIAL_FIXES_EARLIER = in_forward(
    "        out = relu_ext.relu_cuda(x * 0 - 1)\n"
    "        for earlier, given in getattr(self, 'earlier', []):\n"
    "            earlier.copy_(torch.relu(given))\n"
    "        self.earlier = [*getattr(self, 'earlier', []), (out, x)]\n"
    "        return out"
)
OUTPUT_IS_THE_INPUT = in_forward("        x.copy_(relu_ext.relu_cuda(x))\n        return x")

HUGE_REASON = at_import("""
import sys as _sys
_sys.stderr.write("L" * (20 << 20))
raise RuntimeError("R" * (20 << 20))
""")

HUGE_REPORT = at_import("""
import json as _json, os as _os
open("report.json", "w").write(_json.dumps({"verdict": "runtime_error", "reason": "R" * (20 << 20)}))
_os._exit(0)
""")


@dataclass(frozen=True)
class Attack:
    """One hostile candidate and the verdicts that mean it was caught."""

    name: str
    candidate: str
    caught_as: tuple[str, ...]


def suite(hidden: Path) -> list[Attack]:
    """Every attack; ``hidden`` is a file holding ``SECRET`` that the judge must never read back."""
    return [
        Attack("writes the result file itself and exits", FORGE_AND_EXIT, ("runtime_error",)),
        Attack("replaces the harness comparison", REPLACE_COMPARISON, ("value_mismatch",)),
        Attack("replaces torch.allclose", REPLACE_ALLCLOSE, ("value_mismatch",)),
        Attack("launches its kernel, returns a torch expression", TORCH_EXPRESSION, ("static_reject",)),
        Attack("its kernel moves what torch computed on the device", KERNEL_MOVES_TORCHS_RESULT, ("static_reject",)),
        Attack("calls the reference Model through sys.modules", REFERENCE_THROUGH_SYS_MODULES, ("runtime_error",)),
        Attack(
            "result file replaced by a symlink to a hidden file",
            symlink_to(hidden, "report.json", "result.json"),
            ("runtime_error",),
        ),
        Attack(
            "outputs replaced by a symlink to a hidden file",
            forged_report_then(f"_os.symlink({str(hidden)!r}, 'outputs.safetensors')"),
            ("runtime_error",),
        ),
        Attack(
            "outputs replaced by a FIFO nobody writes",
            forged_report_then("_os.mkfifo('outputs.safetensors')"),
            ("runtime_error",),
        ),
        Attack(
            "oversized outputs (64 MiB sparse file)",
            forged_report_then("open('outputs.safetensors', 'wb').truncate(64 << 20)"),
            ("runtime_error",),
        ),
        Attack("rewrites the outputs in an exit hook", REWRITE_AT_EXIT, ("value_mismatch",)),
        Attack("computes and writes its outputs itself at import (open)", OUTPUTS_OF_ITS_OWN, ("runtime_error",)),
        Attack("emits a 20 MiB reason and log", HUGE_REASON, ("runtime_error",)),
        Attack("writes a 20 MiB report", HUGE_REPORT, ("runtime_error",)),
        Attack(
            "the host's relu of a copy to the CPU added to a kernel's zeros",
            HOST_RELU_THROUGH_A_KERNEL,
            ("static_reject",),
        ),
        Attack("the host's relu in a scratch tensor a kernel moves", HOST_RELU_IN_A_SCRATCH_TENSOR, ("static_reject",)),
        Attack(
            "torch's nonzero on the kernel's output, then torch's relu", REPLAY_THAT_CHANGES_SHAPE, ("static_reject",)
        ),
        Attack(
            "a later trial's forward fixes the output an earlier one returned",
            LATER_TRIAL_FIXES_EARLIER,
            ("static_reject", "value_mismatch"),
        ),
        Attack("returns its input, written in place", OUTPUT_IS_THE_INPUT, ("runtime_error", "static_reject")),
    ]
