"""per_token_loss: shifted, aligned with the labels, equal to transformers' causal-LM loss."""

from __future__ import annotations

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from cuset_core.data import IGNORE_INDEX
from cuset_core.objectives.token_loss import chunked_token_loss, per_token_loss, supervised_mask, token_probability


@pytest.fixture
def logits_and_labels() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 11, generator=generator, requires_grad=True)
    labels = torch.tensor(
        [
            [IGNORE_INDEX, IGNORE_INDEX, 3, 7, 1, 10],
            [IGNORE_INDEX, 4, 4, 0, IGNORE_INDEX, IGNORE_INDEX],
        ]
    )
    return logits, labels


def test_position_t_holds_the_loss_of_label_t_predicted_from_position_t_minus_1(logits_and_labels):
    logits, labels = logits_and_labels
    loss = per_token_loss(logits, labels)
    log_probs = torch.log_softmax(logits.detach(), dim=-1)
    assert loss.shape == (2, 6)
    assert loss.dtype == torch.float32
    for i, t in [(0, 2), (0, 3), (0, 4), (0, 5), (1, 1), (1, 2), (1, 3)]:
        assert loss[i, t].item() == pytest.approx(-log_probs[i, t - 1, labels[i, t]].item(), rel=1e-6)


def test_unsupervised_positions_and_the_first_position_are_zero(logits_and_labels):
    logits, labels = logits_and_labels
    loss = per_token_loss(logits, labels)
    assert loss[0, :2].tolist() == [0.0, 0.0]
    assert loss[1, 0].item() == 0.0
    assert loss[1, 4:].tolist() == [0.0, 0.0]


def test_mean_over_supervised_tokens_equals_transformers_shifted_loss(logits_and_labels):
    logits, labels = logits_and_labels
    loss = per_token_loss(logits, labels)
    supervised = supervised_mask(labels)
    ours = loss.sum() / supervised.sum()
    theirs = ForCausalLMLoss(logits, labels, vocab_size=11)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)


def test_gradient_reaches_the_logits(logits_and_labels):
    logits, labels = logits_and_labels
    per_token_loss(logits, labels).sum().backward()
    assert logits.grad is not None
    # The last position predicts nothing, so it gets no gradient.
    assert logits.grad[:, -1].abs().sum().item() == 0.0


def test_supervised_mask_excludes_ignored_labels_and_the_first_position():
    labels = torch.tensor([[5, 6, IGNORE_INDEX, 7]])
    assert supervised_mask(labels).tolist() == [[False, True, False, True]]


def test_token_probability_is_exp_of_minus_loss_and_detached():
    loss = torch.tensor([[0.0, 1.0]], requires_grad=True)
    p = token_probability(loss)
    assert not p.requires_grad
    assert p[0].tolist() == pytest.approx([1.0, 0.36787944])


def test_shape_mismatch_is_one_clear_error():
    with pytest.raises(ValueError, match=r"logits \[B, T, V\] and labels \[B, T\]"):
        per_token_loss(torch.zeros(1, 4, 3), torch.zeros(1, 5, dtype=torch.long))


@pytest.mark.parametrize("chunk_size", [1, 4, 100])
def test_chunked_loss_from_hidden_states_equals_the_loss_of_the_full_logits(logits_and_labels, chunk_size):
    _, labels = logits_and_labels
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 6, 5, generator=generator, requires_grad=True)
    head = torch.nn.Linear(5, 11, bias=False)

    full = per_token_loss(head(hidden), labels)
    (full * torch.arange(1.0, 7.0)).sum().backward()
    full_grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    chunked = chunked_token_loss(hidden, head, labels, chunk_size)
    (chunked * torch.arange(1.0, 7.0)).sum().backward()

    torch.testing.assert_close(chunked, full, atol=1e-6, rtol=0)
    torch.testing.assert_close(hidden.grad, full_grads[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(head.weight.grad, full_grads[1], atol=1e-6, rtol=0)


def test_chunked_loss_without_supervised_tokens_is_all_zero():
    hidden = torch.randn(1, 4, 5)
    labels = torch.full((1, 4), IGNORE_INDEX)
    with torch.no_grad():
        loss = chunked_token_loss(hidden, torch.nn.Linear(5, 11), labels, chunk_size=2)
    assert loss.tolist() == [[0.0] * 4]


def test_chunked_loss_refuses_a_zero_chunk():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        chunked_token_loss(torch.randn(1, 4, 5), torch.nn.Linear(5, 11), torch.zeros(1, 4, dtype=torch.long), 0)
