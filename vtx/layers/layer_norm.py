"""Layer normalization (Ba et al., 2016) over the last axis, with its gradient written out.

Keras's `LayerNormalization` on TensorFlow is `tf.nn.moments` and a few element-wise operations,
which TensorFlow differentiates into ~30 operations per norm and pass (forward and backward), a
share of a small model's update on a CPU worth saving (`benchmarks/train_throughput.py`,
docs/benchmarks.md). Here the forward pass is Keras's own operations (the same outputs to the
bit, so inference is unchanged) and the backward pass the closed form: with x^ the normalized
input, inv = 1 / sqrt(var + epsilon) and g = dy * gamma,
    dx = inv * (g - mean(g) - x^ * mean(g * x^)),  dgamma = sum(dy * x^),  dbeta = sum(dy).

Shapes: [..., D], normalized over D.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="vtx")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and outputs) whose gradient
    is computed in closed form; other axes, RMS scaling or no center/scale fall back to Keras."""

    def call(self, inputs):
        axes = list(self.axis) if isinstance(self.axis, (list, tuple)) else [self.axis]
        if axes != [-1] or self.rms_scaling or not (self.center and self.scale):
            return super().call(inputs)
        outputs = _normalize(tf.cast(inputs, tf.float32), tf.cast(self.gamma, tf.float32),
                             tf.cast(self.beta, tf.float32), self.epsilon)
        return tf.cast(outputs, self.compute_dtype)


def _normalize(x, gamma, beta, epsilon: float):
    """Layer-normalized `x` [..., D] (float32), scaled by gamma [D] and shifted by beta [D]."""

    @tf.custom_gradient
    def forward(x, gamma, beta):
        mean, variance = tf.nn.moments(x, [-1], keepdims=True)  # each [..., 1]
        inv = tf.math.rsqrt(variance + epsilon)
        scaled_inv = inv * gamma
        # Keras's formula, term for term: x * (inv * gamma) + (-mean * inv * gamma + beta).
        outputs = x * scaled_inv + (-mean * scaled_inv + beta)

        def gradient(upstream):
            normalized = (x - mean) * inv
            rows = tf.range(tf.rank(x) - 1)  # every axis but D
            scaled = upstream * gamma
            d_x = inv * (scaled - tf.reduce_mean(scaled, -1, keepdims=True)
                         - normalized * tf.reduce_mean(scaled * normalized, -1, keepdims=True))
            return (d_x, tf.reduce_sum(upstream * normalized, rows),
                    tf.reduce_sum(upstream, rows))

        return outputs, gradient

    return forward(x, gamma, beta)
