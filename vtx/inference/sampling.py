"""Sampling search: each hypothesis draws its tokens from the model's distribution, reshaped by
a temperature, top-k and top-p (nucleus) truncation (fairseq's `--sampling` and its flags).

The model is reached as in `beam_search`, through tokens_to_logits(token_ids [N], state) ->
(logits [N, V], new state). Each sentence's state is repeated R times, one row per sample, and
each row runs on its own as a greedy search does (the same length limit, EOS and banned-token
rules, `beam_search.run_sequences`), drawing instead of taking the argmax.

Reproducibility: the draw of a row at a step uses one uniform number from a counter-based hash
of (seed, line id, sample, step), computed in the graph with 32-bit integer operations. So a
line's samples depend only on the seed, its line id and the line itself: not on the batch it
shares, the rows dropped as other sentences end, the padded shape, or XLA (up to the floating
point of the model's logits). A token is drawn by inverting the cumulative distribution of the
kept tokens at that number.

A hypothesis scores log P(Y | X) / lp(|Y|) with P the model's own distribution (temperature 1,
no truncation): the scores of samples and of beam search hypotheses compare. The R samples of a
sentence are returned best first.

Shapes: B batch, R samples per sentence, N = B * R rows, V vocabulary, L = max_length, C the
tokens a row may draw from (top-k's k, else V).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID
from vtx.inference.beam_search import (SearchOutput, TokensToLogits, append_token,
                                       check_max_lengths, expand_to_beams, finalize, make_search,
                                       run_sequences, sequence_scores, start_sequences)
from vtx.inference.decoding import SamplingOptions

_NEG_INF = float("-inf")
_GOLDEN = 0x9E3779B9  # separates the hash's inputs (the 32-bit golden ratio, as splitmix)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """A 32-bit integer hash (the "lowbias32" finalizer): uint32 -> uint32 of any shape, every
    output bit depending on every input bit."""
    shift = lambda x, bits: tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(
        x, tf.constant(bits, tf.uint32)))
    x = shift(x, 16) * tf.constant(0x7FEB352D, tf.uint32)
    x = shift(x, 15) * tf.constant(0x846CA68B, tf.uint32)
    return shift(x, 16)


def _combine(key: tf.Tensor, value) -> tf.Tensor:
    """uint32 key [..] folded with int `value` (of key's shape or a scalar)."""
    value = tf.cast(tf.cast(value, tf.int64) % (1 << 32), tf.uint32)
    return _mix(tf.bitwise.bitwise_xor(key, value + tf.constant(_GOLDEN, tf.uint32)))


class Draw(NamedTuple):
    """How each token is drawn: `SamplingOptions`'s fields as a search takes them, scalar
    tensors fed at each call of a compiled search (`model_search.make_search_fn`), so that no
    setting needs a trace of its own. `sampling_search` takes a `SamplingOptions` alike."""

    seed: Any  # int64 [] (or any int): taken modulo 2^32
    temperature: Any  # float64 [] (or a float), > 0
    topk: Any  # int32 [] (or an int): draw from the k most probable tokens only; 0: from all
    topp: Any  # float32 [] (or a float) in (0, 1]: from the fewest of mass >= p; 1: from all

    @classmethod
    def of(cls, options: SamplingOptions) -> "Draw":
        """The settings of `options` as the tensors `DRAW_SPECS` describes."""
        return cls(*(tf.constant(value, spec.dtype) for value, spec in zip(
            (options.seed % (1 << 32), options.temperature, options.topk, options.topp),
            DRAW_SPECS)))


# The dtypes of a `Draw`'s tensors: those in which the search computes with each value.
DRAW_SPECS = Draw(*(tf.TensorSpec([], dtype)
                    for dtype in (tf.int64, tf.float64, tf.int32, tf.float32)))


def row_keys(seed, line_ids, samples) -> tf.Tensor:
    """uint32 [B * R]: the key of sample r of line line_ids[b] at row b * R + r.

    Args:
        seed: the user's seed: any int, or an int64 scalar tensor (taken modulo 2^32).
        line_ids: int [B], each sentence's line id (its index in the input).
        samples: R (an int, or an int32 scalar tensor). Sample r's key does not depend on R.
    """
    if isinstance(seed, (int, np.integer)):
        seed = int(seed) % (1 << 32)  # a Python int may exceed int64
    # int64 -> uint32 keeps the low 32 bits: the seed modulo 2^32, negative ones included.
    seed_key = _mix(tf.cast(tf.cast(seed, tf.int64), tf.uint32))
    sentences = tf.shape(line_ids)[:1]  # [1]: B
    line_ids = tf.repeat(tf.cast(line_ids, tf.int64), samples)  # [N]
    sample = tf.tile(tf.range(samples, dtype=tf.int64), sentences)  # [N]
    key = _combine(tf.fill(tf.shape(line_ids), seed_key), line_ids)
    return _combine(key, sample)


def uniform(keys: tf.Tensor, step) -> tf.Tensor:
    """float32 [N] in [0, 1): one number per row key uint32 [N] at decoder step `step`."""
    bits = _combine(keys, step)
    # The top 24 bits: every float32 of the form m / 2^24 is exact, so 1 is never reached.
    return tf.cast(tf.bitwise.right_shift(bits, tf.constant(8, tf.uint32)), tf.float32) * 2.0**-24


def scale_by_temperature(logits: tf.Tensor, temperature) -> tf.Tensor:
    """float32 [N, V]: `logits` [N, V] / `temperature` (a float, or a float64 scalar tensor),
    shifted so that each row's best is 0.

    Safe at every finite temperature > 0, where a plain division is not: float32 holds neither
    the smallest (it rounds them to 0: 0 / 0) nor the largest (inf: -inf / inf), and a small
    one overflows the logits (inf - inf in the softmax). So each row is shifted by its maximum
    first (the best logit becomes 0, the others <= 0, none overflows) and divided in float64,
    which holds every temperature a Python float does. The best stay 0 and -inf stays -inf
    whatever the divisor: TensorFlow flushes subnormals to 0, the divisor or, in a graph, its
    reciprocal (0 / 0, -inf * 0). Gaps too wide for float32 become -inf: tokens of mass 0, as
    they are at that temperature.
    """
    shifted = logits - tf.reduce_max(logits, axis=-1, keepdims=True)  # [N, V], <= 0
    scaled = tf.cast(tf.cast(shifted, tf.float64) / temperature, tf.float32)  # [N, V]
    return tf.where((shifted == 0) | tf.math.is_inf(shifted), shifted, scaled)


def kept_logits(logits: tf.Tensor, options: SamplingOptions | Draw
                ) -> tuple[tf.Tensor, tf.Tensor]:
    """The tokens a row may draw from and their temperature-scaled logits.

    Args:
        logits: float32 [N, V], -inf at the tokens never generated.
        options: temperature, top-k (0: all), top-p (1: all): Python values (a `SamplingOptions`)
            or scalar tensors (a `Draw`), for which the graph makes each choice below.

    Returns:
        (logits float32 [N, C], -inf at those top-p leaves out; their token ids int32 [N, C]).
        With top-k or top-p the C tokens are in descending order, else in vocabulary order.
    """
    scaled = scale_by_temperature(logits, options.temperature)
    vocab = logits.shape[-1] if logits.shape[-1] is not None else tf.shape(logits)[-1]
    topk, topp = options.topk, options.topp

    def truncated():
        # top-k's k, else a full sort (for top-p's cumulative mass).
        if isinstance(topk, int) and isinstance(vocab, int):
            count = min(topk, vocab) if topk else vocab
        else:
            count = tf.where(topk > 0, tf.minimum(topk, vocab), vocab)
        values, ids = tf.math.top_k(scaled, k=count)
        # Keep the smallest set of best tokens whose mass reaches p: those whose mass before
        # them is below p (the best one always); at p = 1 every one, whatever the rounding.
        before = tf.math.cumsum(tf.nn.softmax(values, axis=-1), axis=-1, exclusive=True)
        return tf.where((before < topp) | (topp >= 1.0), values, _NEG_INF), ids

    def whole():
        return scaled, tf.broadcast_to(tf.range(vocab, dtype=tf.int32)[None, :], tf.shape(scaled))

    return _choose((topk > 0) | (topp < 1.0), truncated, whole)


def _choose(condition, if_true: Callable[[], Any], if_false: Callable[[], Any]):
    """`if_true()` or `if_false()`: chosen in Python when `condition` is known now (Python
    values: the graph holds the one branch, whose shapes XLA needs static), else in the graph."""
    known = tf.get_static_value(condition)
    if known is not None:
        return if_true() if known else if_false()
    return tf.cond(condition, if_true, if_false)


def draw(values: tf.Tensor, ids: tf.Tensor, numbers: tf.Tensor) -> tf.Tensor:
    """int32 [N]: the token of each row at uniform `numbers` [N] by inverse transform sampling
    over the distribution softmax(values) [N, C] of token `ids` [N, C]."""
    probs = tf.nn.softmax(values, axis=-1)
    cumulative = tf.math.cumsum(probs, axis=-1)
    target = numbers[:, None] * cumulative[:, -1:]  # [N, 1]
    position = tf.reduce_sum(tf.cast(cumulative <= target, tf.int32), axis=-1)
    # Rounding may put the target past the last token of mass: the last such token then.
    columns = tf.range(tf.shape(probs)[-1])[None, :]  # [1, C]
    last = tf.reduce_max(tf.where(probs > 0, columns, 0), axis=-1)
    return tf.gather(ids, tf.minimum(position, last), batch_dims=1)


class SampleState(NamedTuple):
    """Loop state of the sampling search: `beam_search.GreedyState`'s fields, one row a
    sample, and the rows' keys."""

    step: tf.Tensor  # int32 []: decoder steps run
    seqs: tf.Tensor  # int32 [N, L + 1]: BOS, the drawn tokens, EOS, then PAD
    logprobs: tf.Tensor  # float32 [N]: the model's log P of the sequence so far
    finished: tf.Tensor  # bool [N]: the sequence ended with EOS
    done: tf.Tensor  # bool [N]: finished, or at its length limit
    cache: Any  # the decoder state, n leading rows
    sentences: tf.Tensor  # int32 [n]: the rows `cache` holds (see BeamState)
    keys: tf.Tensor  # uint32 [N]: each row's key (`row_keys`)


def _sample_step(options: SamplingOptions | Draw):
    """The step of `run_sequences` that draws each row's next token."""

    def step(search, max_lengths, state: SampleState) -> SampleState:
        logits, cache = search.tokens_to_logits(state.seqs[:, state.step], state.cache)
        logits = tf.cast(logits, tf.float32)
        vocab = tf.range(tf.shape(logits)[-1])
        banned = tf.reduce_any(vocab[:, None] == tf.constant(search.banned_ids), axis=-1)
        values, ids = kept_logits(tf.where(banned[None, :], _NEG_INF, logits), options)
        token_ids = draw(values, ids, uniform(state.keys, state.step))
        # The model's log-prob, normalised over every token as the beam search's.
        log_probs = (tf.gather(logits, token_ids, batch_dims=1)
                     - tf.reduce_logsumexp(logits, axis=-1))
        return append_token(search, max_lengths, state, token_ids, log_probs, cache)

    return step


def sampling_search(tokens_to_logits: TokensToLogits, initial_state, batch_size: int,
                    line_ids, options: SamplingOptions | Draw, nbest=1, max_length: int = 50,
                    max_lengths=None, alpha: float = 0.6, length_penalty: str = "gnmt",
                    eos_id: int = EOS_ID, bos_id: int = BOS_ID,
                    growing: tuple[str, ...] = (), drop_done: bool = False) -> SearchOutput:
    """Draw `nbest` hypotheses per sentence (module docstring); graph code, as `beam_search`.

    Args:
        tokens_to_logits: (token_ids int32 [N], state) -> (logits [N, V], new state).
        initial_state: the decoder state of the B sentences (rank >= 1 tensors lead with B),
            repeated R times; room for `max_length` positions, or `growing`.
        batch_size: B.
        line_ids: int [B], each sentence's line id: its samples depend on it and `options.seed`.
        options: temperature, top-k, top-p, seed: Python values or scalar tensors (`Draw`).
        nbest: R samples per sentence: an int, or an int32 scalar tensor (not under XLA,
            whose shapes are static). Sample r of a line is the same whatever R.
        max_length, max_lengths, alpha, length_penalty, eos_id, bos_id, growing, drop_done: as
            `beam_search`'s.

    Returns:
        `SearchOutput` with R hypotheses per sentence, best first.
    """
    rows = make_search(tokens_to_logits, batch_size * nbest, 1, max_length, alpha,
                       length_penalty, eos_id, bos_id, 1, "never")
    max_lengths = check_max_lengths(max_lengths, batch_size, rows.max_length)
    row_limits = tf.repeat(max_lengths, nbest)  # [N]
    start = start_sequences(rows, expand_to_beams(initial_state, nbest), row_limits)
    state = SampleState(**start._asdict(), keys=row_keys(options.seed, line_ids, nbest))
    state = run_sequences(rows, state, row_limits, _sample_step(options), growing, drop_done)
    scores = tf.reshape(sequence_scores(rows, state), (-1, nbest))  # [B, R]
    scores, order = tf.math.top_k(scores, k=nbest)  # best first
    seqs = tf.gather(tf.reshape(state.seqs, (-1, nbest, rows.max_length + 1)), order,
                     batch_dims=1)
    finished = tf.gather(tf.reshape(state.finished, (-1, nbest)), order, batch_dims=1)
    return finalize(rows, seqs, scores, finished, state.step)
