"""One helper that checks every vtx layer the same way: shapes, weight count, config round trip,
and a training step that changes every weight."""

import keras
import numpy as np
import tensorflow as tf


def check_layer(layer, call_args, expected_shape, expected_weights, call_kwargs=None):
    """Assert shape, weight count, get_config/from_config round trip and a working gradient step.

    Args:
        layer: an unbuilt layer instance.
        call_args: positional inputs (numpy arrays) for `layer(...)`.
        expected_shape: the output shape.
        expected_weights: number of scalar parameters.
        call_kwargs: extra keyword arguments for the call.
    """
    call_kwargs = call_kwargs or {}
    output = layer(*call_args, **call_kwargs)
    assert tuple(output.shape) == tuple(expected_shape)
    assert sum(int(np.prod(w.shape)) for w in layer.weights) == expected_weights

    clone = layer.__class__.from_config(layer.get_config())
    clone(*call_args, **call_kwargs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(*call_args, **call_kwargs), output, atol=1e-6)
    assert clone.get_config() == layer.get_config()

    with tf.GradientTape() as tape:
        loss = keras.ops.sum(keras.ops.square(layer(*call_args, training=True, **call_kwargs)))
    grads = tape.gradient(loss, layer.trainable_weights)
    assert all(g is not None for g in grads), "every weight must receive a gradient"
    keras.optimizers.SGD(0.1).apply_gradients(zip(grads, layer.trainable_weights))
    assert not np.allclose(layer(*call_args, **call_kwargs), output)
