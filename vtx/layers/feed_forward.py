"""Position-wise feed-forward network FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3).

Shapes: B batch, T length, D model width, F inner width.
"""

import keras

from vtx.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="vtx")
class FeedForward(keras.layers.Layer):
    """Two dense layers with a ReLU between, and optional dropout after the ReLU.

    Args:
        d_model: D, input and output width.
        d_ff: F, inner width.
        relu_dropout: dropout rate on the ReLU activations (paper: 0).
    """

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.d_ff, self.relu_dropout = d_model, d_ff, relu_dropout
        self.inner = keras.layers.Dense(d_ff, activation="relu", name="inner", dtype=self.dtype_policy)
        self.outer = keras.layers.Dense(d_model, name="outer", dtype=self.dtype_policy)
        self.dropout = Dropout(relu_dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.d_ff))
        self.built = True

    def call(self, x, training=False):
        """[B, T, D] -> [B, T, D]."""
        return self.outer(self.dropout(self.inner(x), training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "relu_dropout": self.relu_dropout,
        }
