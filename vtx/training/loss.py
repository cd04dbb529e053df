"""Label-smoothed cross entropy (paper section 5.4), summed over non-pad tokens.

Shapes: B batch, T target length, N positions (B * T, or only the real ones), V vocabulary.

The [N, V] logits are the largest tensor of a training step (vocabulary 8000 at 2048 tokens:
16M floats), and element-wise passes over them are what the loss costs. Automatic
differentiation of logsumexp, the label's logit and the mean makes about a dozen such passes (and
scatters the label's gradient into a zero [N, V] tensor); the gradient written out by hand makes
four: softmax from the exponentials kept from the forward pass, a scale and shift, and one
scatter of the N label terms into it (what that saves an update on a CPU:
`benchmarks/train_throughput.py`, docs/benchmarks.md).
"""

import tensorflow as tf

from vtx.config import PAD_ID


def label_smoothed_loss(logits, labels, epsilon: float, pad_id: int = PAD_ID):
    """Sums of the smoothed loss and of the plain NLL over non-pad positions, and their count.

    The target distribution puts 1 - epsilon on the label and epsilon / V on every token
    (the label included), so loss = (1 - epsilon) * nll + epsilon * mean_v(-log p_v).
    Sums, not means, so the caller can normalise by the token count over all replicas and
    accumulated micro-batches.

    Args:
        logits: [..., V] (any leading shape, e.g. [B, T, V] or [N, V]); computed in float32.
        labels: [...] int ids, the logits' leading shape; `pad_id` positions contribute nothing
            (their gradient is zero).
        epsilon: label smoothing epsilon_ls.

    Returns:
        (loss_sum, nll_sum, num_tokens) as float32 scalars.
    """
    vocab_size = tf.shape(logits)[-1]
    logits = tf.reshape(tf.cast(logits, tf.float32), [-1, vocab_size])  # [N, V]
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])  # [N]
    loss, nll = _per_position_loss(logits, labels, epsilon)
    weights = tf.cast(labels != pad_id, tf.float32)
    return tf.reduce_sum(loss * weights), tf.reduce_sum(nll * weights), tf.reduce_sum(weights)


def _per_position_loss(logits, labels, epsilon: float):
    """[N, V] float32 logits, [N] labels -> (smoothed loss [N], nll [N]), with their gradient
    with respect to the logits written out:
        d nll / d logits = softmax - onehot(label)
        d loss / d logits = softmax - (1 - epsilon) * onehot(label) - epsilon / V."""
    positions = tf.range(tf.shape(labels)[0])
    label_index = tf.stack([positions, labels], axis=1)  # [N, 2]

    @tf.custom_gradient
    def per_position(logits):
        largest = tf.reduce_max(logits, axis=-1, keepdims=True)  # [N, 1]: exp cannot overflow
        exponentials = tf.exp(logits - largest)  # [N, V], kept for the softmax of the gradient
        normalizer = tf.reduce_sum(exponentials, axis=-1)  # [N]
        log_normalizer = largest[:, 0] + tf.math.log(normalizer)
        label_logits = tf.gather_nd(logits, label_index)
        nll = log_normalizer - label_logits
        # (1 - eps) * nll + eps * (log_normalizer - mean) = nll + eps * (label - mean)
        loss = nll + epsilon * (label_logits - tf.reduce_mean(logits, axis=-1))

        def gradient(loss_upstream, nll_upstream):  # each [N]
            both = loss_upstream + nll_upstream
            vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
            grad = (exponentials * (both / normalizer)[:, None]
                    - (epsilon / vocab_size) * loss_upstream[:, None])  # [N, V]
            return tf.tensor_scatter_nd_sub(grad, label_index,
                                            (1.0 - epsilon) * loss_upstream + nll_upstream)

        return (loss, nll), gradient

    return per_position(logits)
