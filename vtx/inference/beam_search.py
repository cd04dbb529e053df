"""Beam search and greedy search over any autoregressive decoder (paper section 6.1).

The search knows the model only through one function,
    tokens_to_logits(token_ids [N], state) -> (logits [N, V], new state),   N = B * K,
where every tensor of `state` of rank >= 1 has N as its leading axis (the rank-0 ones, such as a
shared position index, are left alone). The search repeats each sentence's initial state K times,
and after each step reorders the state by beam index (a gather on axis 0), so past positions are
never recomputed. Rows are sentence-major (row b * K + k is beam k of sentence b). Beam-invariant
entries of a dict state (`beam_invariant`, e.g. the encoder output that every beam of a sentence
reads) keep their B rows: they are neither repeated nor reordered, and the decoder reads row b for
rows b * K ... b * K + K - 1. Growing entries of a dict state (`growing`, e.g. a self-attention
cache that gains one position a step instead of being allocated for L positions up front) may
change shape (not rows) from one step to the next. With `drop_done`, the rows of a sentence whose
search is over leave the decoder's state (fairseq and CTranslate2 do the same): later steps run
the decoder on the sentences still searching only, so a batch costs what its sentences need, not
its longest one times its size. Everything is TensorFlow graph code: call it inside one
`tf.function` (with `jit_compile=True` for XLA, which needs fixed shapes: no growing state, no
`drop_done`) so that it is traced once per padded shape.

Shapes: B batch (sentences), K beam size, V vocabulary, L = max_length (tokens a hypothesis may
hold), C = 2K candidates per sentence and step, R nbest.

Definitions used throughout:
  * A hypothesis Y is the tokens generated after BOS. A *finished* one ends with EOS. |Y| counts
    every generated token, EOS included (the convention of fairseq and of flax's decoder), so an
    empty translation has |Y| = 1.
  * `max_length` L bounds |Y|: a finished hypothesis holds at most L - 1 words + EOS; a hypothesis
    still live after L steps holds L words and no EOS.
  * score(Y) = log P(Y | X) / lp(|Y|), with lp the GNMT length penalty ((5 + |Y|) / 6)^alpha
    (Wu et al. 2016, eq. 14, the paper's choice) or fairseq's |Y|^alpha.
  * When a sentence's search stops (`stop`, one of STOP_RULES):
    - "exact": when no live hypothesis can beat its R-th best finished one. Log probabilities
      only fall as a hypothesis grows and lp only grows with |Y| (alpha >= 0), so a live
      hypothesis with log-prob s can at best score s / lp(L) (the argument of flax's decoder).
      Because the bound is strict, stopping early returns exactly what running to L steps
      returns; but with a distant L the live hypotheses can run on for many steps.
    - "fairseq": once K hypotheses have finished (fairseq's rule, Hugging Face's
      `early_stopping=True`); a later, longer hypothesis that would have scored better is not
      looked for. CTranslate2 does the same when alpha > 0 (with alpha = 0 it stops once the
      best candidate ends).
    - "never": at the length limit only.
  * If a sentence has fewer than R finished hypotheses after L steps, its best live ones fill the
    remaining slots, scored log P / lp(L) and marked `finished = False`.
  * Each step takes the 2K best one-token extensions (so K live ones remain however many end in
    EOS); one ending in EOS is finished only if it ranks among the K best of them (fairseq's rule;
    flax finishes any of the 2K). So a beam of 1 takes the greedy path, and equals greedy search
    when alpha = 0; with alpha > 0 its length-penalised bound may keep it going after greedy's EOS.
  * PAD and BOS are never generated (their log-probs are masked after the softmax, as fairseq does).
  * A token whose logit is -inf (one a constraint forbids) gets log-prob -inf: it only fills a
    slot no other candidate took, whose score stays -inf (an empty slot), and never finishes a
    hypothesis. A hypothesis whose every logit is -inf (a dead end) leaves the beam; a sentence
    left with no live hypothesis is done, whatever the stop rule.
  * So a hypothesis of finite score holds neither PAD, nor BOS, nor a forbidden token. Where
    fewer than R hypotheses exist (a short limit over a tiny vocabulary, or over the few tokens a
    constraint allows), the slots past them are empty: score -inf, no words.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.inference.decoding import LENPEN_FORMULAS, STOP_RULES

TokensToLogits = Callable[[tf.Tensor, Any], tuple[tf.Tensor, Any]]

_NEG_INF = float("-inf")


class BeamState(NamedTuple):
    """Loop state of the beam search (a NamedTuple so that `tf.nest` and `tf.while_loop` take it)."""

    step: tf.Tensor  # int32 []: decoder steps run; live hypotheses hold `step` tokens after BOS
    live_seqs: tf.Tensor  # int32 [B, K, L + 1]: BOS, then the tokens of each live hypothesis
    live_logprobs: tf.Tensor  # float32 [B, K]: log P of each live hypothesis; -inf = empty slot
    finished_seqs: tf.Tensor  # int32 [B, K, L + 1]: BOS, tokens, EOS, then PAD
    finished_scores: tf.Tensor  # float32 [B, K]: log P / lp(|Y|), descending; -inf = empty slot
    done: tf.Tensor  # bool [B]: the sentence's search is over (early stop or its length limit)
    cache: Any  # the decoder state: tensors of rank >= 1 have b * K leading rows (b sentences)
    sentences: tf.Tensor  # int32 [b]: the sentences whose rows `cache` holds, in order (all B
    # unless `drop_done` removed those whose search is over)


class SearchOutput(NamedTuple):
    """What `beam_search` and `greedy_search` return (same fields whatever the options)."""

    tokens: tf.Tensor  # int32 [B, R, L]: the words of each hypothesis (no BOS, no EOS), PAD after
    lengths: tf.Tensor  # int32 [B, R]: words per hypothesis (EOS not counted)
    scores: tf.Tensor  # float32 [B, R]: log P(Y | X) / lp(|Y|), best first; -inf: an empty slot
    # (fewer than R hypotheses exist, module docstring), its tokens all PAD, its length 0, not
    # finished
    finished: tf.Tensor  # bool [B, R]: the hypothesis ended with EOS (False: cut at max_length)
    steps: tf.Tensor  # int32 []: decoder steps run for the whole batch


def length_penalty(lengths, alpha, kind: str = "gnmt") -> tf.Tensor:
    """lp(|Y|): GNMT ((5 + |Y|) / 6)^alpha, or fairseq's |Y|^alpha.

    Args:
        lengths: int or float tensor of any shape, |Y| (EOS included).
        alpha: the exponent (a float, or a float32 scalar tensor); 0 disables the penalty.
        kind: "gnmt" (the paper's) or "fairseq".

    Returns:
        float32 tensor of the shape of `lengths`.
    """
    lengths = tf.cast(lengths, tf.float32)
    if kind == "gnmt":
        return _power((5.0 + lengths) / 6.0, alpha)
    if kind == "fairseq":
        return _power(lengths, alpha)
    raise ValueError(f"unknown length_penalty {kind!r}; choose one of: {', '.join(LENPEN_FORMULAS)}")


def _power(base: tf.Tensor, alpha) -> tf.Tensor:
    """base ** alpha, float32, as a graph computes it for a constant alpha whatever alpha is.

    TensorFlow's graph optimizer (grappler's ConvertPowStage) computes `tf.pow` of a constant
    exponent 0, 0.5, 1, 2 or 3 as ones, a square root, the base, its square or its cube, which
    may differ from pow in the last bit: so does this of a tensor alpha, and a search fed alpha
    at each call scores as one traced with it (but for 0.5, where the optimizer also turns a
    division by the square root into a product with the reciprocal root: a bit at most).
    """
    if not isinstance(alpha, tf.Tensor):
        return tf.pow(base, alpha)
    power = tf.pow(base, alpha)
    for exponent, value in ((0.0, tf.ones_like(base)), (0.5, tf.sqrt(base)), (1.0, base),
                            (2.0, tf.square(base)), (3.0, base * tf.square(base))):
        power = tf.where(alpha == exponent, value, power)
    return power


def _map_beam_dependent(fn, nested, beam_invariant: tuple[str, ...]):
    """`fn` on every tensor of rank >= 1, except the `beam_invariant` entries of a dict state."""
    apply = lambda value: tf.nest.map_structure(
        lambda x: x if x.shape.rank == 0 else fn(x), value)
    if isinstance(nested, dict) and beam_invariant:
        return {key: value if key in beam_invariant else apply(value)
                for key, value in nested.items()}
    return apply(nested)


def expand_to_beams(nested, beam_size: int, beam_invariant: tuple[str, ...] = ()):
    """Repeat each sentence's rows `beam_size` times: [B, ...] -> [B * K, ...]; rank 0 and the
    `beam_invariant` entries unchanged."""
    return _map_beam_dependent(lambda x: tf.repeat(x, beam_size, axis=0), nested, beam_invariant)


def gather_rows(nested, rows: tf.Tensor, beam_invariant: tuple[str, ...] = ()):
    """Gather axis 0 of every tensor of rank >= 1 with `rows` int32 [N]; rank 0 and the
    `beam_invariant` entries unchanged."""
    return _map_beam_dependent(lambda x: tf.gather(x, rows, axis=0), nested, beam_invariant)


def _loop_shapes(loop_state, growing: tuple[str, ...], drop_done: bool = False):
    """Shape invariants of a while loop's state: each tensor keeps its shape, except the axes
    after the first of the `growing` entries of its dict `cache`, and with `drop_done` the first
    axis of `sentences` and of every cache tensor of rank >= 1 (rows leave as sentences end)."""
    shapes = tf.nest.map_structure(lambda x: x.shape, loop_state)
    if not growing and not drop_done:
        return shapes

    def cache_shape(x, grows: bool):
        if x.shape.rank == 0:
            return x.shape
        rows = None if drop_done else x.shape[0]
        return tf.TensorShape([rows] + ([None] * (x.shape.rank - 1) if grows else x.shape[1:]))

    cache = loop_state.cache
    if isinstance(cache, dict):
        cache = {key: tf.nest.map_structure(lambda x: cache_shape(x, key in growing), value)
                 for key, value in cache.items()}
    else:
        cache = tf.nest.map_structure(lambda x: cache_shape(x, False), cache)
    shapes = shapes._replace(cache=cache)
    if drop_done:
        shapes = shapes._replace(sentences=tf.TensorShape([None]))
    return shapes


def _rows(x) -> int | tf.Tensor:
    """The size of x's first axis: a Python int when static (XLA needs it), else a tensor."""
    return x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]


@dataclasses.dataclass(frozen=True)
class Search:
    """The static settings of one search, and the pieces of its loop body."""

    tokens_to_logits: TokensToLogits
    batch_size: int  # B
    beam_size: int  # K
    max_length: int  # L
    alpha: float | tf.Tensor  # or a float32 scalar tensor, fed at each call of the search
    penalty: str
    eos_id: int
    bos_id: int
    banned_ids: tuple[int, ...]  # never generated (PAD, BOS)
    nbest: int | tf.Tensor  # R, or an int32 scalar tensor (then `returned` is K)
    stop: str  # one of STOP_RULES
    beam_invariant: tuple[str, ...]  # dict-state keys kept at B rows (module docstring)

    @property
    def returned(self) -> int:
        """Hypotheses returned per sentence: R, or K when R is a tensor (a shape the graph
        must know): the first R of the K are then those a search of that R returns."""
        return self.nbest if isinstance(self.nbest, int) else self.beam_size

    def candidates(self, token_ids, cache, count: int):
        """One decoder step, and each row's `count` most probable tokens that may be generated
        (`candidate_log_probs`).

        Returns:
            (log-probs float32 [N, C] in descending order, -inf at the banned ids among them,
            their token ids int32 [N, C], the new cache), with C >= count unless V is smaller.
        """
        logits, cache = self.tokens_to_logits(token_ids, cache)
        log_probs, ids, _ = candidate_log_probs(logits, count, self.banned_ids)
        return log_probs, ids, cache

    def penalty_of(self, lengths) -> tf.Tensor:
        return length_penalty(lengths, self.alpha, self.penalty)

    def write_token(self, seqs, position, token_ids):
        """seqs [B, C, L + 1] with column `position` set to token_ids [B, C]."""
        column = tf.range(self.max_length + 1) == position  # [L + 1]
        return tf.where(column[None, None, :], token_ids[:, :, None], seqs)


def candidate_log_probs(logits, count: int, banned_ids: tuple[int, ...]):
    """Each row's `count` most probable tokens that may be generated, of logits [N, V].

    Only the [N, V] logits' top tokens and their log-sum-exp are computed (no [N, V]
    log-softmax, no [N, V] mask): the banned ids are removed from the few best instead,
    which is why `count` plus their number are taken (fewer when V is smaller).

    Returns:
        (log-probs float32 [N, C] in descending order, -inf at the banned ids among them,
        their token ids int32 [N, C], each row's log-sum-exp float32 [N, 1]: any token's
        log-prob is its logit minus it), with C >= count unless V is smaller.
    """
    logits = tf.cast(logits, tf.float32)
    taken = count + len(banned_ids)
    if logits.shape[-1] is not None:
        taken = min(taken, logits.shape[-1])
    values, ids = top_k_rows(logits, taken)
    banned = tf.reduce_any(ids[:, :, None] == tf.constant(banned_ids), axis=-1)
    # Each row's maximum as the largest of its k values, not as their first (a slice): XLA
    # replaces a top_k by its own top-k only while nothing but the k best read it, and the
    # slice would keep a full sort of every row, which slows the search under XLA.
    log_norm = _log_sum_exp(logits, tf.reduce_max(values, axis=-1, keepdims=True))
    # A -inf logit (a token a constraint forbids) stays -inf, also in a row where every
    # logit is -inf: there the difference is NaN, which would rank anywhere.
    forbidden = banned | (values == _NEG_INF)
    return tf.where(forbidden, _NEG_INF, values - log_norm), ids, log_norm


def _log_sum_exp(x, top):
    """`tf.reduce_logsumexp(x, axis=-1, keepdims=True)` of x [N, V] given each row's maximum
    `top` [N, 1] (the largest of its top-k values): the same operations but the pass over x for
    the maximum, a pass over the [N, V] logits at every step of the search. As TensorFlow's, a
    row whose maximum is not finite is shifted by 0."""
    shift = tf.where(tf.math.is_finite(top), top, tf.zeros_like(top))
    return shift + tf.math.log(tf.reduce_sum(tf.exp(x - shift), axis=-1, keepdims=True))


def top_k_rows(x, k: int):
    """`tf.math.top_k(x, k)` of x [N, V] (the same values and indices, ties to the lower
    index), faster on a CPU for a large V and a small k: the maximum of each block of C
    consecutive columns is taken, then the k best among the k blocks of largest maximum. Each
    of the k best values lies in a block whose maximum is at least as large, so these k blocks
    hold them all; they are read in column order, so ties resolve as top_k resolves them.
    """
    width = x.shape[-1]
    block = _block_size(width, k) if width is not None else None
    if block is None:
        return tf.math.top_k(x, k=k)
    blocks = tf.reshape(x, (-1, width // block, block))  # [N, V / C, C]
    _, chosen = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k=k)  # [N, k]
    chosen = tf.sort(chosen, axis=-1)  # column order
    candidates = tf.reshape(tf.gather(blocks, chosen, batch_dims=1), (-1, k * block))
    values, position = tf.math.top_k(candidates, k=k)  # [N, k]
    return values, tf.gather(chosen, position // block, batch_dims=1) * block + position % block


def _block_size(width: int, k: int) -> int | None:
    """The divisor C of `width` nearest sqrt(width) with at least 4 k blocks (None: no such C
    between 16 and 512, and a plain top_k is as fast)."""
    sizes = [c for c in range(16, 513) if width % c == 0 and width // c >= 4 * k]
    return min(sizes, key=lambda c: abs(c * c - width)) if sizes else None


def _top_candidates(search: Search, state: BeamState, log_probs, token_ids):
    """The 2K best one-token extensions of each sentence's live hypotheses.

    Two K are taken so that K live ones remain even if K of them end with EOS (flax's reasoning).
    Each row's 2K best tokens (`Search.candidates`) hold its share of them.

    Args:
        log_probs, token_ids: [B * K, n] each, the candidate tokens of each live hypothesis.

    Returns:
        logprobs float32 [B, C], parent beam int32 [B, C], sequences int32 [B, C, L + 1],
        is_eos bool [B, C].
    """
    batch, beam = _rows(state.live_logprobs), search.beam_size
    count = log_probs.shape[-1]
    totals = state.live_logprobs[:, :, None] + tf.reshape(log_probs, (batch, beam, count))
    logprobs, flat = tf.math.top_k(tf.reshape(totals, (batch, -1)), k=2 * beam)  # [B, C]
    parents = flat // count
    token_ids = tf.gather(tf.reshape(token_ids, (batch, -1)), flat, batch_dims=1)
    seqs = tf.gather(state.live_seqs, parents, batch_dims=1)  # [B, C, L + 1]
    seqs = search.write_token(seqs, state.step + 1, token_ids)
    return logprobs, parents, seqs, tf.equal(token_ids, search.eos_id)


def _keep_best(scores, seqs, k: int):
    """The k best of scores [B, M] (descending) with their seqs [B, M, L + 1]; also their indices."""
    best, index = tf.math.top_k(scores, k=k)
    return best, tf.gather(seqs, index, batch_dims=1), index


def _search_step(search: Search, max_lengths, state: BeamState) -> tuple[BeamState, tf.Tensor]:
    """Extend every live hypothesis by one token; sentences that are done stay as they are.

    The b sentences of `state` may be a subset of the batch (its `sentences`), max_lengths [b]
    theirs. Returns the new state, with `done` updated and the decoder's new cache not yet
    reordered, and the rows int32 [b, K] of that cache each new live hypothesis continues.
    """
    flat_ids = tf.reshape(tf.gather(state.live_seqs, state.step, axis=2), (-1,))  # [B * K]
    log_probs, token_ids, cache = search.candidates(flat_ids, state.cache, 2 * search.beam_size)
    logprobs, parents, seqs, is_eos = _top_candidates(search, state, log_probs, token_ids)

    live_logprobs, live_seqs, kept = _keep_best(
        tf.where(is_eos, _NEG_INF, logprobs), seqs, search.beam_size)
    # EOS ends a hypothesis only from the K best candidates (fairseq's rule): a finished one then
    # holds a place a beam of K would have given it, and a beam of 1 follows the greedy path.
    in_beam = tf.range(2 * search.beam_size)[None, :] < search.beam_size  # [1, C]
    new_scores = tf.where(is_eos & in_beam, logprobs / search.penalty_of(state.step + 1), _NEG_INF)
    finished_scores, finished_seqs, _ = _keep_best(
        tf.concat([state.finished_scores, new_scores], axis=1),
        tf.concat([state.finished_seqs, seqs], axis=1), search.beam_size)

    active = ~state.done  # [B]
    beams = tf.range(search.beam_size)[None, :]  # [1, K]: a done sentence keeps its own rows
    parent_beams = tf.where(active[:, None], tf.gather(parents, kept, batch_dims=1), beams)
    rows = tf.range(_rows(parents))[:, None] * search.beam_size + parent_beams  # [b, K]
    keep = lambda new, old: tf.where(
        tf.reshape(active, (-1,) + (1,) * (new.shape.rank - 1)), new, old)
    step = state.step + 1
    new_state = state._replace(
        step=step,
        live_seqs=keep(live_seqs, state.live_seqs),
        live_logprobs=keep(live_logprobs, state.live_logprobs),
        finished_seqs=keep(finished_seqs, state.finished_seqs),
        finished_scores=keep(finished_scores, state.finished_scores),
        cache=cache)
    return new_state._replace(
        done=state.done | _sentence_done(search, max_lengths, new_state)), rows


def _reordering_step(search: Search, max_lengths, state: BeamState) -> BeamState:
    """A step over the whole batch: every sentence keeps its rows, done or not (fixed shapes)."""
    state, rows = _search_step(search, max_lengths, state)
    return state._replace(
        cache=gather_rows(state.cache, tf.reshape(rows, (-1,)), search.beam_invariant))


def _dropping_step(search: Search, max_lengths, state: BeamState) -> BeamState:
    """A beam step over the sentences still searching (see `_step_searching`)."""
    return _step_searching(_search_step, search, max_lengths, state)


def _step_searching(advance, search: Search, max_lengths, state):
    """`advance` over the sentences still searching; the rows of those it finishes leave the
    cache.

    Every field of `state` (a BeamState or GreedyState) but `step`, `cache` and `sentences` holds
    one row per sentence of the batch: these are gathered for the sentences still searching and
    scattered back. The cache's rows are reordered (by beam) and rid of the finished sentences in
    one gather; the beam-invariant entries are gathered only on steps where a sentence finished.

    Args:
        advance: (search, max_lengths [b], state of b sentences) -> (new state, the cache rows
            int32 [b, G] each sentence's G new hypotheses continue).
    """
    sentences = state.sentences  # [b]
    per_sentence = [name for name in state._fields if name not in ("step", "cache", "sentences")]
    part, rows = advance(search, tf.gather(max_lengths, sentences), state._replace(
        **{name: tf.gather(getattr(state, name), sentences) for name in per_sentence}))
    kept = tf.cast(tf.reshape(tf.where(~part.done), (-1,)), tf.int32)  # [b'] in `sentences`
    cache = gather_rows(part.cache, tf.reshape(tf.gather(rows, kept), (-1,)),
                        search.beam_invariant)
    if search.beam_invariant:
        invariant = {key: part.cache[key] for key in search.beam_invariant}
        invariant = tf.cond(tf.size(kept) < tf.size(sentences),
                            lambda: gather_rows(invariant, kept), lambda: invariant)
        cache = {**cache, **invariant}
    put = lambda name: tf.tensor_scatter_nd_update(getattr(state, name), sentences[:, None],
                                                    getattr(part, name))
    return part._replace(cache=cache, sentences=tf.gather(sentences, kept),
                         **{name: put(name) for name in per_sentence})


def stop_rule(stop: str, at_limit, kth_finished, rth_finished, best_possible):
    """Whether a sentence's search is over: the finishing rule of `beam_search` (tensors [B])
    and of the lexically constrained search (`lexical`, one sentence's Python values).

    Args:
        stop: `search.stop`: "never" (at the limit only), "fairseq" (K finished), "exact".
        at_limit: the sentence reached its length limit, or has no live hypothesis left (none
            can finish any more).
        kth_finished, rth_finished: the score of its K-th and R-th best finished hypotheses
            (-inf where fewer finished).
        best_possible: the best a live hypothesis can still score: its log-prob over the
            penalty at the sentence's limit (the penalty only grows).
    """
    if stop == "never":
        return at_limit
    if stop == "fairseq":  # K finished: the last of the K kept finished slots is filled
        return at_limit | (kth_finished > _NEG_INF)
    # Strictly greater: a later hypothesis can then never tie, so the result equals a full run.
    return at_limit | (rth_finished > best_possible)


def _sentence_done(search: Search, max_lengths, state: BeamState):
    """bool [B]: `stop_rule` of each sentence (live and finished hypotheses kept sorted)."""
    at_limit = (state.step >= max_lengths) | (state.live_logprobs[:, 0] == _NEG_INF)
    best_possible = state.live_logprobs[:, 0] / search.penalty_of(max_lengths)
    return stop_rule(search.stop, at_limit, state.finished_scores[:, search.beam_size - 1],
                     tf.gather(state.finished_scores, search.nbest - 1, axis=1),
                     best_possible)


def _initial_beam_state(search: Search, initial_state, max_lengths) -> BeamState:
    """Only beam 0 of each sentence is live at first, so the K copies cannot all pick one token."""
    batch, beam, width = search.batch_size, search.beam_size, search.max_length + 1
    seqs = search.write_token(tf.fill((batch, beam, width), PAD_ID), 0,
                              tf.fill((batch, beam), search.bos_id))
    first_live = tf.tile(tf.constant([[0.0] + [_NEG_INF] * (beam - 1)]), (batch, 1))
    return BeamState(step=tf.constant(0, tf.int32), live_seqs=seqs, live_logprobs=first_live,
                     finished_seqs=seqs, finished_scores=tf.fill((batch, beam), _NEG_INF),
                     done=max_lengths <= 0,
                     cache=expand_to_beams(initial_state, beam, search.beam_invariant),
                     sentences=tf.range(batch))


def _best_hypotheses(search: Search, state: BeamState, max_lengths):
    """The R best of each sentence: finished ones first, then live ones if too few finished.

    Returns:
        seqs int32 [B, R, L + 1], scores float32 [B, R], finished bool [B, R].
    """
    beam, nbest = search.beam_size, search.returned
    num_finished = tf.reduce_sum(tf.cast(state.finished_scores > _NEG_INF, tf.int32), 1)  # [B]
    slots = tf.range(nbest)[None, :]  # [1, R]
    # Index into [finished (K, sorted) | live (K, sorted)]: slot j past the finished count
    # takes live hypothesis j - num_finished.
    index = tf.where(slots < num_finished[:, None], slots, beam + slots - num_finished[:, None])
    live_scores = state.live_logprobs / search.penalty_of(max_lengths)[:, None]
    scores = tf.gather(tf.concat([state.finished_scores, live_scores], 1), index, batch_dims=1)
    seqs = tf.gather(tf.concat([state.finished_seqs, state.live_seqs], 1), index, batch_dims=1)
    return seqs, scores, index < beam


def finalize(search: Search, seqs, scores, finished, steps) -> SearchOutput:
    """seqs [B, R, L + 1] (BOS, words, EOS if finished, PAD) -> SearchOutput without BOS/EOS;
    the slots of score -inf emptied (whatever filled them: a banned or forbidden token)."""
    empty = scores == _NEG_INF  # [B, R]
    words = seqs[:, :, 1:]  # [B, R, L]
    # EOS only ever ends a hypothesis.
    words = tf.where((words == search.eos_id) | empty[:, :, None], PAD_ID, words)
    lengths = tf.reduce_sum(tf.cast(words != PAD_ID, tf.int32), axis=2)  # PAD is never generated
    return SearchOutput(tokens=words, lengths=lengths, scores=scores,
                        finished=finished & ~empty, steps=steps)


def make_search(tokens_to_logits, batch_size, beam_size, max_length, alpha, penalty, eos_id,
                bos_id, nbest, stop, beam_invariant=()) -> Search:
    """Check the settings (one clear error each) and bundle them.

    batch_size and max_length may also be int32 scalar tensors: a graph traced for inputs of
    unknown shape (a SavedModel's serving signature) only knows them at run time. So may nbest
    be, and alpha a float32 scalar tensor: values fed at each call of a compiled search, which
    its caller checks (`check_alpha`, `check_nbest`).
    """
    for name, value in (("batch_size", batch_size), ("beam_size", beam_size),
                        ("max_length", max_length), ("nbest", nbest)):
        if name != "beam_size" and _is_scalar_int_tensor(value):
            continue
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not _is_scalar_int_tensor(nbest):
        check_nbest(nbest, beam_size)
    if penalty not in LENPEN_FORMULAS:
        raise ValueError(
            f"unknown length_penalty {penalty!r}; choose one of: {', '.join(LENPEN_FORMULAS)}")
    if not isinstance(alpha, tf.Tensor):
        check_alpha(alpha)
    if stop not in STOP_RULES:
        raise ValueError(f"unknown stop rule {stop!r}; choose one of: {', '.join(STOP_RULES)}")
    if eos_id in (PAD_ID, bos_id):
        raise ValueError(f"eos_id ({eos_id}) must differ from PAD_ID ({PAD_ID}) and bos_id ({bos_id})")
    size = lambda value: value if _is_scalar_int_tensor(value) else int(value)
    return Search(tokens_to_logits, size(batch_size), int(beam_size), size(max_length),
                  alpha if isinstance(alpha, tf.Tensor) else float(alpha), penalty, int(eos_id),
                  int(bos_id), (PAD_ID, int(bos_id)), size(nbest), stop, tuple(beam_invariant))


def check_alpha(alpha: float) -> None:
    """Raises ValueError unless alpha >= 0: the early-stop bound needs lp to grow with |Y|."""
    if not alpha >= 0.0:
        raise ValueError(f"alpha must be >= 0, got {alpha!r}")


def check_nbest(nbest: int, beam_size: int) -> None:
    """Raises ValueError unless 1 <= nbest <= beam_size."""
    if not isinstance(nbest, (int, np.integer)) or nbest < 1:
        raise ValueError(f"nbest must be a positive int, got {nbest!r}")
    if nbest > beam_size:
        raise ValueError(f"nbest ({nbest}) must not exceed beam_size ({beam_size})")


def _is_scalar_int_tensor(value) -> bool:
    return isinstance(value, tf.Tensor) and value.shape.rank == 0 and value.dtype == tf.int32


def check_max_lengths(max_lengths, batch_size: int, max_length: int) -> tf.Tensor:
    """int32 [B] per-sentence limits (default: all `max_length`); concrete values are checked."""
    if max_lengths is None:
        return tf.fill((batch_size,), max_length)
    max_lengths = tf.cast(max_lengths, tf.int32)
    static_batch = None if _is_scalar_int_tensor(batch_size) else batch_size
    if max_lengths.shape.rank != 1 or max_lengths.shape[0] not in (None, static_batch):
        raise ValueError(f"max_lengths must have shape [{batch_size}], got {max_lengths.shape}")
    if not tf.is_symbolic_tensor(max_lengths):
        values = max_lengths.numpy()
        if values.min() < 1 or values.max() > max_length:
            raise ValueError(f"max_lengths must lie in [1, max_length={max_length}], got {values}")
    return max_lengths


def beam_search(tokens_to_logits: TokensToLogits, initial_state, batch_size: int,
                beam_size: int = 4, max_length: int = 50, max_lengths=None, alpha: float = 0.6,
                length_penalty: str = "gnmt", eos_id: int = EOS_ID, bos_id: int = BOS_ID,
                nbest: int = 1, stop: str = "exact",
                beam_invariant: tuple[str, ...] = (),
                growing: tuple[str, ...] = (), drop_done: bool = False) -> SearchOutput:
    """Beam search with finished hypotheses kept apart and a length-penalised score (section 6.1).

    Graph code: run it inside a `tf.function` (optionally `jit_compile=True`) to trace once per
    padded shape; eagerly it works, slowly.

    Args:
        tokens_to_logits: (token_ids int32 [B * K], state) -> (logits [B * K, V], new state).
        initial_state: the decoder state of the B sentences (rank >= 1 tensors lead with B); it is
            repeated K times per sentence and must have room for `max_length` positions (or
            grow, see `growing`).
        batch_size: B.
        beam_size: K, live hypotheses kept per sentence.
        max_length: L, the largest |Y| (EOS included); fixes every shape.
        max_lengths: optional int [B], each sentence's own limit in [1, L] (the paper: source
            length + 50); default L for all.
        alpha: length-penalty exponent (paper 0.6); must be >= 0; or a float32 scalar tensor.
        length_penalty: "gnmt" ((5 + |Y|) / 6)^alpha, or "fairseq" |Y|^alpha.
        eos_id, bos_id: end and start tokens (PAD_ID and bos_id are never generated).
        nbest: R <= K hypotheses returned per sentence; or an int32 scalar tensor, the rank
            the stop rule looks at: then all K are returned, the first R those of an int R.
        stop: when a sentence's search ends before its length limit, one of STOP_RULES (module
            docstring): "exact" (the result of running to the limit, in fewer steps),
            "fairseq" (once K hypotheses have finished), "never".
        beam_invariant: keys of a dict `initial_state` whose tensors stay [B, ...] (never
            repeated nor reordered); `tokens_to_logits` must read them per sentence.
        growing: keys of a dict `initial_state` whose tensors may change shape (but not their
            rows) from step to step: a cache that grows by one position a step; not under XLA.
        drop_done: run each step's decoder on the sentences still searching only: the rows of
            a sentence whose search is over leave the state (its result is kept), so the
            state's batch size changes from step to step; not under XLA. The result is the same.

    Returns:
        `SearchOutput` with R hypotheses per sentence (K for a tensor nbest), best first.

    Raises:
        ValueError: a setting is out of range (the message names it).
    """
    search = make_search(tokens_to_logits, batch_size, beam_size, max_length, alpha,
                         length_penalty, eos_id, bos_id, nbest, stop, beam_invariant)
    max_lengths = check_max_lengths(max_lengths, search.batch_size, search.max_length)
    state = _initial_beam_state(search, initial_state, max_lengths)
    step = _dropping_step if drop_done else _reordering_step
    state = tf.while_loop(
        lambda state: ~tf.reduce_all(state.done),
        lambda state: (step(search, max_lengths, state),),
        (state,), shape_invariants=(_loop_shapes(state, growing, drop_done),),
        maximum_iterations=search.max_length)[0]
    seqs, scores, finished = _best_hypotheses(search, state, max_lengths)
    return finalize(search, seqs, scores, finished, state.step)


class GreedyState(NamedTuple):
    """Loop state of the greedy search."""

    step: tf.Tensor  # int32 []: decoder steps run
    seqs: tf.Tensor  # int32 [B, L + 1]: BOS, the argmax tokens, EOS, then PAD
    logprobs: tf.Tensor  # float32 [B]: log P of the sequence so far
    finished: tf.Tensor  # bool [B]: the sequence ended with EOS
    done: tf.Tensor  # bool [B]: finished, or at the sentence's length limit
    cache: Any  # the decoder state, b leading rows
    sentences: tf.Tensor  # int32 [b]: the sentences whose rows `cache` holds (see BeamState)


def _greedy_step(search: Search, max_lengths, state: GreedyState) -> GreedyState:
    """Append the most probable token to every sentence not done yet."""
    log_probs, candidates, cache = search.candidates(state.seqs[:, state.step], state.cache, 1)
    best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # [B]: the first allowed one
    token_ids = tf.gather(candidates, best, batch_dims=1)
    return append_token(search, max_lengths, state, token_ids, tf.reduce_max(log_probs, axis=-1),
                        cache)


def append_token(search: Search, max_lengths, state, token_ids, token_logprobs, cache):
    """`state` (a GreedyState, or a NamedTuple of its fields and more) with token_ids int32 [B]
    of log-prob token_logprobs float32 [B] appended to every sentence not done yet, and the
    decoder's new `cache`."""
    active = ~state.done
    seqs = search.write_token(state.seqs[:, None, :], state.step + 1, token_ids[:, None])[:, 0]
    logprobs = state.logprobs + token_logprobs
    finished = active & tf.equal(token_ids, search.eos_id)
    step = state.step + 1
    return state._replace(step=step, seqs=tf.where(active[:, None], seqs, state.seqs),
                          logprobs=tf.where(active, logprobs, state.logprobs),
                          finished=state.finished | finished,
                          done=state.done | finished | (step >= max_lengths), cache=cache)


def start_sequences(search: Search, initial_state, max_lengths) -> GreedyState:
    """The loop state of a search of one sequence a row (greedy, or a sample): BOS alone."""
    batch_size = search.batch_size
    seqs = tf.concat([tf.fill((batch_size, 1), search.bos_id),
                      tf.fill((batch_size, search.max_length), PAD_ID)], axis=1)
    return GreedyState(step=tf.constant(0, tf.int32), seqs=seqs, logprobs=tf.zeros((batch_size,)),
                       finished=tf.zeros((batch_size,), tf.bool), done=max_lengths <= 0,
                       cache=initial_state, sentences=tf.range(batch_size))


def run_sequences(search: Search, state, max_lengths, step, growing: tuple[str, ...] = (),
                  drop_done: bool = False):
    """Run `step` (search, max_lengths [b], state of b rows) -> state (a GreedyState, or a
    NamedTuple of its fields and more, one row a sequence) until every row is done; with
    `drop_done` each step runs on the rows not done only (`_step_searching`)."""
    if drop_done:
        advance = lambda search, max_lengths, state: (
            step(search, max_lengths, state), tf.range(tf.size(state.sentences))[:, None])
        body = lambda state: (_step_searching(advance, search, max_lengths, state),)
    else:
        body = lambda state: (step(search, max_lengths, state),)
    return tf.while_loop(lambda state: ~tf.reduce_all(state.done), body, (state,),
                         shape_invariants=(_loop_shapes(state, growing, drop_done),),
                         maximum_iterations=search.max_length)[0]


def sequence_scores(search: Search, state) -> tf.Tensor:
    """float32 [B]: log P / lp(|Y|) of each row of a `run_sequences` result."""
    # |Y| = tokens after BOS, EOS included; a sentence cut at its limit has max_lengths of them.
    generated = tf.reduce_sum(tf.cast(state.seqs[:, 1:] != PAD_ID, tf.int32), axis=1)
    return state.logprobs / search.penalty_of(generated)


def greedy_search(tokens_to_logits: TokensToLogits, initial_state, batch_size: int,
                  max_length: int = 50, max_lengths=None, alpha: float = 0.6,
                  length_penalty: str = "gnmt", eos_id: int = EOS_ID,
                  bos_id: int = BOS_ID, growing: tuple[str, ...] = (),
                  drop_done: bool = False) -> SearchOutput:
    """Take the most probable token at each step until EOS or the length limit.

    Same arguments and output as `beam_search` (R = 1); the score uses the same length penalty.
    It equals `beam_search` with beam_size 1 when alpha = 0. With alpha > 0 they may differ: after
    an EOS, a beam of 1 still follows the best non-EOS continuation while its length-penalised
    bound can beat the finished score, so it returns a score >= greedy's.
    """
    search = make_search(tokens_to_logits, batch_size, 1, max_length, alpha, length_penalty,
                         eos_id, bos_id, 1, "exact")
    max_lengths = check_max_lengths(max_lengths, search.batch_size, search.max_length)
    state = run_sequences(search, start_sequences(search, initial_state, max_lengths),
                          max_lengths, _greedy_step, growing, drop_done)
    return finalize(search, state.seqs[:, None, :], sequence_scores(search, state)[:, None],
                    state.finished[:, None], state.step)
