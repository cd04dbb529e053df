import numpy as np

from vtx.layers import DecoderLayer, EncoderLayer, FeedForward
from tests.layers.layer_check import check_layer

RNG = np.random.default_rng(0)
D, F, H = 16, 32, 4
ATTENTION = 4 * (D * D + D)
FFN = D * F + F + F * D + D
NORM = 2 * D


def test_feed_forward_contract():
    x = RNG.normal(size=(2, 3, D)).astype("float32")
    check_layer(FeedForward(D, F, relu_dropout=0.1), [x], (2, 3, D), FFN)


def test_encoder_layer_contract():
    x = RNG.normal(size=(2, 3, D)).astype("float32")
    mask = np.ones((2, 1, 3), bool)
    check_layer(EncoderLayer(D, F, H, dropout=0.1, attention_dropout=0.1, relu_dropout=0.1),
                [x, mask], (2, 3, D), ATTENTION + FFN + 2 * NORM)


def test_decoder_layer_contract():
    x = RNG.normal(size=(2, 3, D)).astype("float32")
    memory = RNG.normal(size=(2, 5, D)).astype("float32")
    mask = np.ones((2, 1, 5), bool)
    check_layer(DecoderLayer(D, F, H, dropout=0.1), [x, memory, mask], (2, 3, D),
                2 * ATTENTION + FFN + 3 * NORM)


def test_encoder_output_is_layer_normalised_post_norm():
    layer = EncoderLayer(D, F, H, dropout=0.0)
    out = np.asarray(layer(RNG.normal(size=(1, 4, D)).astype("float32") * 5))
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-2)


def test_dropout_rates_are_separate():
    config = EncoderLayer(D, F, H, dropout=0.3, attention_dropout=0.1, relu_dropout=0.2).get_config()
    assert (config["dropout"], config["attention_dropout"], config["relu_dropout"]) == (0.3, 0.1, 0.2)
