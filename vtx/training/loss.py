"""Label-smoothed cross entropy (paper section 5.4), summed over non-pad tokens.

Shapes: B batch, T target length, V vocabulary.
"""

from keras import ops

from vtx.config import PAD_ID


def label_smoothed_loss(logits, labels, epsilon: float, pad_id: int = PAD_ID):
    """Sums of the smoothed loss and of the plain NLL over non-pad positions, and their count.

    The target distribution puts 1 - epsilon on the label and epsilon / V on every token
    (the label included), so loss = (1 - epsilon) * nll + epsilon * mean_v(-log p_v).
    Sums, not means, so the caller can normalise by the token count over all replicas and
    accumulated micro-batches.

    Args:
        logits: [B, T, V] float32.
        labels: [B, T] int ids; `pad_id` positions contribute nothing.
        epsilon: label smoothing epsilon_ls.

    Returns:
        (loss_sum, nll_sum, num_tokens) as float32 scalars.
    """
    logits = ops.cast(logits, "float32")
    log_normalizer = ops.logsumexp(logits, axis=-1)  # [B, T]
    label_logits = ops.take_along_axis(logits, ops.cast(labels, "int32")[..., None], axis=-1)[..., 0]
    nll = log_normalizer - label_logits  # [B, T]
    mean_neg_log_prob = log_normalizer - ops.mean(logits, axis=-1)  # mean_v(-log p_v), [B, T]
    loss = (1.0 - epsilon) * nll + epsilon * mean_neg_log_prob
    weights = ops.cast(labels != pad_id, "float32")
    return ops.sum(loss * weights), ops.sum(nll * weights), ops.sum(weights)
