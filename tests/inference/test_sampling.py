"""The sampling search on the toy decoder: greedy at top-k 1, reproducible per line, and drawing
one step's tokens with the frequencies of the (reshaped) model distribution."""

import math
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.inference.toy_decoder import HashPrefixDecoder
from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.errors import ArgumentError
from vtx.inference.beam_search import greedy_search
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.sampling import sampling_search

STARTS = [5, 17, 333]


def run_sampling(decoder, options, starts=STARTS, line_ids=None, jit=False, **settings):
    line_ids = list(range(len(starts))) if line_ids is None else line_ids
    search = tf.function(lambda: sampling_search(decoder, decoder.initial_state(starts),
                                                 len(starts), tf.constant(line_ids), options,
                                                 **settings), jit_compile=jit or None)
    return tf.nest.map_structure(lambda x: x.numpy(), search())


def hypotheses(output, sentence):
    return [tuple(output.tokens[sentence, r, :output.lengths[sentence, r]].tolist())
            for r in range(output.tokens.shape[1])]


# The smallest temperature the flag accepts (the smallest positive float) draws the argmax too.
@pytest.mark.parametrize("seed, settings", [(0, {"topk": 1, "temperature": 0.5}),
                                            (1, {"topk": 1, "temperature": 0.5}),
                                            (2, {"temperature": math.ulp(0.0)})])
def test_top_k_of_one_equals_greedy(seed, settings):
    decoder = HashPrefixDecoder(vocab_size=9, seed=seed, eos_bias=1.0)
    greedy = tf.function(lambda: greedy_search(decoder, decoder.initial_state(STARTS),
                                               len(STARTS), max_length=7, alpha=0.6))()
    sampled = run_sampling(decoder, SamplingOptions(**settings, seed=seed),
                           nbest=3, max_length=7, alpha=0.6)
    for sentence in range(len(STARTS)):
        expected = tuple(greedy.tokens[sentence, 0, :greedy.lengths[sentence, 0]].numpy())
        assert hypotheses(sampled, sentence) == [expected] * 3
        np.testing.assert_allclose(sampled.scores[sentence], greedy.scores[sentence, 0],
                                   rtol=1e-5)


def test_a_lines_samples_are_the_same_alone_in_a_batch_and_under_xla():
    decoder = HashPrefixDecoder(vocab_size=9, seed=2, eos_bias=-1.0)
    options = SamplingOptions(topp=0.9, temperature=1.3, seed=7)
    together = run_sampling(decoder, options, line_ids=[10, 11, 12], nbest=4, max_length=8)
    under_xla = run_sampling(decoder, options, line_ids=[10, 11, 12], nbest=4, max_length=8,
                             jit=True)
    for sentence, start in enumerate(STARTS):
        alone = run_sampling(decoder, options, starts=[start], line_ids=[10 + sentence],
                             nbest=4, max_length=8)
        assert hypotheses(alone, 0) == hypotheses(together, sentence)
        assert hypotheses(under_xla, sentence) == hypotheses(together, sentence)
        np.testing.assert_allclose(alone.scores[0], together.scores[sentence], rtol=1e-5)
    # The samples differ between the lines of one start and between its samples.
    again = run_sampling(decoder, options, starts=[5] * 3, line_ids=[1, 2, 3], nbest=4,
                         max_length=8)
    drawn = [h for sentence in range(3) for h in hypotheses(again, sentence)]
    assert len(set(drawn)) > 6


def test_samples_are_best_first_and_scored_by_the_model():
    decoder = HashPrefixDecoder(vocab_size=9, seed=3)
    output = run_sampling(decoder, SamplingOptions(temperature=2.0, seed=1), nbest=5,
                          max_length=6, alpha=0.0)
    for sentence, start in enumerate(STARTS):
        assert (np.diff(output.scores[sentence]) <= 0).all()
        for rank, words in enumerate(hypotheses(output, sentence)):
            hash_value, logprob = decoder.next_hash(start, BOS_ID), 0.0
            ending = [EOS_ID] if output.finished[sentence, rank] else []
            for token in list(words) + ending:
                logprob += decoder.log_probs_after(hash_value)[token]
                hash_value = decoder.next_hash(hash_value, token)
            np.testing.assert_allclose(output.scores[sentence, rank], logprob, rtol=1e-5)


def expected_first_token(decoder, start, options):
    """float64 [V]: the distribution the first token is drawn from, by the options' rules."""
    logits = decoder.table[decoder.next_hash(start, BOS_ID)].astype(np.float64)
    logits[[PAD_ID, BOS_ID]] = -np.inf
    logits = logits / options.temperature
    order = np.argsort(-logits, kind="stable")
    keep = np.zeros(len(logits), bool)
    keep[order[:options.topk or len(logits)]] = True
    probs = np.where(keep, np.exp(logits - logits.max()), 0.0)
    probs /= probs.sum()
    before = np.cumsum(probs[order]) - probs[order]
    keep[order[before >= options.topp]] = False
    probs = np.where(keep, probs, 0.0)
    return probs / probs.sum()


@pytest.mark.parametrize("options", [SamplingOptions(seed=3),
                                     SamplingOptions(topk=4, temperature=0.7, seed=4),
                                     SamplingOptions(topp=0.6, temperature=1.5, seed=5),
                                     # the largest the flag accepts: uniform over the tokens
                                     SamplingOptions(temperature=sys.float_info.max, seed=6)])
def test_one_steps_token_frequencies_match_the_distribution(options):
    decoder = HashPrefixDecoder(vocab_size=12, seed=9)
    draws = 4000
    # max_length 1: each sample is one token drawn after BOS (EOS or a word cut at the limit).
    output = run_sampling(decoder, options, starts=[5] * 8, line_ids=list(range(8)),
                          nbest=draws // 8, max_length=1)
    tokens = np.where(output.finished, EOS_ID, output.tokens[:, :, 0]).ravel()
    counts = np.bincount(tokens, minlength=12)
    probs = expected_first_token(decoder, 5, options)
    assert counts[probs == 0].sum() == 0  # nothing drawn outside the kept tokens
    expected = probs[probs > 0] * draws
    chi_square = ((counts[probs > 0] - expected) ** 2 / expected).sum()
    freedom = (probs > 0).sum() - 1
    # Mean `freedom`, standard deviation sqrt(2 freedom): ten deviations is a wide margin.
    assert chi_square < freedom + 10 * np.sqrt(2 * freedom)
    assert (counts[probs > 0] > 0).all()


def test_bad_sampling_settings_name_their_flag():
    for settings, argument in (({"topk": -1}, "sampling_topk"), ({"topp": 0.0}, "sampling_topp"),
                               ({"topp": 1.5}, "sampling_topp"),
                               ({"temperature": 0.0}, "temperature")):
        with pytest.raises(ArgumentError) as error:
            SamplingOptions(**settings)
        assert error.value.arguments == [argument]
    # nbest is free of the beam when sampling
    assert DecodeOptions(beam=1, nbest=6, sampling=SamplingOptions()).rows_per_sentence == 6
