"""Multi-head scaled dot-product attention with masks and a key/value cache (section 3.2).

Shapes: B batch, T query length, S key length, D model width, H heads, K head width (D / H).
Masks are boolean, True where a query may attend: [B, 1, S] (padding) or [B, T, S] (causal).
"""

import math

import keras
from keras import ops

from vtx.layers.dropout import Dropout

# Added to masked scores in float32; exp() of it underflows to exactly 0.
_MASK_VALUE = -1e9


@keras.saving.register_keras_serializable(package="vtx")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(K)) V over H heads, then an output projection.

    The softmax runs in float32 whatever the compute dtype. Keys and values can be projected once
    (`project_key_value`) and reused: the decoder caches them for cross-attention and grows its
    self-attention cache one position a step.

    Args:
        num_heads: H.
        d_model: D; each head has width D / H.
        attention_dropout: dropout on the attention weights (paper: 0).
    """

    def __init__(self, num_heads: int, d_model: int, attention_dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.d_model = num_heads, d_model
        self.head_dim = d_model // num_heads
        self.attention_dropout = attention_dropout
        dense = lambda name: keras.layers.Dense(d_model, name=name, dtype=self.dtype_policy)
        self.query_dense, self.key_dense = dense("query"), dense("key")
        self.value_dense, self.output_dense = dense("value"), dense("output")
        self.dropout = Dropout(attention_dropout, dtype=self.dtype_policy)

    def build(self, query_shape, memory_shape=None):
        for layer in (self.query_dense, self.key_dense, self.value_dense, self.output_dense):
            layer.build(query_shape)
        self.built = True

    def _split_heads(self, x):
        """[B, L, D] -> [B, H, L, K]: heads first, so that a cache of keys and values is read by
        batched matrix products without a transpose at every decoding step."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def _scaled(self, query_heads):
        return query_heads * ops.cast(1.0 / math.sqrt(self.head_dim), self.compute_dtype)

    def project_query(self, query):
        """[B, T, D] -> [B, H, T, K], already scaled by 1/sqrt(K)."""
        return self._scaled(self._split_heads(self.query_dense(query)))

    def project_key_value(self, memory):
        """[B, S, D] -> keys, values, each [B, H, S, K]."""
        return self._split_heads(self.key_dense(memory)), self._split_heads(self.value_dense(memory))

    def context(self, query_heads, keys, values, mask=None, training=False):
        """The attention-weighted average of the values, per head.

        Args:
            query_heads: [B, H, T, K] from `project_query` (or `project_rows`, `query_groups`).
            keys, values: [B, H, S, K] from `project_key_value` (or a cache).
            mask: bool [B, 1 or T, S], True = may attend; None attends everywhere.

        Returns:
            [B, H, T, K].
        """
        scores = ops.einsum("bhtk,bhsk->bhts", query_heads, keys)  # [B, H, T, S]
        scores = ops.cast(scores, "float32")
        if mask is not None:
            scores = ops.where(mask[:, None, :, :], scores, _MASK_VALUE)
        weights = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        weights = self.dropout(weights, training=training)
        return ops.einsum("bhts,bhsk->bhtk", weights, values)

    def attend(self, query_heads, keys, values, mask=None, training=False):
        """Attention of projected queries over projected keys/values (`context` and the output
        projection): [B, H, T, K] queries -> [B, T, D]."""
        context = self.context(query_heads, keys, values, mask, training)
        context = ops.transpose(context, (0, 2, 1, 3))  # [B, T, H, K]
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        return self.output_dense(ops.reshape(context, (batch, length, self.d_model)))

    # Decoding: one position per row, as [N, D] matrices. A dense layer on a matrix is one matrix
    # product (on [N, 1, D] Keras adds a dozen reshaping ops), which matters at every step.

    def fused_query_key_value(self):
        """The query (scaled by 1/sqrt(K)), key and value projections side by side, in the
        compute dtype: (kernel [D, 3D], bias [3D]). Build it once, outside a decoding loop, and
        pass it to `project_rows`: one matrix product then does the three projections."""
        scale = 1.0 / math.sqrt(self.head_dim)
        dense = (self.query_dense, self.key_dense, self.value_dense)
        kernel = ops.concatenate([dense[0].kernel * scale, dense[1].kernel, dense[2].kernel],
                                 axis=1)
        bias = ops.concatenate([dense[0].bias * scale, dense[1].bias, dense[2].bias], axis=0)
        return ops.cast(kernel, self.compute_dtype), ops.cast(bias, self.compute_dtype)

    def project_rows(self, x, fused=None):
        """[N, D], one position per row -> query (scaled by 1/sqrt(K)), key, value, each
        [N, H, 1, K], by one matrix product with `fused` (from `fused_query_key_value`; built
        here when None) and a reshape, no transpose."""
        kernel, bias = self.fused_query_key_value() if fused is None else fused
        projected = ops.reshape(ops.matmul(x, kernel) + bias,
                                (-1, 3 * self.num_heads, 1, self.head_dim))
        return ops.split(projected, 3, axis=1)

    def query_groups(self, x, groups):
        """[N, D] rows, G = N / groups consecutive ones per group -> queries [groups, H, G, K]
        (scaled): each group's rows as the query positions of one attention (a sentence's beams
        over the sentence's memory)."""
        x = ops.reshape(self.query_dense(x), (groups, -1, self.num_heads, self.head_dim))
        return self._scaled(ops.transpose(x, (0, 2, 1, 3)))

    def output_rows(self, context):
        """[B, H, T, K] context -> [B * T, D] (row b * T + t), projected."""
        if context.shape[2] != 1:
            context = ops.transpose(context, (0, 2, 1, 3))  # [B, T, H, K]
        return self.output_dense(ops.reshape(context, (-1, self.d_model)))

    def call(self, query, memory, mask=None, training=False):
        """Full (uncached) attention of `query` [B, T, D] over `memory` [B, S, D] -> [B, T, D]."""
        keys, values = self.project_key_value(memory)
        return self.attend(self.project_query(query), keys, values, mask, training)

    def compute_output_shape(self, query_shape, memory_shape=None):
        return query_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_model": self.d_model,
            "attention_dropout": self.attention_dropout,
        }
