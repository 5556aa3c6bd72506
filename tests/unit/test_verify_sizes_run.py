"""What a verdict says of the sizes its trials ran (``VerifyResult.sizes_run``, issue 47 item 4): it
survives the JSON the service stores and returns, and ``cuset verify`` prints it."""

from __future__ import annotations

from cuset_core.cli.verify import sizes_line
from cuset_core.verify.result import SizesRun, Tier, Verdict, VerifyResult

REDUCED = SizesRun(sizes={"BATCH": 64, "DIM": 128}, shrunk={"DIM": 16384}, input_shapes=[[[64, 128]]] * 3)
SECOND = SizesRun(sizes={"BATCH": 1, "DIM": 16384}, shrunk={"BATCH": 64}, input_shapes=[[[1, 16384]]] * 3)
ORIGINAL = SizesRun(sizes={"BATCH": 64, "DIM": 16384}, input_shapes=[[[64, 16384]]] * 3)


def verdict(*runs: SizesRun) -> VerifyResult:
    return VerifyResult(verdict=Verdict.PASS, tier=Tier.CPU, sizes_run=list(runs))


def test_whether_the_original_sizes_ran_follows_from_the_sizes_run():
    assert verdict(REDUCED, SECOND).original_sizes_run is False
    assert verdict(REDUCED, ORIGINAL).original_sizes_run is True
    assert verdict().original_sizes_run is None  # no tier-2 trial ran


def test_the_sizes_run_survive_the_json_the_service_stores_and_returns():
    stored = verdict(REDUCED, SECOND).model_dump(mode="json")
    assert stored["original_sizes_run"] is False
    assert stored["sizes_run"][1]["input_shapes"][0] == [[1, 16384]]
    again = VerifyResult.model_validate(stored)
    assert again.sizes_run == [REDUCED, SECOND] and again.original_sizes_run is False


def test_cuset_verify_prints_each_size_its_input_shapes_and_whether_the_original_ran():
    line = sizes_line(verdict(REDUCED, SECOND))
    assert line == (
        "sizes run: DIM=128 (of 16384): inputs (64, 128) | BATCH=1 (of 64): inputs (1, 16384); original sizes not run"
    )
    assert sizes_line(verdict(REDUCED, ORIGINAL)).endswith("original sizes: inputs (64, 16384); original sizes run")
