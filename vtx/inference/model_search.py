"""Bind the search of `beam_search.py` to a vtx Transformer and compile it once per padded shape;
likewise the lexically constrained search of `lexical.py`, run from the host.

Shapes: B batch, S padded source length, R nbest, L = max_length (tokens a hypothesis may hold).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from vtx.config import PAD_ID
from vtx.inference import lexical, tree_constraint
from vtx.inference import prefix as forced_prefix
from vtx.inference.beam_search import (SearchOutput, beam_search, check_alpha, check_nbest,
                                       greedy_search)
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.sampling import DRAW_SPECS, Draw, sampling_search
from vtx.inference.scoring import mean_log_probs
from vtx.models.transformer import Transformer


# The widest beams whose search keeps one self-attention cache per sentence, without and with
# XLA (see `make_search_fn`); wider beams reorder a cache per hypothesis. Set where the grouped
# cache stops decoding faster (`benchmarks/translate_speed.py` at several beams, with and
# without XLA, docs/benchmarks.md).
GROUPED_BEAM_WITHOUT_XLA, GROUPED_BEAM_WITH_XLA = 8, 32


def output_length_limits(source_ids, max_len_a: float, max_len_b: int,
                         max_positions: int) -> tuple[int, tf.Tensor]:
    """The paper's limit |Y| <= a * |X| + b (a = 1, b = 50), |X| counting non-PAD source tokens.

    Args:
        source_ids: int [B, S], PAD_ID-padded.
        max_len_a, max_len_b: a and b.
        max_positions: the model's longest sequence; no limit exceeds it.

    Returns:
        (L = the batch's limit from the padded length S: a Python int when S is static, else an
        int32 scalar tensor; int32 [B] per-sentence limits).
    """
    # No limit exceeds max_positions, nor does a (|X| >= 1): a huge a would overflow int32.
    max_len_a = min(max_len_a, max_positions)
    padded_length = source_ids.shape[1]
    if padded_length is None:  # a graph for any shape (SavedModel): the same formula in TF
        scaled = tf.cast(tf.floor(max_len_a * tf.cast(tf.shape(source_ids)[1], tf.float64)),
                         tf.int32)
        max_length = tf.maximum(1, tf.minimum(scaled + max_len_b, max_positions))
    else:
        max_length = max(1, min(int(max_len_a * padded_length) + max_len_b, max_positions))
    # In float64, as the batch's limit above, DecodeOptions.length_limit and fairseq (Python
    # floats): float32 is one off for some a (2.1 x 30 gives 62, 0.7 x 90 gives 63).
    lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.float64), axis=1)  # [B]
    limits = tf.cast(tf.floor(max_len_a * lengths), tf.int32) + max_len_b
    return max_length, tf.clip_by_value(limits, 1, max_length)


def decoder(models: Sequence[Transformer], source_ids, max_length: int | None, group: int):
    """The search's view of one model, or of an ensemble: (tokens_to_logits, initial state,
    its beam-invariant keys, its growing keys): `decoder_step` and `decoder_state`."""
    step, invariant, growing = decoder_step(models, max_length is None, group)
    return step, decoder_state(models, source_ids, max_length, group), invariant, growing


def decoder_step(models: Sequence[Transformer], grow: bool, group: int):
    """(tokens_to_logits, beam-invariant keys, growing keys) of `Transformer.decode_step` (grow:
    a cache that grows, `init_state(max_length=None)`) over the state of `decoder_state`.

    An ensemble's state holds each model's entries under the key "i/KEY" (model i, each its own
    caches, of its own size); its step gives the log of the mean of the models' probabilities
    (`scoring.mean_log_probs`), as fairseq's ensemble does.
    """
    parts = []
    for model in models:
        # Weights the step would otherwise rebuild at every position: built once, here.
        step = functools.partial(model.decode_step, grow=grow, step_weights=model.step_weights())
        invariant = model.BEAM_INVARIANT_STATE + (model.GROUPED_STATE if group > 1 else ())
        parts.append((step, invariant, model.GROWING_STATE))
    if len(parts) == 1:
        return parts[0]
    names = _ensemble_names(models)

    def step(token_ids, state):
        # Entries of no model (a search constraint's, e.g. the tree constraint's) pass through.
        log_probs = []
        new_state = {key: value for key, value in state.items()
                     if not key.startswith(tuple(names))}
        for name, (model_step, *_) in zip(names, parts):
            own = {key[len(name):]: value for key, value in state.items()
                   if key.startswith(name)}
            logits, own = model_step(token_ids, own)
            log_probs.append(tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1))
            new_state.update({name + key: value for key, value in own.items()})
        return mean_log_probs(log_probs), new_state

    named = lambda index: tuple(name + key for name, part in zip(names, parts)
                                for key in part[index])
    return step, named(1), named(2)


def decoder_state(models: Sequence[Transformer], source_ids, max_length: int | None,
                  group: int) -> dict:
    """The initial state of `decoder_step`: `Transformer.init_state(source_ids, max_length,
    group)` of each model (an ensemble's under "i/KEY")."""
    states = [model.init_state(source_ids, max_length, group=group) for model in models]
    if len(states) == 1:
        return states[0]
    return {name + key: value for name, state in zip(_ensemble_names(models), states)
            for key, value in state.items()}


def _ensemble_names(models: Sequence[Transformer]) -> list[str]:
    return [f"{i}/" for i in range(len(models))]


def make_search_fn(model: Transformer | Sequence[Transformer], beam_size: int = 4,
                   alpha: float = 0.6,
                   length_penalty: str = "gnmt", max_len_a: float = 1.0, max_len_b: int = 50,
                   nbest: int = 1, stop: str = "exact", jit_compile: bool = False,
                   tree_pieces: Sequence[str] | None = None,
                   sampling: SamplingOptions | None = None, prefix: bool = False,
                   ) -> "CompiledSearch":
    """A compiled `source_ids [B, S] -> SearchOutput` for `model` (greedy when beam_size is 1),
    or for an ensemble: a list of models of one vocabulary (`decoder`).

    The function is traced once, for any (B, S) and any alpha, nbest and sampling's settings:
    these are tensors fed at each call (`CompiledSearch`), the values given here its defaults.
    Without XLA one graph serves every batch; with XLA (`jit_compile`) that graph is compiled
    once per (B, S) shape, which is why callers pad batches to a few fixed shapes; and since
    sampling's nbest and top-k set shapes, under XLA those of `sampling` (and its top-p) stay in
    the trace. Arguments are those of `beam_search`; max_len_a and max_len_b set each
    sentence's limit |Y| <= a * |X| + b (see `output_length_limits`); `tree_pieces` (the
    vocabulary's pieces), when given, constrains the output to a well-formed tree with one word
    slot per source word (`vtx.inference.tree_constraint`). With `sampling` it draws `nbest`
    samples per sentence (`vtx.inference.sampling`) and takes (source_ids, line_ids int32 [B]):
    each sentence's line id, on which with the seed its samples depend; beam_size and stop are
    then unused. With `prefix` it takes after those (prefix_ids int32 [B, P], PAD-padded,
    prefix_lengths int32 [B]): every hypothesis starts with its sentence's prefix
    (`vtx.inference.prefix`).

    Raises:
        ValueError: a negative max_len_a or max_len_b, nbest > 1 with beam_size 1, or a setting `beam_search` rejects (when traced).
    """
    models, max_positions = _models(model, max_len_a, max_len_b)
    if beam_size == 1 and nbest != 1 and sampling is None:
        raise ValueError(f"nbest ({nbest}) needs beam_size > 1 (greedy keeps one hypothesis)")
    # The values of `sampling` that stay in the trace (under XLA), else None.
    fixed = sampling if sampling is not None and jit_compile else None
    fixed_nbest = nbest

    def search(source_ids, line_ids=None, prefix_ids=None, prefix_lengths=None, *, alpha,
               nbest, draw=None):
        source_ids = tf.cast(source_ids, tf.int32)
        batch_size = source_ids.shape[0]
        if batch_size is None:  # traced for any batch size: known when the graph runs
            batch_size = tf.shape(source_ids)[0]
        max_length, max_lengths = output_length_limits(source_ids, max_len_a, max_len_b,
                                                       max_positions)
        # Without XLA the self-attention cache grows a position a step: each step copies and
        # attends over the positions decoded so far, not over all max_length of them; and the
        # beam search drops the sentences it has finished from the decoder's batch.
        grow = not jit_compile
        # A beam search keeps the self-attention cache once per sentence, each hypothesis
        # reading the slots its own prefix wrote, and reorders which slots those are
        # (`Transformer.init_state(group=...)`), not the cache. Each hypothesis then scores
        # beam_size times the slots, so the saving of the reorder shrinks as the beam widens:
        # under XLA, whose cache holds all max_length positions from the start, it pays up to
        # a wide beam; without XLA, whose cache grows, up to a narrow one (the two constants).
        widest = GROUPED_BEAM_WITHOUT_XLA if grow else GROUPED_BEAM_WITH_XLA
        grouped = 1 < beam_size <= widest and sampling is None
        step, state, invariant, growing = decoder(models, source_ids,
                                                  None if grow else max_length,
                                                  beam_size if grouped else 1)
        if tree_pieces is not None:
            step = tree_constraint.constrained(step, tree_pieces)
            state = tree_constraint.initial_state(source_ids, state, tree_pieces)
        if prefix:
            step = forced_prefix.constrained(step)
            state = forced_prefix.initial_state(state, prefix_ids, prefix_lengths)
        common = dict(max_length=max_length, max_lengths=max_lengths, alpha=alpha,
                      length_penalty=length_penalty,
                      growing=growing if grow else (), drop_done=grow)
        if fixed is not None:
            nbest, draw = fixed_nbest, draw._replace(topk=fixed.topk, topp=fixed.topp)
        if sampling is not None:
            return sampling_search(step, state, batch_size, line_ids, draw, nbest, **common)
        if beam_size == 1:
            return greedy_search(step, state, batch_size, **common)
        return beam_search(step, state, batch_size, beam_size=beam_size,
                           nbest=nbest, stop=stop,
                           beam_invariant=invariant, **common)

    traced = _traced(search, jit_compile, sampling is not None, prefix)
    return CompiledSearch(traced, beam_size, dict(alpha=alpha, nbest=nbest, sampling=sampling),
                          fixed_nbest if fixed is not None else None, fixed)


class CompiledSearch:
    """A search compiled once for any shape and for any of the settings it takes at each call:
    alpha, nbest and sampling's draw (`sampling.Draw`) are tensors of its graph, so calling it
    with other values of them traces nothing (`make_search_fn`).

    Args:
        traced: the tf.function (`_traced`), whose arguments `arguments` gives.
        beam_size: K.
        defaults: the alpha, nbest and sampling of a call that gives none.
        fixed_nbest, fixed_sampling: under XLA the sampling's nbest and its top-k and top-p that
            the trace holds (None: none).
    """

    def __init__(self, traced: tf.types.experimental.PolymorphicFunction, beam_size: int,
                 defaults: dict, fixed_nbest: int | None = None,
                 fixed_sampling: SamplingOptions | None = None):
        self.traced, self.beam_size, self.defaults = traced, beam_size, defaults
        self._fixed_nbest, self._fixed_sampling = fixed_nbest, fixed_sampling
        self._check(defaults["alpha"], defaults["nbest"], defaults["sampling"])

    def __call__(self, source_ids, *inputs, alpha: float | None = None,
                 nbest: int | None = None, sampling: SamplingOptions | None = None
                 ) -> SearchOutput:
        """The search of source_ids [B, S] and `inputs` (the line ids, the prefix: as
        `make_search_fn` says), nbest hypotheses per sentence; alpha, nbest and sampling those
        of this call (None: the defaults).

        Raises:
            ValueError: alpha < 0, nbest out of [1, beam_size] (of [1, ...) when sampling), or
                under XLA a sampling's nbest, top-k or top-p other than those compiled in.
        """
        nbest = self.defaults["nbest"] if nbest is None else nbest
        output = self.traced(*self.arguments(source_ids, *inputs, alpha=alpha, nbest=nbest,
                                             sampling=sampling))
        # A beam search returns all K hypotheses (nbest is a tensor): the first nbest are its.
        return SearchOutput(*(x[:, :nbest] for x in output[:4]), output.steps)

    def arguments(self, source_ids, *inputs, alpha: float | None = None,
                  nbest: int | None = None, sampling: SamplingOptions | None = None) -> list:
        """The traced function's arguments for a call (`__call__`), checked."""
        alpha = self.defaults["alpha"] if alpha is None else alpha
        nbest = self.defaults["nbest"] if nbest is None else nbest
        sampling = self.defaults["sampling"] if sampling is None else sampling
        self._check(alpha, nbest, sampling)
        settings = [tf.constant(alpha, tf.float32), tf.constant(nbest, tf.int32)]
        if sampling is not None:
            settings.append(Draw.of(sampling))
        return [source_ids, *inputs, *settings]

    def _check(self, alpha: float, nbest: int, sampling: SamplingOptions | None) -> None:
        """Raises ValueError for settings this search cannot take (`__call__`)."""
        check_alpha(alpha)
        if (sampling is None) != (self.defaults["sampling"] is None):
            raise ValueError(f"this search {'samples' if sampling is None else 'does not sample'}"
                             f", got sampling={sampling!r}")
        if sampling is None:
            check_nbest(nbest, self.beam_size)
        elif not isinstance(nbest, (int, np.integer)) or nbest < 1:
            raise ValueError(f"nbest must be a positive int, got {nbest!r}")
        fixed = self._fixed_sampling
        if fixed is not None and (nbest, sampling.topk, sampling.topp) != (
                self._fixed_nbest, fixed.topk, fixed.topp):
            raise ValueError(f"under XLA this search samples nbest {self._fixed_nbest} at "
                             f"top-k {fixed.topk} and top-p {fixed.topp} (shapes of its "
                             f"program), got {nbest}, {sampling.topk} and {sampling.topp}")

    def experimental_get_tracing_count(self) -> int:
        """Times the search was traced (once, whatever its calls' settings)."""
        return self.traced.experimental_get_tracing_count()


def _models(model: Transformer | Sequence[Transformer], max_len_a: float, max_len_b: int
            ) -> tuple[list[Transformer], int]:
    """The models of a search (one, or an ensemble's) and the positions all of them have.

    Raises:
        ValueError: a negative max_len_a or max_len_b.
    """
    if not (max_len_a >= 0 and max_len_b >= 0):
        raise ValueError(f"max_len_a and max_len_b must be >= 0, got {max_len_a!r}, {max_len_b!r}")
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    return models, min(m.config.max_positions for m in models)


def make_constrained_search_fn(model: Transformer | Sequence[Transformer], beam_size: int = 4,
                               alpha: float = 0.6, length_penalty: str = "gnmt",
                               max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1,
                               stop: str = "exact", prefix: bool = False
                               ) -> "ConstrainedSearch":
    """A `(source_ids [B, S], constraints) -> SearchOutput` (numpy arrays) of the lexically
    constrained beam search (`vtx.inference.lexical`) for `model` or an ensemble (`decoder`):
    `constraints` holds a `lexical.Phrases` per sentence. With `prefix` it also takes
    (prefix_ids int32 [B, P], prefix_lengths int32 [B]), as `make_search_fn` does. The other
    arguments are `make_search_fn`'s; alpha and nbest, which the host uses, are the defaults of
    each call's (`ConstrainedSearch`).

    The search runs from the host; the encoder and the decoder's step are each traced once, for
    any shape, the self-attention cache growing a position a step.

    Raises:
        ValueError: a negative max_len_a or max_len_b, or a setting `beam_search` rejects (at
            the first search).
    """
    models, max_positions = _models(model, max_len_a, max_len_b)
    step, invariant, _ = decoder_step(models, grow=True, group=1)
    if prefix:
        step = forced_prefix.constrained(step)
    encode = tf.function(lambda source_ids: decoder_state(models, source_ids, None, 1),
                         input_signature=[tf.TensorSpec([None, None], tf.int32)],
                         autograph=False)
    limits = functools.partial(output_length_limits, max_len_a=max_len_a, max_len_b=max_len_b,
                               max_positions=max_positions)
    return ConstrainedSearch(encode, lexical.HostStep(step, beam_size, invariant), limits,
                             dict(alpha=alpha, nbest=nbest, length_penalty=length_penalty,
                                  stop=stop), prefix)


@dataclasses.dataclass
class ConstrainedSearch:
    """The lexically constrained search of `make_constrained_search_fn`: its compiled parts
    (the encoder, the decoder's step) and the settings the host's search takes at each call."""

    encode: tf.types.experimental.PolymorphicFunction  # source_ids -> the decoder's state
    host_step: lexical.HostStep
    limits: Callable  # source_ids -> (L, int32 [B]): `output_length_limits`
    defaults: dict  # alpha, nbest, length_penalty and stop of a call that gives none
    prefix: bool

    def __call__(self, source_ids, constraints, prefix_ids=None, prefix_lengths=None, *,
                 alpha: float | None = None, nbest: int | None = None) -> SearchOutput:
        """The search of source_ids [B, S] (`make_constrained_search_fn`), nbest hypotheses
        per sentence; alpha and nbest those of this call (None: the defaults)."""
        settings = dict(self.defaults, **{name: value for name, value in
                                           (("alpha", alpha), ("nbest", nbest))
                                           if value is not None})
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        state = self.encode(source_ids)
        if self.prefix:
            state = forced_prefix.initial_state(state, prefix_ids, prefix_lengths)
        _, max_lengths = self.limits(source_ids)
        return lexical.beam_search(self.host_step, state, constraints, max_lengths.numpy(),
                                   self.host_step.beam_size, **settings)

    def experimental_get_tracing_count(self) -> int:
        """Times its compiled parts were traced (each once, whatever its calls' settings)."""
        return self.encode.experimental_get_tracing_count() + self.host_step.tracing_count()


def _traced(search: Callable[..., SearchOutput], jit_compile: bool, sampled: bool,
            prefixed: bool) -> tf.types.experimental.PolymorphicFunction:
    """`search` as a tf.function of int32 inputs: source_ids [B, S], then line_ids [B] when
    `sampled`, then prefix_ids [B, P] and prefix_lengths [B] when `prefixed`; then of the
    settings fed at each call: alpha float32 [], nbest int32 [] and, when `sampled`, a
    `sampling.Draw` of scalar tensors."""
    # One trace for every (rows, length): no retracing whatever the input. With XLA the traced
    # graph is still compiled once per concrete shape (`decoding.padded_batches` keeps those few).
    # No AutoGraph: the searches call `tf.while_loop` themselves, and AutoGraph's rewrite of
    # their source would be most of the trace's time: every `vtx translate` and BLEU or F1
    # validation starts sooner without it.
    inputs = {"source_ids": [None, None]}
    if sampled:
        inputs["line_ids"] = [None]
    if prefixed:
        inputs.update(prefix_ids=[None, None], prefix_lengths=[None])
    settings = {"alpha": tf.TensorSpec([], tf.float32), "nbest": tf.TensorSpec([], tf.int32)}
    if sampled:
        settings["draw"] = DRAW_SPECS
    specs = [tf.TensorSpec(shape, tf.int32) for shape in inputs.values()] + list(settings.values())

    def traced(*args):
        named = dict(zip(list(inputs) + list(settings), args))
        return search(**named)

    return tf.function(traced, input_signature=specs, jit_compile=jit_compile or None,
                       autograph=False)


def search_for(model: Transformer | Sequence[Transformer], options: DecodeOptions,
               pieces: Sequence[str] | None = None) -> CompiledSearch:
    """`make_search_fn` with the settings of `options` (vtx.inference.decoding); with
    `options.constrain_trees`, `pieces` are the vocabulary's (by id)."""
    return make_search_fn(model, beam_size=options.beam, alpha=options.lenpen,
                          length_penalty=options.lenpen_formula, max_len_a=options.max_len_a,
                          max_len_b=options.max_len_b, nbest=options.nbest, stop=options.stop,
                          jit_compile=options.jit_compile,
                          tree_pieces=pieces if options.constrain_trees else None,
                          sampling=options.sampling, prefix=options.prefix)


def constrained_search_for(model: Transformer | Sequence[Transformer], options: DecodeOptions
                           ) -> ConstrainedSearch:
    """`make_constrained_search_fn` with the settings of `options`."""
    return make_constrained_search_fn(model, beam_size=options.beam, alpha=options.lenpen,
                                      length_penalty=options.lenpen_formula,
                                      max_len_a=options.max_len_a, max_len_b=options.max_len_b,
                                      nbest=options.nbest, stop=options.stop,
                                      prefix=options.prefix)


def trace_key(options: DecodeOptions) -> DecodeOptions:
    """What of `options` shapes the traces of `search_for` and `constrained_search_for`: the
    settings their searches take at each call (alpha, nbest, sampling's draw) and those no
    search reads set to fixed values, so that options differing only in them share one key.
    Under XLA sampling's nbest, top-k and top-p stay: they set shapes (`make_search_fn`)."""
    fixed = dict(lenpen=0.0, positional_scores=False, constraints=False, alignment_layer=None,
                 max_tokens=DecodeOptions.max_tokens, search_threads=1)
    if options.sampling is None:
        return dataclasses.replace(options, nbest=1, **fixed)
    if options.jit_compile:
        return dataclasses.replace(options, sampling=dataclasses.replace(
            options.sampling, seed=0, temperature=1.0), **fixed)
    return dataclasses.replace(options, nbest=1, sampling=SamplingOptions(), **fixed)
