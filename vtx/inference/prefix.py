"""Prefix-constrained decoding: every hypothesis of a sentence starts with that sentence's given
target prefix, then the search (beam or sampling) goes on from it (fairseq's --prefix-size,
CTranslate2's target_prefix).

A wrapper of the search's tokens_to_logits, as `tree_constraint.constrained`: the search is not
changed. While a row is inside its prefix, the wrapper hands the search logits under which the
prefix's token is the only one that may come, with the model's own log-probability: that token
gets log p, PAD (never generated) the rest of the mass, log(1 - p), and every other token -inf.
The search's normalisation then gives the prefix token log p, so a prefixed hypothesis scores
the model's log P of all its tokens, prefix included, as `vtx score` would.

The prefix travels in the decoder state (a dict), so that the search repeats, reorders and
drops its rows with the rest: `prefix` int32 [B, P] (PAD-padded), `prefix_lengths` int32 [B],
and `prefix_step` int32 [] (shared: the position the next call decodes).

Shapes: B batch (or its hypotheses' rows), P the longest prefix, V vocabulary.
"""

from __future__ import annotations

import tensorflow as tf

from vtx.config import PAD_ID
from vtx.inference.beam_search import TokensToLogits

PREFIX_STATE = ("prefix", "prefix_lengths", "prefix_step")
_NEG_INF = float("-inf")


def initial_state(state: dict, prefix_ids, prefix_lengths) -> dict:
    """The decoder's dict `state` with the prefixes of its B sentences.

    Args:
        prefix_ids: int32 [B, P], each sentence's prefix tokens, PAD-padded (P >= 1).
        prefix_lengths: int32 [B], tokens per prefix (0: none).
    """
    return {**state, "prefix": tf.cast(prefix_ids, tf.int32),
            "prefix_lengths": tf.cast(prefix_lengths, tf.int32),
            "prefix_step": tf.constant(0, tf.int32)}


def forced_logits(logits, tokens) -> tf.Tensor:
    """float32 [N, V] under which token ids `tokens` [N] are the only ones that may come, with
    their log-probability under `logits` [N, V]; PAD holds the rest of the mass (module
    docstring)."""
    logits = tf.cast(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    chosen = tf.gather(log_probs, tokens, batch_dims=1)[:, None]  # [N, 1]
    rest = tf.math.log(-tf.math.expm1(tf.minimum(chosen, 0.0)))  # log(1 - p)
    vocab = tf.range(tf.shape(logits)[-1])[None, :]  # [1, V]
    return tf.where(vocab == tokens[:, None], chosen,
                    tf.where(vocab == PAD_ID, rest, _NEG_INF))


def constrained(tokens_to_logits: TokensToLogits) -> TokensToLogits:
    """`tokens_to_logits` of a dict state that also holds PREFIX_STATE (`initial_state`),
    forcing each row's prefix."""

    def step(token_ids, state):
        inner = {key: value for key, value in state.items() if key not in PREFIX_STATE}
        logits, inner = tokens_to_logits(token_ids, inner)
        position = state["prefix_step"]
        prefix = state["prefix"]
        column = tf.minimum(position, tf.shape(prefix)[1] - 1)
        tokens = tf.gather(prefix, column, axis=1)  # [N]
        inside = position < state["prefix_lengths"]  # [N]
        logits = tf.cast(logits, tf.float32)
        # Past every row's prefix (most of the steps), the model's logits as they are.
        logits = tf.cond(tf.reduce_any(inside), lambda: tf.where(
            inside[:, None], forced_logits(logits, tokens), logits), lambda: logits)
        return logits, {**inner, "prefix": prefix, "prefix_lengths": state["prefix_lengths"],
                        "prefix_step": position + 1}

    return step
