"""Post-norm Transformer encoder layer (section 3.1).

Shapes: B batch, S source length, D model width.
"""

import keras

from vtx.layers.attention import MultiHeadAttention
from vtx.layers.dropout import Dropout
from vtx.layers.feed_forward import FeedForward
from vtx.layers.layer_norm import LayerNormalization


@keras.saving.register_keras_serializable(package="vtx")
class EncoderLayer(keras.layers.Layer):
    """x = LayerNorm(x + Dropout(SelfAttention(x))); x = LayerNorm(x + Dropout(FFN(x))).

    Args:
        d_model, d_ff, num_heads: D, F, H.
        dropout: P_drop on each sub-layer output before the residual sum.
        attention_dropout: on attention weights. relu_dropout: inside the FFN.
        layer_norm_epsilon: LayerNorm's epsilon.
        activation: the FFN's (`FeedForward`).
    """

    def __init__(self, d_model: int, d_ff: int, num_heads: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, relu_dropout: float = 0.0,
                 layer_norm_epsilon: float = 1e-6, activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.d_ff, self.num_heads = d_model, d_ff, num_heads
        self.dropout_rate, self.attention_dropout = dropout, attention_dropout
        self.relu_dropout, self.layer_norm_epsilon = relu_dropout, layer_norm_epsilon
        self.activation = activation
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(num_heads, d_model, attention_dropout,
                                                 name="self_attention", dtype=policy)
        self.feed_forward = FeedForward(d_model, d_ff, relu_dropout, activation,
                                        name="feed_forward", dtype=policy)
        self.attention_norm = LayerNormalization(epsilon=layer_norm_epsilon,
                                                 name="attention_norm", dtype=policy)
        self.feed_forward_norm = LayerNormalization(epsilon=layer_norm_epsilon,
                                                    name="feed_forward_norm", dtype=policy)
        self.dropout = Dropout(dropout, dtype=policy)

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.feed_forward.build(input_shape)
        self.attention_norm.build(input_shape)
        self.feed_forward_norm.build(input_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=False):
        """[B, S, D], bool padding mask [B, 1, S] -> [B, S, D]."""
        attended = self.self_attention(x, x, padding_mask, training=training)
        x = self.attention_norm(x + self.dropout(attended, training=training))
        transformed = self.feed_forward(x, training=training)
        return self.feed_forward_norm(x + self.dropout(transformed, training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "num_heads": self.num_heads,
            "dropout": self.dropout_rate,
            "attention_dropout": self.attention_dropout,
            "relu_dropout": self.relu_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation": self.activation,
        }
