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


def reference_loss(logits, labels, epsilon):
    """The loss as a formula, differentiated by TensorFlow (what the hand-written gradient of
    `label_smoothed_loss` must equal)."""
    import tensorflow as tf

    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, labels, batch_dims=labels.ndim)
    loss = (1 - epsilon) * nll - epsilon * tf.reduce_mean(log_probs, axis=-1)
    weights = tf.cast(labels != 0, tf.float32)
    return tf.reduce_sum(loss * weights), tf.reduce_sum(nll * weights)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_gradient_equals_automatic_differentiation_of_the_formula(epsilon):
    import tensorflow as tf

    rng = np.random.default_rng(3)
    logits = tf.constant(rng.normal(size=(3, 5, 11)) * 4, tf.float32)
    labels = np.array([[4, 5, 10, 0, 0], [6, 7, 8, 9, 1], [3, 0, 0, 0, 0]])
    # Both sums reach the result with their own weight, as in training (loss) and logging (nll).
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, nll, _ = label_smoothed_loss(logits, labels, epsilon)
        expected_loss, expected_nll = reference_loss(logits, labels, epsilon)
        total, expected_total = 0.7 * loss + 0.2 * nll, 0.7 * expected_loss + 0.2 * expected_nll
    grad, expected = tape.gradient(total, logits).numpy(), tape.gradient(expected_total, logits).numpy()
    # Two float32 formulas of the same sums: ~10 ulps apart at most, on any CPU's exp and log.
    assert float(loss) == pytest.approx(float(expected_loss), rel=1e-5)
    assert float(nll) == pytest.approx(float(expected_nll), rel=1e-5)
    np.testing.assert_allclose(grad, expected, rtol=0, atol=1e-6)
    assert not grad[labels == 0].any()  # pad positions: exactly zero


def test_large_logits_do_not_overflow():
    logits = np.array([[[1000.0, 990.0, -1000.0]]], np.float32)
    loss, nll, _ = label_smoothed_loss(logits, np.array([[1]]), epsilon=0.0)
    assert float(nll) == pytest.approx(10.0, rel=1e-5) and float(loss) == float(nll)
