"""Word alignments from a decoder layer's cross-attention (`vtx.inference.alignment`)."""

import numpy as np
import pytest
import tensorflow as tf

from vtx.config import PAD_ID
from vtx.errors import ArgumentError
from vtx.inference import alignment
from vtx.inference.decoding import DecodeOptions
from vtx.inference.translator import load_translator

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A girl.", "",
             "A woman is cooking."]


@pytest.mark.parametrize("layer", [0, -1])
def test_every_target_token_gets_one_source_token_within_the_source(trained_checkpoint, layer):
    translator = load_translator(trained_checkpoint,
                                 DecodeOptions(nbest=2, alignment_layer=layer))
    for sentence, hypotheses in zip(SENTENCES, translator.translate(SENTENCES)):
        pieces = len(translator.vocab.encode(sentence))
        for hypothesis in hypotheses:
            pairs = [tuple(map(int, pair.split("-"))) for pair in hypothesis.alignment.split()]
            assert [j for _, j in pairs] == list(range(len(hypothesis.tokens)))
            assert all(0 <= i < pieces for i, _ in pairs)


def test_attention_rows_are_distributions_over_the_real_source_whatever_the_padding(
        trained_checkpoint):
    model = load_translator(trained_checkpoint, DecodeOptions()).model
    source, target = [5, 9, 14, 7], [8, 30, 12]
    alone = alignment.cross_attention(model, tf.constant([source]), tf.constant([target]), -1)
    padded = alignment.cross_attention(
        model, tf.constant([source + [PAD_ID] * 4, [6] * 8]),
        tf.constant([target + [PAD_ID] * 2, [7] * 5]), -1).numpy()
    assert alone.shape == (1, 4, 4)
    np.testing.assert_allclose(alone.numpy().sum(-1), 1.0, rtol=1e-5)
    assert (padded[0, :, 4:] == 0).all()
    np.testing.assert_allclose(padded[0, :4, :4], alone[0], rtol=1e-4, atol=1e-6)
    assert alignment.hard_alignment(np.eye(4)[[2, 0, 1, 3]], 3) == "2-0 0-1 1-2"


def test_a_layer_the_model_lacks_is_refused_naming_the_flag(trained_checkpoint):
    with pytest.raises(ArgumentError) as error:
        load_translator(trained_checkpoint, DecodeOptions(alignment_layer=7))
    assert error.value.arguments == ["alignment_layer"]
    assert "7: the model has" in str(error.value)
