import numpy as np

from vtx.layers import MultiHeadAttention
from tests.layers.layer_check import check_layer

RNG = np.random.default_rng(0)


def test_attention_layer_contract():
    query = RNG.normal(size=(2, 3, 16)).astype("float32")
    memory = RNG.normal(size=(2, 5, 16)).astype("float32")
    check_layer(MultiHeadAttention(num_heads=4, d_model=16), [query, memory],
                expected_shape=(2, 3, 16), expected_weights=4 * (16 * 16 + 16))


def test_masked_keys_have_no_influence():
    layer = MultiHeadAttention(num_heads=2, d_model=8)
    query = RNG.normal(size=(1, 2, 8)).astype("float32")
    memory = RNG.normal(size=(1, 4, 8)).astype("float32")
    mask = np.array([[[True, True, False, False]]])
    base = np.asarray(layer(query, memory, mask))
    memory[0, 2:] = RNG.normal(size=(2, 8)) * 100
    np.testing.assert_array_equal(np.asarray(layer(query, memory, mask)), base)


def test_matches_a_numpy_reference():
    layer = MultiHeadAttention(num_heads=2, d_model=4)
    query = RNG.normal(size=(1, 3, 4)).astype("float32")
    memory = RNG.normal(size=(1, 2, 4)).astype("float32")
    out = np.asarray(layer(query, memory))
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = [
        (d.kernel.numpy(), d.bias.numpy())
        for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)]
    q, k, v = query[0] @ wq + bq, memory[0] @ wk + bk, memory[0] @ wv + bv
    heads = []
    for h in range(2):
        cols = slice(2 * h, 2 * h + 2)
        scores = q[:, cols] @ k[:, cols].T / np.sqrt(2)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        heads.append(weights / weights.sum(-1, keepdims=True) @ v[:, cols])
    np.testing.assert_allclose(out[0], np.concatenate(heads, -1) @ wo + bo, atol=1e-5)
