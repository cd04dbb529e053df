"""Word alignments from attention: for each target token, the source token that one decoder
layer's cross-attention, averaged over its heads, weighs most (fairseq's --print-alignment).

The weights come from a teacher-forced pass of the hypotheses after the search (as their
positional scores, `scoring`): the search itself computes nothing more. Indices are of
SentencePiece pieces, both sides from 0; a target token's row is the attention of the position
that predicted it. Written `i-j` (source i, target j), space-separated, as fairseq and
fast_align.

Shapes: B batch, S padded source length, T target words (EOS not aligned), H heads.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf
from keras import ops

from vtx.config import BOS_ID
from vtx.layers.decoder import causal_mask


def cross_attention(model, source_ids, target_ids, layer: int) -> tf.Tensor:
    """float32 [B, T + 1, S]: decoder layer `layer`'s cross-attention weights, the mean over its
    heads, at every position of BOS + target_ids [B, T] over source_ids [B, S] (0 on padding).

    Args:
        layer: a decoder layer's index (negative: from the last, -1 the last).
    """
    memory, memory_mask = model.encode(source_ids)  # [B, S, D], bool [B, 1, S]
    batch = tf.shape(target_ids)[0]
    target_in = tf.concat([tf.fill((batch, 1), BOS_ID), target_ids], axis=1)  # [B, T + 1]
    x = model._embed(target_in)  # the decoder's input, as `Transformer.decode` makes it
    layers = model.decoder_layers
    chosen = layers[layer]
    for below in layers[:layer % len(layers)]:
        x = below(x, memory, memory_mask)
    # The chosen layer's first sub-layer, as `DecoderLayer.call` (no dropout: inference).
    attended = chosen.self_attention(x, x, causal_mask(ops.shape(x)[1]))
    x = chosen.attention_norm(x + attended)
    cross = chosen.cross_attention
    query = cross.project_query(x)  # [B, H, T + 1, K], scaled
    keys, _ = cross.project_key_value(memory)  # [B, H, S, K]
    scores = tf.cast(tf.einsum("bhtk,bhsk->bhts", query, keys), tf.float32)
    scores = tf.where(memory_mask[:, None, :, :], scores, float("-inf"))
    return tf.reduce_mean(tf.nn.softmax(scores, axis=-1), axis=1)


def make_aligner(model, layer: int) -> Callable[..., tf.Tensor]:
    """`cross_attention` of `model` at `layer`, traced once for any shape."""
    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.function(lambda source, target: cross_attention(model, source, target, layer),
                       input_signature=[spec, spec], autograph=False)


def hard_alignment(weights: np.ndarray, target_length: int) -> str:
    """`i-j` pairs of each of the first `target_length` target tokens (rows of weights
    [T + 1, S]) with its most attended source token."""
    best = np.argmax(weights[:target_length], axis=-1)
    return " ".join(f"{i}-{j}" for j, i in enumerate(best.tolist()))
