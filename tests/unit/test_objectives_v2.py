"""CuSeT definition v2 (DESIGN.md §3): region extents, geometric region confidence, the two
masking rules, tau_lo on the scale of region confidences with an EMA over steps, the running
weight normaliser and its clipping, the dataset-wide statistics of reference confidence, and
gradient accumulation.

The batch (p = probability of the gold token, "." = not supervised, S = sensitive, rN = the
region whose syntactic unit holds the token):

    sample 0:  .    0.9  0.8(r0)  0.3S(r0)  0.95(r0)  0.6S(r0)
    sample 1:  .    .    0.7      0.99S(r1) 0.05(r1)  .

With ``region_extent: span`` only the S tokens are region tokens (v1); with ``unit`` every rN
token is. Region confidences under ``unit``: r0 over [0.8 0.3 0.95 0.6], r1 over [0.99 0.05].
"""

from __future__ import annotations

import math

import pytest
import torch
from objective_cases import token_batch

from cuset_core.objectives import MethodConfig
from cuset_core.objectives.objective import ObjectiveBatch, compute_objective, dataset_state
from cuset_core.objectives.state import ObjectiveState, StepEMA

_ = None
P = [[_, 0.9, 0.8, 0.3, 0.95, 0.6], [_, _, 0.7, 0.99, 0.05, _]]
SENSITIVE = [[0, 0, 0, 1, 0, 1], [0, 0, 0, 1, 0, 0]]
REGIONS = [[-1, -1, 0, 0, 0, 0], [-1, -1, -1, 1, 1, -1]]
N = 8  # supervised tokens

GEO_R0 = (0.8 * 0.3 * 0.95 * 0.6) ** (1 / 4)  # 0.608
GEO_R1 = (0.99 * 0.05) ** (1 / 2)  # 0.222
MEAN_R0, MEAN_R1 = (0.8 + 0.3 + 0.95 + 0.6) / 4, (0.99 + 0.05) / 2  # 0.6625, 0.52


def nll(p: float) -> float:
    return -math.log(p)


def make_batch(p_rows=P, sensitive=SENSITIVE, regions=REGIONS, step=0, **fields) -> ObjectiveBatch:
    """The batch of the table above (or variations of it)."""
    return token_batch(p_rows, sensitive, regions, step=step, **fields)


def kept(output) -> list[list[int]]:
    return output.keep.int().tolist()


# --- region extents and masking rules ------------------------------------------------------------


def test_unit_extent_never_masks_the_plain_arithmetic_of_a_region():
    # unit: plain p = [0.9, 0.7], tau_hi = median 0.8: only 0.9 drops; 0.95 sits in r0's unit.
    unit = compute_objective(MethodConfig(type="cuset_mask", mask_ratio=0.5), make_batch())
    assert unit.metrics["tau_hi"] == pytest.approx(0.8)
    assert kept(unit) == [[0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]]
    # span (v1): plain p = [0.05 0.7 0.8 0.9 0.95], tau_hi = 0.8: 0.9 and 0.95 drop.
    span = compute_objective(MethodConfig(type="cuset_mask", mask_ratio=0.5, region_extent="span"), make_batch())
    assert kept(span) == [[0, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0]]


def test_uncertain_plain_drops_unlikely_plain_tokens_but_never_region_tokens():
    config = MethodConfig(type="cuset_mask", mask_ratio=0.5, mask_rule="uncertain_plain", region_extent="span")
    output = compute_objective(config, make_batch())
    # plain p [0.05 0.7 0.8 0.9 0.95]: tau_hi' = median 0.8, so 0.05 and 0.7 drop; 0.3 is sensitive.
    assert output.metrics["tau_hi"] == pytest.approx(0.8)
    assert kept(output) == [[0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0]]
    assert output.loss.item() == pytest.approx(sum(map(nll, [0.9, 0.8, 0.3, 0.95, 0.6, 0.99])) / N)
    # unit extent: 0.05 belongs to r1's unit and stays.
    unit = compute_objective(config.model_copy(update={"region_extent": "unit"}), make_batch())
    assert kept(unit) == [[0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 0]]


def test_mask_rule_none_keeps_every_token():
    output = compute_objective(MethodConfig(type="cuset", mask_rule="none", region_threshold=0.0), make_batch())
    assert output.keep.sum().item() == N
    assert "tau_hi" not in output.metrics and "mask_ratio" not in output.metrics


def test_dropped_grad_share_is_the_share_of_one_minus_p_that_masking_removed():
    output = compute_objective(MethodConfig(type="cuset_mask", mask_ratio=0.5), make_batch())
    one_minus_p = [1 - p for row in P for p in row if p is not None]
    assert output.metrics["dropped_grad_share"] == pytest.approx((1 - 0.9) / sum(one_minus_p))


# --- region confidence and tau_lo ----------------------------------------------------------------


def test_geometric_region_confidence_flags_a_region_that_the_mean_hides():
    # r1 holds 0.99 and 0.05: mean 0.52 passes a threshold of 0.5, geometric 0.22 does not.
    geometric = compute_objective(MethodConfig(type="cuset_reweight", region_threshold=0.5), make_batch())
    mean = compute_objective(
        MethodConfig(type="cuset_reweight", region_threshold=0.5, region_confidence="mean"), make_batch()
    )
    assert geometric.metrics["low_conf_region_share"] == 0.5
    assert mean.metrics["low_conf_region_share"] == 0.0
    # u = [0, 1]; raw w = 1 + 2u = [1, 3], divided by their mean 2 on a first step.
    assert geometric.sample_weights.tolist() == pytest.approx([0.5, 1.5])
    assert mean.sample_weights.tolist() == [1.0, 1.0]


def test_tau_lo_is_a_quantile_of_region_confidences():
    output = compute_objective(MethodConfig(type="cuset_reweight", region_quantile=0.5), make_batch())
    assert output.metrics["tau_lo"] == pytest.approx((GEO_R0 + GEO_R1) / 2, rel=1e-5)
    v1_scale = compute_objective(
        MethodConfig(type="cuset_reweight", region_quantile=0.5, tau_lo_from="tokens"), make_batch()
    )
    # unit-extent region-token p: 0.05 0.3 0.6 0.8 0.95 0.99, median 0.7
    assert v1_scale.metrics["tau_lo"] == pytest.approx(0.7, rel=1e-5)


def test_u_counts_every_region_token_of_the_unit():
    config = MethodConfig(type="cuset_reweight", region_threshold=0.65, region_confidence="mean", normaliser_decay=0.0)
    output = compute_objective(config, make_batch())
    # mean: r0 0.6625 not low, r1 0.52 low -> u = [0, 1]: sample 1's two unit tokens, not one.
    assert output.metrics["low_conf_region_share"] == 0.5
    assert output.sample_weights.tolist() == pytest.approx([0.5, 1.5])
    span = compute_objective(config.model_copy(update={"region_extent": "span"}), make_batch())
    # span: r0 = mean(0.3, 0.6) = 0.45 low, r1 = 0.99 not: u = [1, 0].
    assert span.sample_weights.tolist() == pytest.approx([1.5, 0.5])


def test_step_ema_smooths_over_optimizer_steps_not_micro_batches():
    ema = StepEMA(0.9)
    # Step 0 has no history: each micro-batch uses its own statistic.
    assert ema.use(0, torch.tensor(0.2)).item() == pytest.approx(0.2)
    assert ema.use(0, torch.tensor(0.4)).item() == pytest.approx(0.4)
    # Step 1: the EMA took in step 0's mean (0.3) once.
    assert ema.use(1, torch.tensor(1.0)).item() == pytest.approx(0.9 * 0.3 + 0.1 * 1.0)
    assert ema.use(1, torch.tensor(0.0)).item() == pytest.approx(0.9 * 0.3)
    # Step 2: EMA = 0.9 * 0.3 + 0.1 * mean(1.0, 0.0).
    assert ema.use(2, None).item() == pytest.approx(0.9 * 0.3 + 0.1 * 0.5)


def test_a_decay_of_zero_uses_the_micro_batch_statistic():
    ema = StepEMA(0.0)
    ema.use(0, torch.tensor(0.9))
    assert ema.use(1, torch.tensor(0.1)).item() == pytest.approx(0.1)


def test_tau_lo_follows_its_ema_across_steps():
    state = ObjectiveState.for_method(0.9, 0.9)
    config = MethodConfig(type="cuset_reweight", region_quantile=0.5)
    first = compute_objective(config, make_batch(step=0), state=state).metrics["tau_lo"]
    # A second batch whose regions are all sure: its own quantile would be 0.99.
    sure = [[_, 0.9, 0.99, 0.99, 0.99, 0.99], [_, _, 0.7, 0.99, 0.99, _]]
    second = compute_objective(config, make_batch(sure, step=1), state=state).metrics["tau_lo"]
    assert second == pytest.approx(0.9 * first + 0.1 * 0.99, rel=1e-5)


def test_state_survives_a_checkpoint_round_trip():
    state = ObjectiveState.for_method(0.9, 0.9)
    config = MethodConfig(type="cuset_reweight", region_quantile=0.5)
    compute_objective(config, make_batch(step=0), state=state)
    restored = ObjectiveState.for_method(0.9, 0.9)
    restored.load_state_dict(state.state_dict())
    a = compute_objective(config, make_batch(step=1), state=state)
    b = compute_objective(config, make_batch(step=1), state=restored)
    assert b.metrics["tau_lo"] == pytest.approx(a.metrics["tau_lo"])
    assert b.sample_weights.tolist() == pytest.approx(a.sample_weights.tolist())


# --- the running weight normaliser and clipping --------------------------------------------------

EASY = [[_, 0.95, 0.95, 0.95, 0.95, 0.95], [_, _, 0.95, 0.95, 0.95, _]]
HARD = [[_, 0.1, 0.1, 0.1, 0.1, 0.1], [_, _, 0.1, 0.1, 0.1, _]]
ALL_REGION = [[-1, 0, 0, 0, 0, 0], [-1, -1, 1, 1, 1, -1]]


def run_steps(config: MethodConfig, rows: list) -> list:
    state = ObjectiveState.for_method(config.tau_lo_decay, config.normaliser_decay)
    return [
        compute_objective(config, make_batch(p, regions=ALL_REGION, step=step), state=state)
        for step, p in enumerate(rows)
    ]


def test_a_hard_batch_after_easy_ones_weighs_more_than_one():
    config = MethodConfig(type="cuset_reweight", region_threshold=0.5)
    outputs = run_steps(config, [EASY] * 3 + [HARD])
    # Easy steps: u = 0, raw 1, normaliser 1. Hard step: raw 3, normaliser 0.9 * 1 + 0.1 * 3.
    assert outputs[0].sample_weights.tolist() == [1.0, 1.0]
    assert outputs[-1].metrics["weight_normaliser"] == pytest.approx(1.2)
    assert outputs[-1].sample_weights.tolist() == pytest.approx([2.5, 2.5])
    # v1's micro-batch normalisation gives the same hard batch weight 1.
    batch_norm = run_steps(config.model_copy(update={"normaliser_decay": 0.0}), [EASY] * 3 + [HARD])
    assert batch_norm[-1].sample_weights.tolist() == pytest.approx([1.0, 1.0])


def test_weights_are_clipped_to_w_min_and_w_max():
    config = MethodConfig(type="cuset_reweight", region_threshold=0.5, reweight_lambda=10.0)
    outputs = run_steps(config, [EASY, HARD, HARD, HARD, HARD, EASY])
    # Step 1: raw 11 / (0.9 * 1 + 0.1 * 11 = 2) = 5.5, clipped to 4.
    assert outputs[1].sample_weights.tolist() == pytest.approx([4.0, 4.0])
    # Last step: hard steps raised the EMA to ~4.4, so an easy sample's 1 / 4.1 clips to 0.5.
    assert outputs[-1].sample_weights.tolist() == pytest.approx([0.5, 0.5])
    assert not outputs[-1].sample_weights.requires_grad


# --- reference confidence: statistics of the whole dataset ---------------------------------------


def test_dataset_state_takes_tau_lo_and_the_normaliser_over_every_batch():
    config = MethodConfig(type="cuset_reweight", confidence="reference", region_quantile=0.5)
    batches = [make_batch(reference=True), make_batch(EASY, regions=ALL_REGION, reference=True)]
    state = dataset_state(config, batches)
    # Region confidences: 0.608, 0.222 (first batch), 0.95, 0.95: median (0.608 + 0.95) / 2.
    tau_lo = (GEO_R0 + 0.95) / 2
    assert state.tau_lo.value.item() == pytest.approx(tau_lo, rel=1e-5)
    # Low: r0 and r1 of the first batch (u = 1, raw 3); none in the second: mean raw 2.
    assert state.weight_mean.value.item() == pytest.approx(2.0)
    calls = []
    output = compute_objective(config, make_batch(reference=True), gather=lambda v: calls.append(v) or v, state=state)
    assert calls == []  # nothing is gathered: the statistics are the dataset's
    assert output.metrics["tau_lo"] == pytest.approx(tau_lo, rel=1e-5)
    assert output.sample_weights.tolist() == pytest.approx([1.5, 1.5])
    # Frozen: later steps use the same statistics.
    later = compute_objective(config, make_batch(EASY, regions=ALL_REGION, step=5, reference=True), state=state)
    assert later.sample_weights.tolist() == pytest.approx([0.5, 0.5])


def test_dataset_reweighting_without_its_state_is_one_clear_error():
    config = MethodConfig(type="cuset", confidence="reference")
    with pytest.raises(ValueError, match="no state from a pass over the dataset"):
        compute_objective(config, make_batch(reference=True))


# --- gradient accumulation -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["sft", "dft", "focal", "profit", "cuset_reweight"])
def test_two_micro_batches_of_one_step_give_the_loss_and_gradient_of_one_batch(method):
    config = MethodConfig(type=method, confidence="reference", region_threshold=0.5)
    state = dataset_state(config, [make_batch(reference=True)]) if config.dataset_reweighting else None
    merged = make_batch(reference=True)
    merged_out = compute_objective(config, merged, state=state)
    merged_out.loss.backward()
    halves = [
        make_batch([row], [sens], [reg], num_items_in_batch=N, reference=True)
        for row, sens, reg in zip(P, SENSITIVE, REGIONS)
    ]
    total = 0.0
    for half in halves:
        out = compute_objective(config, half, state=state)
        out.loss.backward()
        total += out.loss.item()
    assert total == pytest.approx(merged_out.loss.item(), rel=1e-6)
    for row, half in enumerate(halves):
        assert torch.allclose(half.token_loss.grad[0], merged.token_loss.grad[row], atol=1e-7)
    if method == "cuset_reweight":
        assert merged_out.sample_weights.tolist() != [1.0, 1.0]  # the weights did something
