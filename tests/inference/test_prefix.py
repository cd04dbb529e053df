"""Prefix-constrained decoding on the tiny trained model: beam search and sampling."""

import dataclasses

import numpy as np
import pytest

from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.translator import load_translator

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A girl.",
             "A woman is cooking."]
PREFIXES = ["Ein Hund", "", "Eine Frau sitzt", "Der"]


@pytest.mark.parametrize("options", [
    DecodeOptions(nbest=4, prefix=True),
    DecodeOptions(nbest=3, prefix=True, sampling=SamplingOptions(topk=30, seed=2)),
    DecodeOptions(nbest=2, prefix=True, jit_compile=True)])
def test_every_hypothesis_starts_with_its_lines_prefix(trained_checkpoint, options):
    translator = load_translator(trained_checkpoint, options)
    results = translator.translate(SENTENCES, prefixes=PREFIXES)
    plain = load_translator(trained_checkpoint, dataclasses.replace(
        options, prefix=False)).translate(SENTENCES[1:2], first_line_number=2)
    for prefix, hypotheses in zip(PREFIXES, results):
        ids = tuple(translator.vocab.encode(prefix))
        assert len(hypotheses) == options.nbest
        for hypothesis in hypotheses:
            assert hypothesis.tokens[:len(ids)] == ids
            assert len(hypothesis.tokens) > len(ids)
    # no prefix: the plain search's output
    assert [h.text for h in results[1]] == [h.text for h in plain[0]]


def test_a_prefix_equal_to_a_hypothesis_the_beam_found_returns_it(trained_checkpoint):
    beam = load_translator(trained_checkpoint, DecodeOptions(nbest=4))
    prefixed = load_translator(trained_checkpoint, DecodeOptions(nbest=4, prefix=True))
    encoded = [beam.vocab.encode(sentence) for sentence in SENTENCES]
    found = beam.search_ids(encoded)
    for rank in range(4):
        prefixes = [list(hypotheses[rank].tokens) for hypotheses in found]
        again = prefixed.search_ids(encoded, prefixes=prefixes)
        for hypotheses, results in zip(found, again):
            target = hypotheses[rank]
            same = [h for h in results if h.tokens == target.tokens]
            assert same and same[0].finished
            # the model's log P of every token, prefix included: the beam's score
            np.testing.assert_allclose(same[0].score, target.score, rtol=1e-4)
            assert results[0].score >= target.score - 1e-4


def test_a_prefix_that_leaves_no_room_for_eos_is_refused_naming_the_line(trained_checkpoint):
    translator = load_translator(
        trained_checkpoint, DecodeOptions(prefix=True, max_len_a=0.0, max_len_b=3))
    with pytest.raises(ArgumentError) as error:
        translator.translate(["A dog.", "A cat."], first_line_number=5,
                             prefixes=["Ein", "Eine kleine Katze"])
    assert str(error.value).startswith("prefix_path line 6: ")
