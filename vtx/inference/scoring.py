"""Forced decoding: the log-probability of given target sentences, token by token, in one
teacher-forced forward pass (`vtx score`, and the positional scores of `vtx translate`).

An ensemble scores by the log of the mean of its models' probabilities at each position, as
its search does. Conventions as the search's (`beam_search`): |Y| counts EOS; a finished
hypothesis ends with EOS, whose log-prob counts; one cut at the length limit has none.

Shapes: B batch, S padded source length, T padded target words, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID


def mean_log_probs(log_probs: Sequence[tf.Tensor]) -> tf.Tensor:
    """log(mean_i exp(log_probs[i])) of M tensors of one shape: an ensemble's log-probs."""
    if len(log_probs) == 1:
        return log_probs[0]
    return tf.reduce_logsumexp(tf.stack(log_probs), axis=0) - math.log(len(log_probs))


def forced_log_probs(models: Sequence, source_ids, target_ids, lengths, finished) -> tf.Tensor:
    """Each target token's log-prob under the model (or the ensemble's mean probability).

    Args:
        models: one or more vtx Transformers of one vocabulary.
        source_ids: int32 [B, S], PAD-padded.
        target_ids: int32 [B, T], each row's words (no BOS, no EOS), PAD-padded.
        lengths: int32 [B], words per row.
        finished: bool [B], the row ends with EOS (scored at position lengths[b]).

    Returns:
        float32 [B, T + 1]: log P of word t at column t, of EOS at column lengths[b] when
        finished; 0 elsewhere.
    """
    batch = tf.shape(target_ids)[0]
    target_in = tf.concat([tf.fill((batch, 1), BOS_ID), target_ids], axis=1)  # [B, T + 1]
    columns = tf.range(tf.shape(target_in)[1])[None, :]  # [1, T + 1]
    words = columns < lengths[:, None]
    ends = (columns == lengths[:, None]) & finished[:, None]
    target_out = tf.where(words, tf.concat([target_ids, tf.fill((batch, 1), PAD_ID)], 1),
                          tf.where(ends, EOS_ID, PAD_ID))  # [B, T + 1]
    per_model = []
    for model in models:
        logits = tf.cast(model((source_ids, target_in), training=False), tf.float32)
        per_model.append(tf.nn.log_softmax(logits, axis=-1))  # [B, T + 1, V]
    log_probs = mean_log_probs(per_model)
    chosen = tf.gather(log_probs, target_out, batch_dims=2)  # [B, T + 1]
    return tf.where(words | ends, chosen, 0.0)


def make_scorer(models: Sequence, jit_compile: bool = False) -> Callable[..., tf.Tensor]:
    """`forced_log_probs` of `models`, traced once for any shape; with `jit_compile` XLA
    compiles that graph once per concrete shape."""
    spec = lambda shape, dtype: tf.TensorSpec(shape, dtype)
    return tf.function(lambda source, target, lengths, finished: forced_log_probs(
        models, source, target, lengths, finished), input_signature=[
            spec([None, None], tf.int32), spec([None, None], tf.int32), spec([None], tf.int32),
            spec([None], tf.bool)], jit_compile=jit_compile or None, autograph=False)


# Bytes of float32 [rows, T + 1, V] scores one forced pass may hold (its logits, their
# log-softmax and, for an ensemble, each model's): passes over more rows are cut in chunks.
FORCED_BYTES = 1 << 28


def forced_in_chunks(scorer: Callable[..., tf.Tensor], models: int, vocab_size: int,
                     source_ids: np.ndarray, target_ids: np.ndarray, lengths: np.ndarray,
                     finished: np.ndarray) -> np.ndarray:
    """`make_scorer`'s log-probs of N rows, computed a few rows at a time so that the scores
    over the vocabulary stay within FORCED_BYTES: a power of two of them, so that N rows of a
    power of two (XLA's few shapes) are cut into parts of one shape.

    Args:
        scorer: from `make_scorer` of `models` models of `vocab_size` tokens.
        source_ids: int32 [N, S]; target_ids int32 [N, T]; lengths int32 [N]; finished bool [N].

    Returns:
        float32 [N, T + 1] (`forced_log_probs`).
    """
    rows, width = target_ids.shape
    per_row = 4 * vocab_size * (width + 1) * (2 + models)
    step = 1 << (max(1, FORCED_BYTES // per_row).bit_length() - 1)
    parts = [scorer(source_ids[start:start + step], target_ids[start:start + step],
                    lengths[start:start + step], finished[start:start + step]).numpy()
             for start in range(0, rows, step)]
    return np.concatenate(parts) if parts else np.zeros((0, width + 1), np.float32)
