"""Lexically constrained beam search: the phrase tracking, the beam allocation, the search on a
toy decoder (against the plain search and an exhaustive one) and on the tiny trained model."""

import dataclasses
import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests.inference.toy_decoder import HashPrefixDecoder, exhaustive_ranking
from vtx.inference import lexical
from vtx.inference.beam_search import beam_search
from vtx.inference.decoding import DecodeOptions
from vtx.inference.loading import load_models
from vtx.inference.translator import Translator, load_translator

STARTS = [5, 17, 333, 40]


def holds(words, phrase) -> bool:
    words, phrase = tuple(words), tuple(phrase)
    return any(words[i:i + len(phrase)] == phrase for i in range(len(words) - len(phrase) + 1))


def track(phrases: lexical.Phrases, tokens):
    progress = phrases.start()
    for token in tokens:
        progress = phrases.advance(progress, token)
    return progress


def test_progress_meets_a_phrase_exactly_when_it_appears():
    """Every output over a small alphabet, against every set of phrases drawn from it: the
    tracked progress has met a phrase iff its tokens appear contiguously (after false starts,
    overlapping others, inside others)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        phrases = [tuple(rng.integers(4, 7, size=rng.integers(1, 4))) for _ in range(3)]
        tracker = lexical.Phrases(phrases)
        output = tuple(rng.integers(4, 7, size=rng.integers(0, 9)))
        progress = track(tracker, output)
        met = {tracker.phrases[i] for i in range(len(tracker.phrases))} - {
            tracker.phrases[i] for i in progress.unmet}
        assert met == {p for p in tracker.phrases if holds(output, p)}, (phrases, output)
        assert (tracker.bank(progress) == tracker.tokens) == (not progress.unmet)


def test_bank_and_next_tokens_follow_the_longest_matched_end():
    tracker = lexical.Phrases([(4, 4, 5), (6, 7), (4, 4, 5)])  # the repeat is one phrase
    assert tracker.tokens == 5 and tracker.next_tokens(tracker.start()) == {4, 6}
    progress = track(tracker, [4, 4, 4])  # a false start: still two tokens in
    assert progress.matched == (4, 4) and tracker.bank(progress) == 2
    assert tracker.next_tokens(progress) == {5, 4, 6}
    progress = tracker.advance(progress, 5)
    assert progress.unmet == (1,) and tracker.bank(progress) == 3
    assert tracker.bank(tracker.advance(progress, 6)) == 4
    assert tracker.bank(tracker.advance(tracker.advance(progress, 6), 4)) == 3  # back out
    overlapping = lexical.Phrases([(8, 9), (9,)])  # "New York" holds "York"
    assert not track(overlapping, [8, 9]).unmet


def test_allocation_takes_the_best_of_each_bank_in_turn_highest_first():
    # Candidates listed by bank, best first within each: the round robin's banks are
    # 3 2 1 0 3 2 1 0 3 2 1 2 (the example in fairseq's LexicallyConstrainedBeamSearch).
    banks = [3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 0, 0]
    totals = [-1.0 - i / 10 for i in range(len(banks))]
    order = lexical.allocate(banks, totals, len(banks))
    assert [banks[i] for i in order] == [3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 2]
    assert order[:4] == [0, 3, 7, 10] and len(lexical.allocate(banks, totals, 5)) == 5


def run_both(decoder, beam_size, max_length, phrases=None, **options):
    """(plain `beam_search`, the constrained search) of the STARTS sentences."""
    plain = tf.function(lambda: beam_search(
        decoder, decoder.initial_state(STARTS), len(STARTS), beam_size=beam_size,
        max_length=max_length, **options))()
    constraints = phrases or [lexical.Phrases()] * len(STARTS)
    constrained = lexical.beam_search(lexical.HostStep(decoder, beam_size),
                                      decoder.initial_state(STARTS), constraints,
                                      [max_length] * len(STARTS), beam_size, **options)
    return tf.nest.map_structure(lambda x: x.numpy(), plain), constrained


@pytest.mark.parametrize("seed,beam,nbest,alpha,penalty,stop", [
    (0, 4, 2, 0.6, "gnmt", "exact"), (1, 3, 3, 1.0, "fairseq", "fairseq"),
    (2, 5, 1, 0.0, "gnmt", "never"), (3, 1, 1, 0.6, "gnmt", "exact")])
def test_without_phrases_it_is_the_plain_search(seed, beam, nbest, alpha, penalty, stop):
    decoder = HashPrefixDecoder(vocab_size=23, seed=seed, eos_bias=1.0)
    plain, constrained = run_both(decoder, beam, 7, nbest=nbest, alpha=alpha,
                                  length_penalty=penalty, stop=stop)
    np.testing.assert_array_equal(constrained.tokens, plain.tokens)
    np.testing.assert_array_equal(constrained.finished, plain.finished)
    # Scores to float32 rounding: the two searches reduce over rows of other shapes, whose
    # kernels may round differently on another CPU (and an unfinished one's lp(L) comes from a
    # vector's pow in the plain search).
    np.testing.assert_allclose(constrained.scores, plain.scores, rtol=1e-6)
    assert constrained.steps == plain.steps


def run_constrained(decoder, phrases, beam_size, max_length, **options):
    return lexical.beam_search(lexical.HostStep(decoder, beam_size),
                               decoder.initial_state(STARTS[:len(phrases)]),
                               [lexical.Phrases(p) for p in phrases],
                               [max_length] * len(phrases), beam_size, **options)


def test_a_beam_as_wide_as_the_search_space_finds_the_best_constrained_hypotheses():
    """Over 5 words and |Y| <= 4 a beam of 800 keeps every hypothesis: the constrained search
    returns the best finished hypotheses holding every phrase, as enumeration ranks them."""
    decoder = HashPrefixDecoder(vocab_size=8, seed=1, eos_bias=1.0)
    phrases = [[(4,), (6, 5)], [(5, 7)], [(1, 4), (4, 6)]]
    output = run_constrained(decoder, phrases, 800, 4, nbest=4, alpha=0.6)
    for b, sentence in enumerate(phrases):
        ranking = [(score, words) for score, words in
                   exhaustive_ranking(decoder, STARTS[b], 4, 0.6, "gnmt")
                   if all(holds(words, phrase) for phrase in sentence)][:4]
        found = [(output.scores[b, r], tuple(output.tokens[b, r, :output.lengths[b, r]]))
                 for r in range(len(ranking))]
        assert [words for _, words in found] == [words for _, words in ranking]
        np.testing.assert_allclose([s for s, _ in found], [s for s, _ in ranking], rtol=1e-5)
        assert output.finished[b, :len(ranking)].all()


@pytest.mark.parametrize("seed,beam,stop", [(0, 4, "exact"), (1, 2, "fairseq"), (2, 1, "exact")])
def test_every_finished_hypothesis_holds_every_phrase(seed, beam, stop):
    # EOS is most rows' likeliest token, barred until every phrase is met.
    decoder = HashPrefixDecoder(vocab_size=23, seed=seed, eos_bias=5.0)
    phrases = [[(7, 8)], [(9,), (10, 11, 12)], [(13,), (13, 14)], [(20, 21), (21, 22)]]
    output = run_constrained(decoder, phrases, beam, 8, nbest=beam, stop=stop)
    for b, r in itertools.product(range(len(phrases)), range(beam)):
        words = output.tokens[b, r, :output.lengths[b, r]]
        if output.finished[b, r]:
            assert all(holds(words, phrase) for phrase in phrases[b]), (b, r, words)
    assert output.finished[:, 0].all()  # each finishes once it may


def test_phrases_longer_than_the_limit_return_the_best_unfinished_hypothesis():
    decoder = HashPrefixDecoder(vocab_size=23, seed=4, eos_bias=5.0)
    output = run_constrained(decoder, [[(7, 8, 9)], [(7,)]], 3, 3, nbest=2)
    assert not output.finished[0].any() and np.isfinite(output.scores[0]).all()
    # The live hypotheses fill the slots from the highest bank: the phrase, cut before EOS.
    assert output.tokens[0, 0].tolist() == [7, 8, 9]
    assert output.finished[1, 0] and holds(output.tokens[1, 0, :output.lengths[1, 0]], (7,))


def test_a_line_whose_constraints_cannot_fit_is_warned_about_and_translated(
        trained_checkpoint):
    warnings = []
    translator = load_translator(trained_checkpoint, DecodeOptions(
        max_len_a=0.0, max_len_b=8, constraints=True), warnings.append)
    long_phrase = "eine schwarze Katze springt über den hohen Zaun im Garten"
    results = translator.translate(["A dog.", "A cat.", "A girl."], first_line_number=7,
                                   constraints=[["Hund"], [long_phrase], []])
    assert warnings == ["line 8: no hypothesis holding every constraint ended within the "
                        "line's length limit (8 tokens with EOS): its best unfinished one is "
                        "output"]
    assert results[0][0].finished and "Hund" in results[0][0].text
    # The highest bank's hypothesis: the phrase's first 8 pieces, each forced in turn.
    assert not results[1][0].finished
    assert results[1][0].tokens == tuple(translator.vocab.encode(long_phrase)[:8])


SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A girl.",
             "A woman is cooking.", "A dog runs."]
CONSTRAINTS = [["Hund"], [], ["rote Jacke", "Mann"], ["kocht", "Küche"], []]


@pytest.mark.parametrize("options,copies", [
    (DecodeOptions(nbest=3, constraints=True), 1),
    (DecodeOptions(nbest=2, beam=5, lenpen=1.0, lenpen_formula="fairseq", stop="fairseq",
                   constraints=True), 1),
    (DecodeOptions(nbest=2, constraints=True, prefix=True), 2)])
def test_every_constrained_output_holds_its_constraints(trained_checkpoint, options, copies):
    """Beam with the GNMT or fairseq penalty and nbest; a prefix with an ensemble of two."""
    warnings = []
    models, vocab = load_models([trained_checkpoint] * copies)
    translator = Translator(models, vocab, options, warnings.append)
    prefixes = ["Ein", "", "", "Die", ""] if options.prefix else None
    results = translator.translate(SENTENCES, prefixes=prefixes, constraints=CONSTRAINTS)
    assert not warnings
    for phrases, hypotheses in zip(CONSTRAINTS, results):
        assert hypotheses[0].finished
        for hypothesis in (h for h in hypotheses if h.finished):
            for phrase in phrases:
                assert holds(hypothesis.tokens, vocab.encode(phrase)), (phrase, hypothesis)
                assert phrase in hypothesis.text
    if prefixes:
        assert all(h.text.startswith("Die ") for h in results[3])


def test_lines_without_constraints_get_the_plain_search_output_and_scores(trained_checkpoint):
    options = DecodeOptions(nbest=3)
    plain = load_translator(trained_checkpoint, options)
    constrained = load_translator(trained_checkpoint, dataclasses.replace(
        options, constraints=True))
    expected = plain.translate(SENTENCES)
    got = constrained.translate(SENTENCES, constraints=[[]] * len(SENTENCES))
    assert [[(h.tokens, h.score, h.finished) for h in line] for line in got] == \
        [[(h.tokens, h.score, h.finished) for h in line] for line in expected]


def test_the_constrained_search_given_no_phrases_finds_the_plain_searchs_hypotheses(
        trained_checkpoint):
    from vtx.inference.model_search import make_constrained_search_fn, make_search_fn

    translator = load_translator(trained_checkpoint, DecodeOptions())
    encoded = [translator.vocab.encode(sentence) for sentence in SENTENCES]
    source = np.zeros((len(encoded), max(map(len, encoded))), np.int32)  # PAD_ID 0
    for row, ids in enumerate(encoded):
        source[row, :len(ids)] = ids
    plain = make_search_fn(translator.model, nbest=3)(source)
    constrained = make_constrained_search_fn(translator.model, nbest=3)(
        source, [lexical.Phrases()] * len(encoded))
    width = constrained.tokens.shape[2]
    np.testing.assert_array_equal(constrained.tokens, plain.tokens.numpy()[:, :, :width])
    np.testing.assert_array_equal(constrained.finished, plain.finished.numpy())
    # The plain search holds one cache per sentence (`Transformer.init_state(group=...)`),
    # this one a cache per hypothesis: the same attention, summed in another order.
    np.testing.assert_allclose(constrained.scores, plain.scores.numpy(), rtol=1e-5)
