import math

import numpy as np

from vtx.layers import SharedEmbedding
from tests.layers.layer_check import check_layer


def test_embedding_is_scaled_by_sqrt_d_model():
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    out = np.asarray(layer(np.array([[3, 7]])))
    matrix = layer.get_weights()[0]
    np.testing.assert_allclose(out[0, 0], matrix[3] * math.sqrt(16), rtol=1e-6)
    np.testing.assert_allclose(out[0, 1], matrix[7] * math.sqrt(16), rtol=1e-6)


def test_projection_uses_the_same_matrix_transposed():
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    layer.build()
    hidden = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    logits = np.asarray(layer.project(hidden))
    np.testing.assert_allclose(logits, hidden @ layer.get_weights()[0].T, rtol=1e-5, atol=1e-5)
    assert len(layer.weights) == 1


def test_shared_embedding_layer_contract():
    check_layer(SharedEmbedding(vocab_size=11, d_model=16), [np.array([[1, 2, 3]])],
                expected_shape=(1, 3, 16), expected_weights=11 * 16)


def test_unscaled_embedding_with_a_logits_bias():
    layer = SharedEmbedding(vocab_size=11, d_model=16, scale=False, logits_bias=True)
    out = np.asarray(layer(np.array([[3]])))
    matrix, bias = layer.get_weights()
    np.testing.assert_array_equal(out[0, 0], matrix[3])
    layer.bias.assign(np.arange(11, dtype="float32"))
    hidden = np.random.default_rng(0).normal(size=(1, 2, 16)).astype("float32")
    np.testing.assert_allclose(layer.project(hidden), hidden @ matrix.T + np.arange(11),
                               rtol=1e-5, atol=1e-5)
    clone = SharedEmbedding.from_config(layer.get_config())
    assert (clone.scale, clone.logits_bias) == (False, True)
