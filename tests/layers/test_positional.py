import math

import numpy as np
import pytest

from vtx.layers import SinusoidalPositionEncoding


@pytest.mark.parametrize("pos,i", [(0, 0), (1, 0), (5, 3), (37, 10), (300, 15), (1023, 31)])
def test_encoding_equals_paper_formula(pos, i):
    d_model = 64
    table = np.asarray(SinusoidalPositionEncoding()(np.zeros((1, 1024, d_model))))
    angle = pos / 10000 ** (2 * i / d_model)
    assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
    assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)


def test_start_index_continues_the_sequence():
    layer = SinusoidalPositionEncoding()
    whole = np.asarray(layer(np.zeros((1, 10, 16))))
    tail = np.asarray(layer(np.zeros((1, 3, 16)), start_index=7))
    np.testing.assert_allclose(tail, whole[7:], atol=1e-6)


def test_bfloat16_positions_stay_exact_far_out():
    # Positions computed in bfloat16 would round 1001 to 1000; the layer computes them in float32.
    layer = SinusoidalPositionEncoding(dtype="mixed_bfloat16")
    table = np.asarray(layer(np.zeros((1, 1002, 8), "float32")), "float32")
    assert table[1001, 0] == pytest.approx(math.sin(1001), abs=1e-2)


def test_layer_has_no_weights_and_round_trips():
    layer = SinusoidalPositionEncoding(max_wavelength=500.0)
    layer(np.zeros((2, 5, 8)))
    assert layer.weights == []
    clone = SinusoidalPositionEncoding.from_config(layer.get_config())
    assert clone.max_wavelength == 500.0


def test_sines_then_cosines_is_marians_table_to_the_bit():
    # Transformers' MarianSinusoidalPositionalEmbedding: float64 numpy angles, then float32.
    positions, width = 300, 16
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / width) for j in range(width)]
                       for pos in range(positions)])
    marian = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], 1)
    layer = SinusoidalPositionEncoding(layout="sines_then_cosines")
    np.testing.assert_array_equal(layer(np.zeros((1, positions, width))),
                                  marian.astype(np.float32))
    tail = np.asarray(layer(np.zeros((1, 3, width)), start_index=297))
    np.testing.assert_array_equal(tail, marian[297:].astype(np.float32))
    assert SinusoidalPositionEncoding.from_config(layer.get_config()).layout == layer.layout


def test_an_unknown_layout_is_refused_by_name():
    with pytest.raises(ValueError, match="'cosines_first'"):
        SinusoidalPositionEncoding(layout="cosines_first")
