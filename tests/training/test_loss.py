import numpy as np
import pytest

from vtx.training.loss import label_smoothed_loss


def hand_loss(logits, label, epsilon):
    log_probs = logits - np.log(np.exp(logits).sum())
    target = np.full(len(logits), epsilon / len(logits))
    target[label] += 1 - epsilon
    return -(target * log_probs).sum(), -log_probs[label]


def test_label_smoothed_loss_equals_a_hand_computation():
    logits = np.array([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]]], np.float32)
    labels = np.array([[1, 3]])
    loss, nll, tokens = label_smoothed_loss(logits, labels, epsilon=0.1)
    expected = [hand_loss(logits[0, t], labels[0, t], 0.1) for t in range(2)]
    assert float(loss) == pytest.approx(sum(e[0] for e in expected), rel=1e-5)
    assert float(nll) == pytest.approx(sum(e[1] for e in expected), rel=1e-5)
    assert float(tokens) == 2


def test_pad_positions_contribute_nothing():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype("float32")
    labels = np.array([[4, 5, 0], [6, 0, 0]])
    loss, nll, tokens = label_smoothed_loss(logits, labels, epsilon=0.1)
    logits[0, 2] = rng.normal(size=7) * 50
    logits[1, 1:] = rng.normal(size=(2, 7)) * 50
    loss2, nll2, tokens2 = label_smoothed_loss(logits, labels, epsilon=0.1)
    assert float(tokens) == float(tokens2) == 3
    assert float(loss) == pytest.approx(float(loss2)) and float(nll) == pytest.approx(float(nll2))


def test_zero_smoothing_is_plain_cross_entropy():
    logits = np.array([[[1.0, 2.0, 3.0]]], np.float32)
    loss, nll, _ = label_smoothed_loss(logits, np.array([[2]]), epsilon=0.0)
    assert float(loss) == pytest.approx(float(nll))
