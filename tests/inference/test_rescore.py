"""Forced decoding (`vtx.inference.scoring`, `vtx.inference.rescore`) against the model's full
forward pass."""

import numpy as np
import pytest

from vtx.config import BOS_ID, EOS_ID
from vtx.errors import ArgumentError, DataError
from vtx.inference import rescore, translate
from vtx.inference.decoding import DecodeOptions
from vtx.inference.loading import load_models

SOURCES = ["A man is riding a bike.", "Two dogs play in the snow.", "", "A girl."]
TARGETS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Nichts.", ""]


@pytest.fixture(scope="module")
def loaded(trained_checkpoint):
    models, vocab = load_models([trained_checkpoint])
    return models[0], vocab


def full_forward_log_probs(model, source, target):
    """float64 [|target| + 1]: log P of each target id then EOS, from one full forward pass."""
    logits = model((np.array([source], np.int32), np.array([[BOS_ID] + target], np.int32)))
    logits = np.asarray(logits, np.float64)[0]
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1,
                                keepdims=True)) - logits.max(-1, keepdims=True)
    return log_probs[np.arange(len(target) + 1), target + [EOS_ID]]


def test_scores_equal_the_sum_of_the_full_forwards_log_probs(loaded):
    model, vocab = loaded
    scorer = rescore.Scorer([model], vocab, DecodeOptions(lenpen=0.6, max_tokens=16))
    pairs = [(vocab.encode(s), vocab.encode(t)) for s, t in zip(SOURCES, TARGETS)]
    results = scorer.score(pairs)
    for (source, target), scored in zip(pairs, results):
        if not source:  # no source: no score
            assert np.isnan(scored.score) and scored.positional_scores == ()
            continue
        expected = full_forward_log_probs(model, source, target)
        np.testing.assert_allclose(scored.positional_scores, expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(scored.logprob, expected.sum(), rtol=1e-4)
        penalty = ((5 + len(target) + 1) / 6) ** 0.6
        np.testing.assert_allclose(scored.score, expected.sum() / penalty, rtol=1e-4)
        assert scored.tokens == tuple(target)


def test_the_compiled_pass_scores_as_the_plain_one_in_few_shapes(loaded):
    """With XLA (`vtx score --jit`) every pass is a power of two of rows by lengths of a
    multiple of 8, each shape one compiled program; the scores are the plain pass's."""
    model, vocab = loaded
    sources, targets = SOURCES * 3, TARGETS[1:] + TARGETS * 2 + TARGETS[:1]
    pairs = [(vocab.encode(s), vocab.encode(t)) for s, t in zip(sources, targets)]
    plain = rescore.Scorer([model], vocab, DecodeOptions(max_tokens=64)).score(pairs)
    compiled = rescore.Scorer([model], vocab, DecodeOptions(max_tokens=64, jit_compile=True))
    shapes, traced = [], compiled._scorer
    compiled._scorer = lambda *inputs: shapes.append(inputs[0].shape + inputs[1].shape) or \
        traced(*inputs)
    for one, other in zip(plain, compiled.score(pairs)):
        np.testing.assert_allclose(other.positional_scores, one.positional_scores, rtol=1e-4,
                                   atol=1e-5)
        assert other.tokens == one.tokens
    assert shapes and all(rows & (rows - 1) == 0 and source % 8 == 0 and target % 8 == 0
                          and rows == rows_again for rows, source, rows_again, target in shapes)


def test_rescoring_the_nbest_output_by_its_model_gives_back_its_scores(trained_checkpoint,
                                                                       tmp_path):
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    translate.translate_file(trained_checkpoint, tmp_path / "src", tmp_path / "nbest",
                             DecodeOptions(nbest=3))
    results = rescore.score_file([trained_checkpoint], tmp_path / "src", tmp_path / "nbest",
                                 tmp_path / "scores", DecodeOptions(), nbest=3)
    written = (tmp_path / "nbest").read_text().splitlines()
    rescored = (tmp_path / "scores").read_text().splitlines()
    assert len(results) == len(rescored) == 12
    for line, again in zip(written, rescored):
        score, text = line.split("\t")
        new_score, new_text = again.split("\t")
        assert new_text == text
        if score == "nan":
            assert new_score == "nan"
        else:
            assert abs(float(new_score) - float(score)) < 2e-4


def test_a_target_file_of_another_length_or_format_is_refused(loaded, tmp_path):
    model, vocab = loaded
    scorer = rescore.Scorer([model], vocab, DecodeOptions())
    with pytest.raises(ArgumentError) as error:
        rescore.encode_pairs(scorer, SOURCES, TARGETS[:3], 1, "hyp.de", print)
    assert str(error.value) == ("target_path hyp.de has 3 lines; nbest 1 per line of the "
                                "4-line input needs 4")
    with pytest.raises(DataError, match="nbest.txt line 2: no score<TAB>text"):
        rescore.parse_targets(["-1.0\tEin Hund.", "Ein Hund."], 2, "nbest.txt")
    assert rescore.parse_targets(["-1.0\tEin Hund.", "nan\t"], 2, "x") == ["Ein Hund.", None]
