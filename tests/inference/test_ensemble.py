"""Ensembles: the search and the scorer over the mean of several models' probabilities."""

import dataclasses

import keras
import numpy as np
import pytest

from vtx import checkpoints
from vtx.config import BOS_ID, EOS_ID, ModelConfig
from vtx.inference.beam_search import length_penalty
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.loading import load_models
from vtx.inference.translator import Translator, load_translator
from vtx.models import transformer

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A girl.", "",
             "A woman is cooking."]


@pytest.fixture(scope="module")
def smaller_checkpoint(trained_checkpoint, tmp_path_factory):
    """A random model of another size on the trained checkpoint's vocabulary."""
    checkpoint = checkpoints.load(trained_checkpoint)
    config = dataclasses.replace(ModelConfig.from_dict(checkpoint.meta["model_config"]),
                                 num_layers=1, d_model=32, d_ff=48, num_heads=2)
    keras.utils.set_random_seed(3)
    model = transformer.build(config)
    path = tmp_path_factory.mktemp("smaller") / "smaller.npz"
    checkpoints.save(path, checkpoints.Checkpoint(
        model=[v.numpy() for v in model.variables], optimizer=[],
        meta={"step": 0, "model_config": config.to_dict()}, vocab=checkpoint.vocab))
    return path


def ensemble(paths, options):
    models, vocab = load_models(paths)
    return Translator(models, vocab, options)


@pytest.mark.parametrize("options", [DecodeOptions(nbest=3), DecodeOptions(beam=1),
                                     DecodeOptions(nbest=2, jit_compile=True),
                                     DecodeOptions(nbest=2, sampling=SamplingOptions(seed=4))])
def test_two_copies_of_a_checkpoint_give_its_output_and_scores(trained_checkpoint, options):
    alone = load_translator(trained_checkpoint, options).translate(SENTENCES)
    twice = ensemble([trained_checkpoint, trained_checkpoint], options).translate(SENTENCES)
    assert [[h.text for h in hs] for hs in twice] == [[h.text for h in hs] for hs in alone]
    np.testing.assert_allclose([h.score for hs in twice for h in hs],
                               [h.score for hs in alone for h in hs], rtol=1e-4)


def full_forward_probs(model, source, target):
    """float64 [|target| + 1, V]: the model's probabilities at each position of target + EOS."""
    logits = np.asarray(model((np.array([source], np.int32),
                               np.array([[BOS_ID] + target], np.int32))), np.float64)[0]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True)


def test_an_ensembles_scores_are_the_mean_of_its_models_probabilities(trained_checkpoint,
                                                                     smaller_checkpoint):
    translator = ensemble([trained_checkpoint, smaller_checkpoint],
                          DecodeOptions(nbest=2, positional_scores=True))
    models = translator.models
    assert models[0].config.d_model != models[1].config.d_model
    for sentence, hypotheses in zip(SENTENCES, translator.translate(SENTENCES)):
        source = translator.vocab.encode(sentence)
        for hypothesis in hypotheses if source else ():
            target = list(hypothesis.tokens)
            ending = target + [EOS_ID] if hypothesis.finished else target
            mean = sum(full_forward_probs(m, source, target) for m in models) / len(models)
            expected = np.log(mean[np.arange(len(ending)), ending])
            np.testing.assert_allclose(hypothesis.positional_scores, expected, rtol=1e-4,
                                       atol=1e-5)
            penalty = float(length_penalty(len(ending), 0.6))
            np.testing.assert_allclose(hypothesis.score, expected.sum() / penalty, rtol=1e-4)


def test_checkpoints_of_different_vocabularies_are_refused_naming_both(
        trained_checkpoint, random_parser_checkpoint):
    with pytest.raises(ValueError) as error:
        load_models([trained_checkpoint, random_parser_checkpoint])
    assert str(error.value).startswith(
        f"--checkpoint {trained_checkpoint} and --checkpoint {random_parser_checkpoint} have "
        f"different vocabularies (piece ")
