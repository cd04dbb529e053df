"""Beam and greedy search on a toy decoder whose logits depend on the whole prefix."""

import numpy as np
import pytest
import tensorflow as tf

from tests.inference.toy_decoder import HashPrefixDecoder, exhaustive_ranking
from vtx.config import EOS_ID
from vtx.inference.beam_search import beam_search, greedy_search, length_penalty, top_k_rows

STARTS = [5, 17, 333]


def run_beam(decoder, starts=STARTS, **options):
    search = tf.function(lambda: beam_search(decoder, decoder.initial_state(starts), len(starts),
                                             **options))
    return tf.nest.map_structure(lambda x: x.numpy(), search())


def run_greedy(decoder, starts=STARTS, **options):
    search = tf.function(lambda: greedy_search(decoder, decoder.initial_state(starts),
                                               len(starts), **options))
    return tf.nest.map_structure(lambda x: x.numpy(), search())


def words(output, sentence, rank=0):
    return tuple(output.tokens[sentence, rank, :output.lengths[sentence, rank]].tolist())


@pytest.mark.parametrize("width,k", [(8000, 10), (4096, 3), (997, 5), (100, 9)])
def test_top_k_by_blocks_equals_top_k(width, k):
    rng = np.random.default_rng(width)
    x = rng.normal(size=(6, width)).astype(np.float32)
    x[1] = np.round(x[1])  # many ties: resolved to the lower index, as top_k does
    x[2, ::2] = -np.inf  # masked tokens (the tree constraint's)
    x[3] = 0.0
    x[4] = -1.0  # a tie between the first column and the block holding the best value
    x[4, 0], x[4, -2], x[4, -1] = 1.0, 2.0, 1.0
    values, indices = top_k_rows(tf.constant(x), k)
    expected = tf.math.top_k(tf.constant(x), k)
    np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())


def test_length_penalty_matches_the_formulas():
    lengths = tf.constant([1, 7, 10])
    np.testing.assert_allclose(length_penalty(lengths, 0.6, "gnmt"),
                               [1.0, 2.0 ** 0.6, 2.5 ** 0.6], rtol=1e-6)
    np.testing.assert_allclose(length_penalty(lengths, 0.6, "fairseq"),
                               [1.0, 7.0 ** 0.6, 10.0 ** 0.6], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_equals_greedy_without_length_penalty(seed):
    decoder = HashPrefixDecoder(vocab_size=9, seed=seed, eos_bias=1.0)
    beam = run_beam(decoder, beam_size=1, max_length=7, alpha=0.0)
    greedy = run_greedy(decoder, max_length=7, alpha=0.0)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)
    np.testing.assert_array_equal(beam.finished, greedy.finished)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-6)


def test_beam_of_one_scores_at_least_greedy_with_length_penalty():
    decoder = HashPrefixDecoder(vocab_size=9, seed=3, eos_bias=1.0)
    beam = run_beam(decoder, beam_size=1, max_length=7, alpha=1.0)
    greedy = run_greedy(decoder, max_length=7, alpha=1.0)
    assert np.all(beam.scores >= greedy.scores - 1e-6)


def test_greedy_takes_the_argmax_path():
    decoder = HashPrefixDecoder(vocab_size=9, seed=4, eos_bias=1.0)
    greedy = run_greedy(decoder, starts=[5], max_length=7, alpha=0.0)
    hash_value, expected, logprob = decoder.next_hash(5, 2), [], 0.0
    for _ in range(7):
        log_probs = decoder.log_probs_after(hash_value)
        log_probs[[0, 2]] = -np.inf  # PAD and BOS are never generated
        token = int(np.argmax(log_probs))
        logprob += log_probs[token]
        if token == EOS_ID:
            break
        expected.append(token)
        hash_value = decoder.next_hash(hash_value, token)
    assert words(greedy, 0) == tuple(expected)
    np.testing.assert_allclose(greedy.scores[0, 0], logprob, rtol=1e-5)


@pytest.mark.parametrize("penalty,alpha", [("gnmt", 0.6), ("gnmt", 2.0), ("fairseq", 1.0)])
def test_wide_beam_returns_the_exhaustive_best(penalty, alpha):
    # V = 6 leaves 3 words + EOS to choose from (PAD and BOS are never generated); with
    # max_length 4 at most 27 prefixes are live and 108 candidates compete: a beam of 128 keeps all.
    decoder = HashPrefixDecoder(vocab_size=6, seed=7)
    output = run_beam(decoder, beam_size=128, max_length=4, alpha=alpha, length_penalty=penalty,
                      nbest=3)
    for sentence, start in enumerate(STARTS):
        ranking = exhaustive_ranking(decoder, start, 4, alpha, penalty)
        for rank in range(3):
            assert words(output, sentence, rank) == ranking[rank][1]
            np.testing.assert_allclose(output.scores[sentence, rank], ranking[rank][0], rtol=1e-5)
    assert output.finished.all()


def test_small_beam_never_beats_the_exhaustive_best():
    decoder = HashPrefixDecoder(vocab_size=6, seed=8)
    output = run_beam(decoder, beam_size=2, max_length=4)
    for sentence, start in enumerate(STARTS):
        best_score = exhaustive_ranking(decoder, start, 4, 0.6, "gnmt")[0][0]
        assert output.scores[sentence, 0] <= best_score + 1e-5


def test_per_sentence_max_lengths_are_respected():
    never_ends = HashPrefixDecoder(vocab_size=9, seed=5, eos_bias=-50.0)
    output = run_beam(never_ends, beam_size=3, max_length=6, max_lengths=[2, 6, 4], nbest=2)
    np.testing.assert_array_equal(output.lengths, [[2, 2], [6, 6], [4, 4]])
    assert not output.finished.any()
    assert (output.tokens[0, :, 2:] == 0).all()


def test_batched_limits_equal_one_sentence_at_a_time():
    decoder = HashPrefixDecoder(vocab_size=9, seed=6)
    limits = [3, 7, 5]
    batched = run_beam(decoder, beam_size=3, max_length=7, max_lengths=limits, nbest=2)
    for sentence, (start, limit) in enumerate(zip(STARTS, limits)):
        single = run_beam(decoder, starts=[start], beam_size=3, max_length=limit, nbest=2)
        for rank in range(2):
            assert words(batched, sentence, rank) == words(single, 0, rank)
        np.testing.assert_allclose(batched.scores[sentence], single.scores[0], rtol=1e-6)
        np.testing.assert_array_equal(batched.finished[sentence], single.finished[0])


def test_early_stop_returns_the_full_run_result_in_fewer_steps():
    decoder = HashPrefixDecoder(vocab_size=9, seed=9, eos_bias=3.0)
    stopped = run_beam(decoder, beam_size=4, max_length=8, nbest=2)
    full = run_beam(decoder, beam_size=4, max_length=8, nbest=2, stop="never")
    assert full.steps == 8 and stopped.steps < 8
    np.testing.assert_array_equal(stopped.tokens, full.tokens)
    np.testing.assert_array_equal(stopped.scores, full.scores)


@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_early_stop_never_changes_the_result(alpha):
    # Several start hashes and a weaker EOS, so that long hypotheses often overtake short ones.
    starts = list(range(1, 400, 23))
    decoder = HashPrefixDecoder(vocab_size=9, seed=12, eos_bias=1.0)
    stopped = run_beam(decoder, starts=starts, beam_size=3, max_length=8, alpha=alpha, nbest=2)
    full = run_beam(decoder, starts=starts, beam_size=3, max_length=8, alpha=alpha, nbest=2,
                    stop="never")
    np.testing.assert_array_equal(stopped.tokens, full.tokens)
    np.testing.assert_array_equal(stopped.scores, full.scores)


@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_fairseq_stop_ends_a_sentence_when_its_beam_size_th_hypothesis_finishes(alpha):
    # The search up to a step does not depend on the rule, so each sentence's "fairseq" result
    # is the run cut at the step its K-th hypothesis finished; one step earlier fewer had.
    decoder = HashPrefixDecoder(vocab_size=9, seed=12, eos_bias=1.0)
    for start in range(1, 200, 37):
        stopped = run_beam(decoder, starts=[start], beam_size=3, max_length=12, alpha=alpha,
                           nbest=3, stop="fairseq")
        steps = int(stopped.steps)
        assert stopped.finished.all() and steps < 12
        cut = run_beam(decoder, starts=[start], beam_size=3, max_length=steps, alpha=alpha,
                       nbest=3, stop="never")
        np.testing.assert_array_equal(stopped.tokens[:, :, :steps], cut.tokens)
        np.testing.assert_array_equal(stopped.scores, cut.scores)
        earlier = run_beam(decoder, starts=[start], beam_size=3, max_length=steps - 1,
                           alpha=alpha, nbest=3, stop="never")
        assert not earlier.finished.all()


def test_fairseq_stop_decodes_fewer_rows_than_exact_on_the_same_sentences():
    decoder = HashPrefixDecoder(vocab_size=9, seed=12, eos_bias=1.0)
    starts = list(range(1, 400, 23))
    rows = {}
    for stop in ("exact", "fairseq"):
        tokens_to_logits, count = counting_rows(decoder)
        search = tf.function(lambda: beam_search(
            tokens_to_logits, decoder.initial_state(starts), len(starts), beam_size=3,
            max_length=30, stop=stop, drop_done=True))
        search()
        rows[stop] = int(count.numpy())
    assert rows["fairseq"] < rows["exact"]


def test_an_unknown_stop_rule_is_named():
    decoder = HashPrefixDecoder(vocab_size=9, seed=12)
    with pytest.raises(ValueError, match="unknown stop rule 'first'"):
        run_beam(decoder, beam_size=3, max_length=8, stop="first")


def counting_rows(decoder):
    """decoder as a tokens_to_logits that also adds the rows it decodes to a variable."""
    rows = tf.Variable(0)

    def tokens_to_logits(token_ids, state):
        rows.assign_add(tf.shape(token_ids)[0])
        return decoder(token_ids, state)

    return tokens_to_logits, rows


@pytest.mark.parametrize("beam_size", [1, 3])
def test_dropping_done_sentences_changes_only_the_rows_decoded(beam_size):
    # 18 sentences whose limits and EOS times differ, so that they finish at different steps.
    starts = list(range(1, 400, 23))
    limits = [2 + i % 7 for i in range(len(starts))]
    decoder = HashPrefixDecoder(vocab_size=9, seed=13, eos_bias=1.0)
    outputs, decoded = [], []
    for drop_done in (False, True):
        step, rows = counting_rows(decoder)
        options = dict(max_length=8, max_lengths=limits, alpha=0.6, drop_done=drop_done)
        if beam_size == 1:
            search = lambda: greedy_search(step, decoder.initial_state(starts), len(starts),
                                           **options)
        else:
            search = lambda: beam_search(step, decoder.initial_state(starts), len(starts),
                                         beam_size=beam_size, nbest=2, **options)
        outputs.append(tf.nest.map_structure(lambda x: x.numpy(), tf.function(search)()))
        decoded.append(int(rows.numpy()))
    kept, dropped = outputs
    np.testing.assert_array_equal(dropped.tokens, kept.tokens)
    np.testing.assert_array_equal(dropped.finished, kept.finished)
    np.testing.assert_allclose(dropped.scores, kept.scores, rtol=1e-6)
    assert dropped.steps == kept.steps
    assert decoded[0] == kept.steps * len(starts) * beam_size  # every row at every step
    # With dropping, a sentence's rows are decoded at most until its own limit.
    assert decoded[1] <= sum(min(limit, kept.steps) for limit in limits) * beam_size < decoded[0]


def test_same_input_twice_gives_the_same_output():
    decoder = HashPrefixDecoder(vocab_size=9, seed=10)
    first, second = (run_beam(decoder, beam_size=4, max_length=7, nbest=4) for _ in range(2))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_eager_execution_equals_the_traced_search():
    decoder = HashPrefixDecoder(vocab_size=9, seed=11)
    eager = beam_search(decoder, decoder.initial_state(STARTS), 3, beam_size=3, max_length=5)
    traced = run_beam(decoder, beam_size=3, max_length=5)
    np.testing.assert_array_equal(eager.tokens.numpy(), traced.tokens)


@pytest.mark.parametrize("options,message", [
    (dict(beam_size=0), "beam_size must be a positive int, got 0"),
    (dict(max_length=2.5), "max_length must be a positive int, got 2.5"),
    (dict(beam_size=2, nbest=3), "nbest (3) must not exceed beam_size (2)"),
    (dict(alpha=-0.5), "alpha must be >= 0, got -0.5"),
    (dict(length_penalty="average"), "unknown length_penalty 'average'"),
    (dict(eos_id=0), "eos_id (0) must differ"),
    (dict(max_lengths=[1, 9, 2]), "max_lengths must lie in [1, max_length=5], got [1 9 2]"),
    (dict(max_lengths=[1, 2]), "max_lengths must have shape [3], got (2,)"),
])
def test_bad_settings_raise_one_clear_error(options, message):
    decoder = HashPrefixDecoder(vocab_size=9)
    options = {"max_length": 5, **options}
    with pytest.raises(ValueError) as error:
        beam_search(decoder, decoder.initial_state(STARTS), 3, **options)
    assert message in str(error.value)


def test_minus_infinity_logits_are_never_generated_and_never_give_nan():
    """A constraint forbids tokens with -inf logits (`vtx.inference.tree_constraint`): token 5
    everywhere, and every token after token 4 (a dead end: its row is all -inf). Such a row
    must not turn into NaN (-inf minus a log-sum-exp of -inf), which would rank anywhere."""
    decoder = HashPrefixDecoder(vocab_size=8, seed=3)
    forbidden = tf.constant([False] * 5 + [True] + [False] * 2)

    def constrained(token_ids, state):
        logits, state = decoder(token_ids, state)
        blocked = forbidden[None, :] | (token_ids == 4)[:, None]
        return tf.where(blocked, float("-inf"), logits), state

    constrained.initial_state = decoder.initial_state
    output = run_beam(constrained, beam_size=6, max_length=5, nbest=6)
    assert not np.isnan(output.scores).any()
    for sentence in range(len(STARTS)):
        for rank in range(6):
            hypothesis = words(output, sentence, rank)
            assert 5 not in hypothesis
            if np.isfinite(output.scores[sentence, rank]):
                assert 4 not in hypothesis[:-1] and (4 not in hypothesis
                                                     or not output.finished[sentence, rank])


class BannedIdsFavoured:
    """A HashPrefixDecoder whose PAD and BOS logits are far above every other token's."""

    def __init__(self, decoder):
        self.decoder, self.initial_state = decoder, decoder.initial_state

    def __call__(self, token_ids, state):
        logits, state = self.decoder(token_ids, state)
        favoured = tf.constant([100.0, 0.0, 100.0] + [0.0] * (self.decoder.vocab_size - 3))
        return logits + favoured, state


@pytest.mark.parametrize("stop", ["exact", "fairseq", "never"])
def test_slots_past_the_hypotheses_that_exist_are_empty(stop):
    """Over the words {UNK} and a limit of 2 tokens only 3 hypotheses exist: "" and "UNK"
    finished, "UNK UNK" cut at the limit. The 4th slot of nbest 4 was filled with one of them
    extended by a banned token (PAD or BOS) and scored -inf, which a caller printed as a
    translation; it is empty now. PAD and BOS, favoured by the model, are in no hypothesis."""
    decoder = BannedIdsFavoured(HashPrefixDecoder(vocab_size=4, seed=1))
    output = run_beam(decoder, beam_size=4, nbest=4, max_length=2, stop=stop)
    for sentence in range(len(STARTS)):
        found = {words(output, sentence, rank) for rank in range(3)}
        assert found == {(), (1,), (1, 1)}
        assert np.isfinite(output.scores[sentence, :3]).all()
        assert output.scores[sentence, 3] == -np.inf and output.lengths[sentence, 3] == 0
        assert not output.finished[sentence, 3]
    assert (output.tokens[:, 3] == 0).all()
    filled = np.arange(output.tokens.shape[2]) < output.lengths[:, :, None]
    assert not np.isin(output.tokens[filled], [0, 2]).any()  # no PAD, no BOS in a hypothesis
    assert (output.tokens[~filled] == 0).all()  # PAD after the words only


@pytest.mark.parametrize("stop", ["exact", "fairseq", "never"])
def test_a_sentence_left_with_no_live_hypothesis_stops(stop):
    """Over the words {UNK}, with UNK forbidden after UNK, only "" and "UNK" exist: after 2
    steps every live hypothesis is a dead end. The search ran on to the limit, decoding slots
    of score -inf, since fewer than nbest (or beam) hypotheses had finished."""
    decoder = HashPrefixDecoder(vocab_size=4, seed=2)

    def one_unk_at_most(token_ids, state):
        logits, state = decoder(token_ids, state)
        blocked = (token_ids == 1)[:, None] & (tf.range(4) == 1)[None, :]
        return tf.where(blocked, float("-inf"), logits), state

    one_unk_at_most.initial_state = decoder.initial_state
    output = run_beam(one_unk_at_most, beam_size=4, nbest=4, max_length=6, stop=stop)
    assert output.steps == 2
    for sentence in range(len(STARTS)):
        assert {words(output, sentence, rank) for rank in range(2)} == {(), (1,)}
        assert output.finished[sentence, :2].all()
        assert (output.scores[sentence, 2:] == -np.inf).all()
