"""Position-wise feed-forward network FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3), or
with swish (x sigmoid(x), Marian's) or the exact GELU in place of the ReLU.

Shapes: B batch, T length, D model width, F inner width.
"""

import keras

from vtx.layers.dropout import Dropout

# Keras's names: "silu" is x * sigmoid(x); "gelu" defaults to the exact erf form (PyTorch's
# `nn.GELU()`, Transformers' "gelu").
_KERAS_ACTIVATIONS = {"relu": "relu", "swish": "silu", "gelu": "gelu"}


@keras.saving.register_keras_serializable(package="vtx")
class FeedForward(keras.layers.Layer):
    """Two dense layers with an activation between, and optional dropout after it.

    Args:
        d_model: D, input and output width.
        d_ff: F, inner width.
        relu_dropout: dropout rate on the inner activations (paper: 0).
        activation: "relu" (the paper's), "swish" or "gelu" (`vtx.config.ACTIVATIONS`).
    """

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float = 0.0,
                 activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        if activation not in _KERAS_ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(_KERAS_ACTIVATIONS)}, "
                             f"got {activation!r}")
        self.d_model, self.d_ff, self.relu_dropout = d_model, d_ff, relu_dropout
        self.activation = activation
        self.inner = keras.layers.Dense(d_ff, activation=_KERAS_ACTIVATIONS[activation],
                                        name="inner", dtype=self.dtype_policy)
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
            "activation": self.activation,
        }
