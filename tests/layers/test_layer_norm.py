import keras
import numpy as np
import pytest
import tensorflow as tf

from vtx.layers.layer_norm import LayerNormalization

RNG = np.random.default_rng(0)


def pair(dtype: str = "float32", **kwargs):
    """vtx's and Keras's layer norm, built on [2, 5, 16] inputs, with the same random weights."""
    layers = (LayerNormalization(epsilon=1e-6, dtype=dtype, **kwargs),
              keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype, **kwargs))
    for layer in layers:
        layer.build((2, 5, 16))
    for ours, theirs in zip(layers[0].weights, layers[1].weights):  # gamma, beta (if any)
        value = RNG.normal(size=ours.shape).astype("float32")
        ours.assign(value)
        theirs.assign(value)
    return layers


def inputs():
    return tf.constant(RNG.normal(loc=2.0, scale=3.0, size=(2, 5, 16)).astype("float32"))


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_outputs_are_keras_layer_norm_to_the_bit(dtype):
    ours, theirs = pair(dtype)
    x = inputs()
    got, expected = ours(x), theirs(x)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(tf.cast(got, tf.float32)),
                                  np.asarray(tf.cast(expected, tf.float32)))


def gradients(layer, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.cast(layer(x), tf.float32) * upstream)
    return tape.gradient(loss, [x, *layer.trainable_weights])


def test_gradients_are_keras_layer_norms():
    """The written-out gradient (inputs, gamma, beta) against TensorFlow's differentiation of
    Keras's layer norm, under a random upstream gradient (a sum of the outputs would give zero
    input gradient, the one case a wrong formula could still pass)."""
    ours, theirs = pair()
    x, upstream = inputs(), tf.constant(RNG.normal(size=(2, 5, 16)).astype("float32"))
    got, expected = gradients(ours, x, upstream), gradients(theirs, x, upstream)
    assert len(got) == len(expected) == 3
    for ours_grad, keras_grad in zip(got, expected):
        np.testing.assert_allclose(ours_grad, keras_grad, rtol=1e-5, atol=1e-5)
    assert np.abs(np.asarray(got[0])).max() > 0.1  # not two zero gradients


@pytest.mark.parametrize("kwargs", [{"axis": 1}, {"center": False}, {"scale": False}])
def test_other_settings_are_keras_own(kwargs):
    ours, theirs = pair(**kwargs)
    x, upstream = inputs(), tf.constant(RNG.normal(size=(2, 5, 16)).astype("float32"))
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(theirs(x)))
    for ours_grad, keras_grad in zip(gradients(ours, x, upstream), gradients(theirs, x, upstream)):
        np.testing.assert_allclose(ours_grad, keras_grad, rtol=1e-6, atol=1e-6)
