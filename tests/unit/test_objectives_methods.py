"""compute_objective on a hand-built micro-batch: which tokens each method keeps, the sample
weights, the loss and its normalisation, the metrics, and the edge cases.

The batch (p = probability of the gold token, "." = not supervised, S = sensitive, r = region):

    sample 0:  .    0.9  0.8  0.3S(r0)  0.95  0.6S(r0)
    sample 1:  .    .    0.7  0.99S(r1) 0.05  .          (last position is padding)

Non-sensitive p, sorted: 0.05 0.7 0.8 0.9 0.95; sensitive p: 0.3 0.6 0.99.

Regions here hold only sensitive tokens, so both extents agree; the reweighting numbers below
are definition v1's (``v1(...)``: mean region confidence, tau_lo a quantile of token p,
micro-batch normalisation, lambda 1); test_objectives_v2.py covers v2's rules.
"""

from __future__ import annotations

import math

import pytest
import torch
from objective_cases import token_batch

from cuset_core.objectives import MethodConfig
from cuset_core.objectives.config import V1_KNOBS
from cuset_core.objectives.objective import ObjectiveBatch, compute_objective

_ = None
P = [[_, 0.9, 0.8, 0.3, 0.95, 0.6], [_, _, 0.7, 0.99, 0.05, _]]
SENSITIVE = [[0, 0, 0, 1, 0, 1], [0, 0, 0, 1, 0, 0]]
REGIONS = [[-1, -1, -1, 0, -1, 0], [-1, -1, -1, 1, -1, -1]]
SUPERVISED_COUNT = 8


def nll(p: float) -> float:
    return -math.log(p)


def make_batch(p_rows=P, sensitive=SENSITIVE, regions=REGIONS, **fields) -> ObjectiveBatch:
    """The batch of the table above (or variations of it)."""
    return token_batch(p_rows, sensitive, regions, **fields)


def v1(method: str, **knobs) -> MethodConfig:
    """``method`` with every definition-v1 knob: these tests pin v1's numbers."""
    return MethodConfig(**{**V1_KNOBS, "type": method, **knobs})


def kept(output) -> list[list[int]]:
    return output.keep.int().tolist()


ALL_SUPERVISED = [[0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]]


def test_sft_keeps_every_supervised_token_and_averages_over_them():
    output = compute_objective(MethodConfig(type="sft"), make_batch())
    assert kept(output) == ALL_SUPERVISED
    assert output.sample_weights.tolist() == [1.0, 1.0]
    expected = sum(nll(p) for row in P for p in row if p is not None) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)


def test_the_denominator_is_num_items_in_batch_not_the_kept_count():
    local = compute_objective(MethodConfig(type="cuset"), make_batch())
    global_ = compute_objective(MethodConfig(type="cuset"), make_batch(num_items_in_batch=16))
    as_tensor = compute_objective(MethodConfig(type="cuset"), make_batch(num_items_in_batch=torch.tensor(16)))
    assert global_.loss.item() == pytest.approx(local.loss.item() / 2, rel=1e-6)
    assert as_tensor.loss.item() == pytest.approx(global_.loss.item(), rel=1e-6)


def test_dft_scales_each_token_loss_by_its_detached_probability():
    batch = make_batch()
    output = compute_objective(MethodConfig(type="dft"), batch)
    expected = sum(p * nll(p) for row in P for p in row if p is not None) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)
    output.loss.backward()
    # sg(p): the gradient with respect to l is p / N, with no term through p.
    assert batch.token_loss.grad[0, 1:].tolist() == pytest.approx([p / SUPERVISED_COUNT for p in P[0][1:]])


def test_focal_scales_by_a_detached_one_minus_p_to_the_gamma():
    batch = make_batch()
    output = compute_objective(MethodConfig(type="focal", focal_gamma=2.0), batch)
    expected = sum((1 - p) ** 2 * nll(p) for row in P for p in row if p is not None) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-5)
    output.loss.backward()
    assert batch.token_loss.grad[0, 1:].tolist() == pytest.approx(
        [(1 - p) ** 2 / SUPERVISED_COUNT for p in P[0][1:]], rel=1e-5
    )


def test_profit_drops_tokens_below_the_threshold():
    output = compute_objective(MethodConfig(type="profit", profit_threshold=0.1), make_batch())
    assert kept(output) == [[0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0]]
    expected = sum(nll(p) for row in P for p in row if p is not None and p >= 0.1) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)


def test_cuset_mask_keeps_sensitive_tokens_and_drops_confident_non_sensitive_ones():
    # tau_hi = 0.6 quantile of [0.05 0.7 0.8 0.9 0.95] = 0.8 + 0.4 * (0.9 - 0.8) = 0.84.
    output = compute_objective(MethodConfig(type="cuset_mask", mask_ratio=0.4), make_batch())
    assert output.metrics["tau_hi"] == pytest.approx(0.84, rel=1e-6)
    assert kept(output) == [[0, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0]]
    assert output.sample_weights.tolist() == [1.0, 1.0]
    expected = sum(map(nll, [0.8, 0.3, 0.6, 0.7, 0.99, 0.05])) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)


def test_confident_sensitive_tokens_are_kept_even_above_tau_hi():
    output = compute_objective(MethodConfig(type="cuset_mask", mask_ratio=0.4), make_batch())
    assert output.metrics["tau_hi"] < 0.99
    assert output.keep[1, 3].item() is True


def test_cuset_reweight_upweights_the_sample_holding_a_low_confidence_region():
    # tau_lo = median of sensitive p [0.3 0.6 0.99] = 0.6; region 0 (mean 0.45) is low,
    # region 1 (mean 0.99) is not. u = [1, 0], w = [2, 1] / 1.5 = [4/3, 2/3].
    output = compute_objective(v1("cuset_reweight", region_quantile=0.5), make_batch())
    assert output.metrics["tau_lo"] == pytest.approx(0.6, rel=1e-6)
    assert output.metrics["low_conf_region_share"] == 0.5
    assert kept(output) == ALL_SUPERVISED
    assert output.sample_weights.tolist() == pytest.approx([4 / 3, 2 / 3])
    expected = (
        4 / 3 * sum(map(nll, [0.9, 0.8, 0.3, 0.95, 0.6])) + 2 / 3 * sum(map(nll, [0.7, 0.99, 0.05]))
    ) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)


def test_u_is_the_share_of_sensitive_tokens_in_low_confidence_regions():
    # Sample 0 gets a second region (token 1, p 0.9) that is not low: u0 = 2/3, u1 = 0,
    # w = [5/3, 1] / (4/3) = [5/4, 3/4].
    sensitive = [[0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 0, 0]]
    regions = [[-1, 2, -1, 0, -1, 0], [-1, -1, -1, 1, -1, -1]]
    config = v1("cuset_reweight", region_threshold=0.5)
    output = compute_objective(config, make_batch(sensitive=sensitive, regions=regions))
    assert output.metrics["tau_lo"] == 0.5
    assert output.sample_weights.tolist() == pytest.approx([5 / 4, 3 / 4])


def test_sensitive_tokens_outside_any_region_count_in_u_s_denominator_only():
    sensitive = [[0, 1, 0, 1, 0, 1], [0, 0, 0, 1, 0, 0]]
    regions = [[-1, -1, -1, 0, -1, 0], [-1, -1, -1, 1, -1, -1]]
    config = v1("cuset_reweight", region_threshold=0.5)
    output = compute_objective(config, make_batch(sensitive=sensitive, regions=regions))
    assert output.sample_weights.tolist() == pytest.approx([5 / 4, 3 / 4])


def test_weights_are_clipped_after_normalising():
    config = v1("cuset_reweight", region_quantile=0.5, reweight_lambda=4.0, w_max=1.5)
    # raw = [5, 1], normalised [5/3, 1/3], clipped to [0.5, 1.5].
    output = compute_objective(config, make_batch())
    assert output.sample_weights.tolist() == pytest.approx([1.5, 0.5])


def test_lambda_zero_gives_unit_weights():
    output = compute_objective(v1("cuset_reweight", reweight_lambda=0.0), make_batch())
    assert output.sample_weights.tolist() == [1.0, 1.0]


def test_region_ids_repeated_in_two_samples_are_separate_regions():
    regions = [[-1, -1, -1, 0, -1, 0], [-1, -1, -1, 0, -1, -1]]
    output = compute_objective(v1("cuset_reweight", region_quantile=0.5), make_batch(regions=regions))
    assert output.metrics["low_conf_region_share"] == 0.5
    assert output.sample_weights.tolist() == pytest.approx([4 / 3, 2 / 3])


def test_cuset_combines_masking_and_reweighting():
    config = v1("cuset_v1", mask_ratio=0.4, region_quantile=0.5)
    output = compute_objective(config, make_batch())
    assert kept(output) == [[0, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0]]
    assert output.sample_weights.tolist() == pytest.approx([4 / 3, 2 / 3])
    expected = (4 / 3 * sum(map(nll, [0.8, 0.3, 0.6])) + 2 / 3 * sum(map(nll, [0.7, 0.99, 0.05]))) / SUPERVISED_COUNT
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)


def test_metrics_of_a_cuset_step():
    config = v1("cuset_v1", mask_ratio=0.4, region_quantile=0.5)
    metrics = compute_objective(config, make_batch()).metrics
    assert metrics == pytest.approx(
        {
            "ce": sum(nll(p) for row in P for p in row if p is not None) / SUPERVISED_COUNT,
            "kept_ratio": 6 / 8,
            # dropped: 0.9 and 0.95; every supervised token's 1 - p sums to 2.71
            "dropped_grad_share": (0.1 + 0.05) / 2.71,
            "sensitive_share": 3 / 8,
            "p_sensitive_mean": (0.3 + 0.6 + 0.99) / 3,
            "p_nonsensitive_mean": (0.9 + 0.8 + 0.95 + 0.7 + 0.05) / 5,
            "low_conf_region_share": 0.5,
            "weight_mean": 1.0,
            "weight_max": 4 / 3,
            "tau_hi": 0.84,
            "tau_lo": 0.6,
            "weight_normaliser": 1.5,
            "mask_ratio": 0.4,
        },
        rel=1e-6,
    )
    assert all(type(value) is float for value in metrics.values())


def test_baselines_log_no_thresholds():
    metrics = compute_objective(MethodConfig(type="sft"), make_batch()).metrics
    assert set(metrics) == {
        "ce",
        "kept_ratio",
        "dropped_grad_share",
        "sensitive_share",
        "p_sensitive_mean",
        "p_nonsensitive_mean",
        "weight_mean",
        "weight_max",
    }
    assert metrics["dropped_grad_share"] == 0.0


def test_sample_weights_carry_no_gradient():
    batch = make_batch()
    config = v1("cuset_reweight", region_quantile=0.5)
    output = compute_objective(config, batch)
    assert not output.sample_weights.requires_grad
    output.loss.backward()
    # d loss / d l[i, t] = w[i] * keep[i, t] / N exactly: nothing flows through w or p.
    expected = output.sample_weights[:, None] * output.keep / SUPERVISED_COUNT
    assert torch.allclose(batch.token_loss.grad, expected)


def test_gradient_accumulation_two_micro_batches_sum_to_the_merged_batch():
    config = MethodConfig(type="sft")
    merged = compute_objective(config, make_batch())
    halves = [
        compute_objective(
            config,
            make_batch([row], [sens], [reg], num_items_in_batch=SUPERVISED_COUNT),
        )
        for row, sens, reg in zip(P, SENSITIVE, REGIONS)
    ]
    assert sum(h.loss.item() for h in halves) == pytest.approx(merged.loss.item(), rel=1e-6)


def test_gather_is_called_for_both_thresholds_and_moves_them():
    calls: list[torch.Tensor] = []
    other_rank = torch.tensor([0.01, 0.02, 0.03, 0.04, 0.06])

    def gather(values: torch.Tensor) -> torch.Tensor:
        calls.append(values.clone())
        return torch.cat([values, other_rank])

    config = v1("cuset_v1", mask_ratio=0.4, region_quantile=0.5)
    local = compute_objective(config, make_batch())
    pooled = compute_objective(config, make_batch(), gather=gather)
    assert len(calls) == 3
    assert sorted(calls[0].tolist()) == pytest.approx([0.05, 0.7, 0.8, 0.9, 0.95])
    assert sorted(calls[1].tolist()) == pytest.approx([0.3, 0.6, 0.99])
    # Pooled tau_lo 0.05 leaves no region low: raw weights [1, 1], gathered for the normaliser.
    assert calls[2].tolist() == [1.0, 1.0]
    # Pooled non-sensitive p: 0.01 .. 0.06 then 0.7 .. 0.95; 0.6 quantile = 0.06 + 0.4 * 0.64.
    assert pooled.metrics["tau_hi"] == pytest.approx(0.316, rel=1e-5)
    assert pooled.metrics["tau_hi"] < local.metrics["tau_hi"]
    assert kept(pooled) == [[0, 0, 0, 1, 0, 1], [0, 0, 0, 1, 1, 0]]
    # Pooled sensitive p: 0.01 .. 0.06 then 0.3 0.6 0.99; median = (0.04 + 0.06) / 2.
    assert pooled.metrics["tau_lo"] == pytest.approx(0.05, rel=1e-5)


def test_a_fixed_region_threshold_gathers_only_the_weight_normaliser():
    calls: list[torch.Tensor] = []
    config = v1("cuset_reweight", region_threshold=0.5)
    compute_objective(config, make_batch(), gather=lambda v: calls.append(v) or v)
    assert [c.tolist() for c in calls] == [[2.0, 1.0]]


def test_mask_ratio_zero_keeps_everything_and_gathers_nothing():
    calls: list[torch.Tensor] = []
    config = MethodConfig(type="cuset_mask", mask_ratio=0.0)
    output = compute_objective(config, make_batch(), gather=lambda v: calls.append(v) or v)
    assert kept(output) == ALL_SUPERVISED
    assert calls == []
    assert "tau_hi" not in output.metrics


def test_mask_warmup_ramps_the_dropped_share():
    config = MethodConfig(type="cuset_mask", mask_ratio=0.4, mask_warmup_steps=10)
    at_start = compute_objective(config, make_batch(step=0))
    at_end = compute_objective(config, make_batch(step=10))
    assert kept(at_start) == ALL_SUPERVISED
    assert at_start.metrics["mask_ratio"] == 0.0
    assert kept(at_end) == [[0, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0]]


def test_no_sensitive_tokens_masks_only_and_keeps_unit_weights():
    nothing = [[0] * 6, [0] * 6]
    none_region = [[-1] * 6, [-1] * 6]
    config = MethodConfig(type="cuset", mask_ratio=0.25)
    output = compute_objective(config, make_batch(sensitive=nothing, regions=none_region))
    # 0.75 quantile of the 8 supervised p, all non-sensitive: 0.9 + 0.25 * 0.05; 0.95, 0.99 drop.
    assert output.metrics["tau_hi"] == pytest.approx(0.9125, rel=1e-6)
    assert kept(output) == [[0, 1, 1, 1, 0, 1], [0, 0, 1, 0, 1, 0]]
    assert output.sample_weights.tolist() == [1.0, 1.0]
    assert "tau_lo" not in output.metrics
    assert "p_sensitive_mean" not in output.metrics
    assert "low_conf_region_share" not in output.metrics


def test_only_sensitive_tokens_keeps_everything():
    everything = [[1] * 6, [1] * 6]
    config = MethodConfig(type="cuset_mask")
    output = compute_objective(config, make_batch(sensitive=everything))
    assert kept(output) == ALL_SUPERVISED
    assert "tau_hi" not in output.metrics
    assert "p_nonsensitive_mean" not in output.metrics


def test_sensitivity_outside_supervision_is_ignored():
    sensitive = [[1, 0, 0, 1, 0, 1], [1, 1, 0, 1, 0, 1]]
    output = compute_objective(MethodConfig(type="sft"), make_batch(sensitive=sensitive))
    assert output.metrics["sensitive_share"] == 3 / 8


def test_an_all_padding_batch_gives_zero_loss_with_a_graph():
    empty = [[_] * 6, [_] * 6]
    for method in ("sft", "dft", "focal", "profit", "cuset", "cuset_mask", "cuset_reweight"):
        batch = make_batch(p_rows=empty)
        output = compute_objective(MethodConfig(type=method), batch)
        output.loss.backward()
        assert output.loss.item() == 0.0
        assert output.keep.sum().item() == 0
        assert output.sample_weights.tolist() == [1.0, 1.0]
        assert "ce" not in output.metrics and "weight_mean" not in output.metrics


def test_a_padding_row_does_not_shift_the_weight_normalisation():
    p_rows = P + [[_] * 6]
    sensitive = SENSITIVE + [[0] * 6]
    regions = REGIONS + [[-1] * 6]
    output = compute_objective(
        v1("cuset_reweight", region_quantile=0.5),
        make_batch(p_rows=p_rows, sensitive=sensitive, regions=regions),
    )
    assert output.sample_weights.tolist() == pytest.approx([4 / 3, 2 / 3, 1.0])
    assert output.metrics["weight_mean"] == pytest.approx(1.0)


def test_a_single_sample_always_has_weight_one():
    output = compute_objective(
        MethodConfig(type="cuset", region_quantile=0.5), make_batch([P[0]], [SENSITIVE[0]], [REGIONS[0]])
    )
    assert output.sample_weights.tolist() == [1.0]


def test_reference_confidence_decides_while_the_loss_stays_the_forward_loss():
    # The reference model is sure of sample 0's second token and unsure of the rest.
    reference = torch.full((2, 6), 0.5)
    reference[0, 1] = 0.99
    batch = make_batch(reference_confidence=reference)
    config = MethodConfig(type="profit", confidence="reference", profit_threshold=0.6)
    output = compute_objective(config, batch)
    assert kept(output) == [[0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
    assert output.loss.item() == pytest.approx(nll(0.9) / SUPERVISED_COUNT, rel=1e-6)
    assert output.metrics["p_nonsensitive_mean"] == pytest.approx((0.99 + 0.5 * 4) / 5)


def test_reference_confidence_missing_is_one_clear_error():
    with pytest.raises(ValueError, match="confidence is 'reference' but the batch has no reference_confidence"):
        compute_objective(MethodConfig(confidence="reference"), make_batch())


def test_mismatched_masks_are_rejected():
    batch = make_batch()
    batch.region_ids = batch.region_ids[:, :5]
    with pytest.raises(ValueError, match=r"region_ids must have token_loss's shape \(2, 6\)"):
        compute_objective(MethodConfig(), batch)


@pytest.mark.gpu
def test_cuda_tensors_give_the_cpu_result():
    config = v1("cuset_v1", mask_ratio=0.4, region_quantile=0.5)
    on_cpu = compute_objective(config, make_batch())
    cpu_batch = make_batch(num_items_in_batch=torch.tensor(SUPERVISED_COUNT))
    batch = ObjectiveBatch(
        token_loss=cpu_batch.token_loss.detach().cuda().requires_grad_(),
        supervised=cpu_batch.supervised.cuda(),
        sensitive=cpu_batch.sensitive.cuda(),
        region_ids=cpu_batch.region_ids.cuda(),
        num_items_in_batch=cpu_batch.num_items_in_batch.cuda(),
    )
    on_gpu = compute_objective(config, batch)
    on_gpu.loss.backward()
    assert on_gpu.loss.item() == pytest.approx(on_cpu.loss.item(), rel=1e-5)
    assert kept(on_gpu) == kept(on_cpu)
    assert on_gpu.metrics == pytest.approx(on_cpu.metrics, rel=1e-5)
