"""The search bound to a tiny Transformer with random weights and a 12-token vocabulary.

A random Transformer with tied embeddings mostly repeats one token and rarely ends; `biased_search`
raises the EOS logit with the position past each sentence's own source length, so that hypotheses
finish at lengths that differ by construction (sources of 6, 2 and 4 tokens) and early stop happens.
"""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from vtx.config import EOS_ID, PAD_ID, TINY
from vtx.inference.beam_search import beam_search, greedy_search
from vtx.inference.decoding import DecodeOptions
from vtx.inference.model_search import (GROUPED_BEAM_WITH_XLA, make_search_fn,
                                        output_length_limits)
from vtx.models import transformer

# Three sources of different lengths; PAD_ID-padded to one batch.
SOURCES = [[5, 9, 4, 7, 11, 6], [8, 4], [10, 6, 5, 9]]


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return transformer.build(dataclasses.replace(TINY, vocab_size=12))


def padded(sources, length=None):
    length = length or max(map(len, sources))
    return tf.constant([s + [PAD_ID] * (length - len(s)) for s in sources], tf.int32)


def biased_search(model, eos_slope: float, max_len_b: int, greedy: bool = False,
                  fast: bool = False, grouped: bool = False, **options):
    """Like `make_search_fn` (beam or greedy), with eos_slope * (position - |X|) added to the EOS
    logit of each hypothesis (|X| its source length): hypotheses end a few words past |X|. With
    `fast`, the state as `make_search_fn` has it without XLA: a growing cache, the memory held
    once per sentence, finished sentences dropped; else all of it allocated and kept per row.
    With `grouped` (a beam search), the self-attention cache held once per sentence too
    (`init_state(group=beam)`), as `make_search_fn` has it."""
    eos = tf.one_hot(EOS_ID, model.config.vocab_size)  # [V]

    def tokens_to_logits(token_ids, state):
        logits, new_state = model.decode_step(token_ids, state, grow=fast)
        source_lengths = tf.reduce_sum(tf.cast(state["memory_mask"], tf.float32), axis=[1, 2])
        per_row = tf.shape(token_ids)[0] // tf.shape(source_lengths)[0]  # beams held once
        past_source = tf.cast(state["index"], tf.float32) - tf.repeat(source_lengths, per_row)
        return logits + eos_slope * past_source[:, None] * eos, new_state

    @tf.function
    def search(source):
        max_length, limits = output_length_limits(source, 1.0, max_len_b, 1024)
        run = greedy_search if greedy else beam_search
        if fast:
            options.update(growing=model.GROWING_STATE, drop_done=True)
        if (fast and not greedy) or grouped:
            options.update(beam_invariant=model.BEAM_INVARIANT_STATE
                           + (model.GROUPED_STATE if grouped else ()))
        state = model.init_state(source, None if fast else max_length,
                                 group=options["beam_size"] if grouped else 1)
        return run(tokens_to_logits, state, source.shape[0], max_length=max_length,
                   max_lengths=limits, **options)

    return search


def hypotheses(output):
    """Per sentence, the list of (words tuple, score) of its R hypotheses."""
    tokens, lengths, scores = output.tokens.numpy(), output.lengths.numpy(), output.scores.numpy()
    return [[(tuple(tokens[b, r, :lengths[b, r]]), scores[b, r]) for r in range(tokens.shape[1])]
            for b in range(tokens.shape[0])]


def assert_same_hypotheses(actual, expected, rtol=1e-5):
    for got, want in zip(actual, expected):
        assert [words for words, _ in got] == [words for words, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=rtol)


def test_output_length_limits_follow_source_length_plus_b():
    max_length, limits = output_length_limits(padded(SOURCES), 1.0, 5, max_positions=1024)
    assert max_length == 6 + 5
    np.testing.assert_array_equal(limits, [11, 7, 9])
    max_length, limits = output_length_limits(padded(SOURCES), 1.0, 50, max_positions=20)
    assert max_length == 20 and limits.numpy().max() == 20
    # A huge a is the model's limit, here and in a graph for any shape (a SavedModel's): a * |X|
    # beyond int32 wrapped to a negative limit, clipped to 1 token ("Ein" for "A dog.").
    max_length, limits = output_length_limits(padded(SOURCES), 1e308, 5, max_positions=20)
    assert max_length == 20 and limits.numpy().tolist() == [20, 20, 20]
    limit, limits = tf.function(lambda ids: output_length_limits(ids, 1e308, 5, 20),
                                input_signature=[tf.TensorSpec([None, None], tf.int32)])(
        tf.constant(padded(SOURCES)))
    assert int(limit) == 20 and limits.numpy().tolist() == [20, 20, 20]
    assert DecodeOptions(max_len_a=1e308).length_limit(6, max_positions=20) == 20  # CTranslate2's


def test_each_sentences_limit_is_a_times_its_length_plus_b_as_decode_options_compute_it():
    # In float32 the search's own limits were one off for some a against the documented
    # a * |X| + b that DecodeOptions (and so CTranslate2's export, and fairseq) compute.
    lengths = list(range(1, 121))
    source = padded([[5] * n for n in lengths])
    for a in (0.7, 1.1, 1.3, 2.1, 2.6):
        _, limits = output_length_limits(source, a, 3, max_positions=1024)
        expected = [DecodeOptions(max_len_a=a, max_len_b=3).length_limit(n, 1024)
                    for n in lengths]
        assert limits.numpy().tolist() == expected, a
    _, limits = output_length_limits(padded([[5] * 30]), 2.1, 0, 1024)
    assert limits.numpy().tolist() == [63]
    for value in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="must be finite and >= 0"):
            DecodeOptions(max_len_a=value)


def test_beam_of_one_equals_greedy_on_the_transformer(model):
    source = padded(SOURCES)
    greedy = make_search_fn(model, beam_size=1, alpha=0.0, max_len_b=8)(source)  # greedy_search
    one_beam = biased_search(model, 0.0, 8, beam_size=1, alpha=0.0)(source)
    assert_same_hypotheses(hypotheses(one_beam), hypotheses(greedy))
    biased_greedy = biased_search(model, 0.5, 8, greedy=True, alpha=0.0)(source)
    biased_beam = biased_search(model, 0.5, 8, beam_size=1, alpha=0.0)(source)
    assert biased_greedy.finished.numpy().any()
    assert_same_hypotheses(hypotheses(biased_beam), hypotheses(biased_greedy))


@pytest.mark.parametrize("eos_slope", [None, 0.5])
def test_batched_search_equals_one_sentence_at_a_time(model, eos_slope):
    if eos_slope is None:
        search = make_search_fn(model, beam_size=4, nbest=2, max_len_b=10)
    else:
        search = biased_search(model, eos_slope, 10, beam_size=4, nbest=2)
    batched = hypotheses(search(padded(SOURCES, length=8)))
    single = [hypotheses(search(padded([source])))[0] for source in SOURCES]
    assert_same_hypotheses(batched, single)


def test_early_stop_matches_running_to_max_length(model):
    source = padded(SOURCES)
    # A steep ramp: every hypothesis ends a few words past |X|, so the 6-token source's are longer
    # than the 2-token source's (measured for every slope from 1.5 to 4: no near-tie decides it).
    stopped = biased_search(model, 2.0, 10, beam_size=4, nbest=2)(source)
    full = biased_search(model, 2.0, 10, beam_size=4, nbest=2, stop="never")(source)
    assert int(full.steps) == 16 and int(stopped.steps) < 16
    lengths = stopped.lengths.numpy()  # [B, R]
    assert stopped.finished.numpy().all() and lengths[0].min() > lengths[1].max()
    assert_same_hypotheses(hypotheses(stopped), hypotheses(full), rtol=0)


@pytest.mark.parametrize("greedy", [False, True])
def test_the_fast_state_equals_the_allocated_one(model, greedy):
    # Sentences end at different steps (a few words past their lengths 6, 2 and 4), so the fast
    # search drops them from the decoder's batch one after the other.
    source = padded(SOURCES)
    options = dict(greedy=greedy) if greedy else dict(beam_size=4, nbest=2)
    fast = biased_search(model, 2.0, 10, fast=True, **options)(source)
    allocated = biased_search(model, 2.0, 10, **options)(source)
    assert fast.finished.numpy().all() and len(set(fast.lengths.numpy()[:, 0])) > 1
    assert int(fast.steps) == int(allocated.steps)
    assert_same_hypotheses(hypotheses(fast), hypotheses(allocated))


@pytest.mark.parametrize("fast", [False, True], ids=["allocated", "fast"])
def test_a_cache_held_once_per_sentence_searches_as_one_reordered_by_beam(model, fast):
    # Hypotheses reorder at every step and sentences end at different steps (with `fast`, they
    # leave the decoder's batch, their cache with them).
    source = padded(SOURCES)
    grouped = biased_search(model, 2.0, 10, fast=fast, grouped=True, beam_size=4, nbest=4)(source)
    reordered = biased_search(model, 2.0, 10, fast=fast, beam_size=4, nbest=4)(source)
    assert grouped.finished.numpy().all() and len(set(grouped.lengths.numpy()[:, 0])) > 1
    assert int(grouped.steps) == int(reordered.steps)
    assert_same_hypotheses(hypotheses(grouped), hypotheses(reordered))


def test_memory_held_once_per_sentence_equals_memory_copied_per_beam(model):
    source = padded(SOURCES)
    seen = []

    def tokens_to_logits(token_ids, state):
        seen.append((token_ids.shape[0], state["memory_keys"][0].shape[0]))
        return model.decode_step(token_ids, state)

    @tf.function
    def shared_search(source):
        max_length, limits = output_length_limits(source, 1.0, 10, 1024)
        return beam_search(tokens_to_logits, model.init_state(source, max_length), 3,
                           beam_size=4, nbest=4, max_length=max_length, max_lengths=limits,
                           beam_invariant=model.BEAM_INVARIANT_STATE)

    shared = shared_search(source)
    assert seen == [(12, 3)]  # 3 sentences x 4 beams read 3 rows of encoder keys
    copied = biased_search(model, 0.0, 10, beam_size=4, nbest=4)(source)  # 12 rows of each
    assert_same_hypotheses(hypotheses(shared), hypotheses(copied))
    assert len({words for sentence in hypotheses(shared) for words, _ in sentence}) > 4


def test_the_same_input_twice_gives_the_same_output(model):
    search = make_search_fn(model, beam_size=3, nbest=3, max_len_b=6)
    assert_same_hypotheses(hypotheses(search(padded(SOURCES))), hypotheses(search(padded(SOURCES))),
                           rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [3, GROUPED_BEAM_WITH_XLA + 1])  # the cache per sentence, or not
def test_xla_compiled_search_equals_the_graph_search(model, beam):
    source = padded(SOURCES)
    graph = make_search_fn(model, beam_size=beam, nbest=2, max_len_b=6)(source)
    xla = make_search_fn(model, beam_size=beam, nbest=2, max_len_b=6, jit_compile=True)(source)
    assert_same_hypotheses(hypotheses(xla), hypotheses(graph))


@pytest.mark.slow
def test_xla_takes_each_rows_best_tokens_by_its_top_k_not_by_sorting_the_row(model):
    """XLA turns TensorFlow's top_k into its own top-k (on a CPU a partial sort) only while
    nothing but the k best are read from it. A log-sum-exp that read the top value through a
    slice of its own kept a full sort of every row of logits at every step: the quick start's
    model decoded 2.2x slower under XLA (docs/benchmarks.md)."""
    search = make_search_fn(model, beam_size=3, nbest=2, max_len_b=6, jit_compile=True)
    hlo = search.traced.experimental_get_compiler_ir(*search.arguments(padded(SOURCES)))(
        stage="optimized_hlo")
    # A sort of scores (float32), not of a few integer ids (`top_k_rows` sorts its chosen
    # blocks' indices when the vocabulary is large).
    sorts = [line.strip() for line in hlo.splitlines()
             if " sort(" in line and "f32[" in line.split(" sort(")[0]]
    assert not sorts, "\n".join(sorts)


@pytest.mark.parametrize("options,message", [
    (dict(max_len_a=-1.0), "max_len_a and max_len_b must be >= 0, got -1.0, 50"),
    (dict(beam_size=1, nbest=2), "nbest (2) needs beam_size > 1"),
])
def test_bad_search_settings_raise(model, options, message):
    with pytest.raises(ValueError) as error:
        make_search_fn(model, **options)
    assert message in str(error.value)


def test_graph_search_is_traced_once_for_every_batch_shape(model):
    search = make_search_fn(model, beam_size=2, max_len_b=4)
    for sources, length in (([SOURCES[0]], 6), (SOURCES, 8), (SOURCES[1:], 16)):
        search(padded(sources, length=length))
    assert search.experimental_get_tracing_count() == 1
