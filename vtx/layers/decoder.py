"""Post-norm Transformer decoder layer with an incremental-decoding step (section 3.1).

Shapes: B batch, T target length, S source length, D model width, H heads, K head width,
M cache length (the longest target the cache holds).
"""

import keras
from keras import ops

from vtx.layers.attention import MultiHeadAttention
from vtx.layers.encoder import EncoderLayer
from vtx.layers.layer_norm import LayerNormalization


def causal_mask(length):
    """bool [1, T, T]: True where key <= query."""
    positions = ops.arange(length)
    return (positions[None, :] <= positions[:, None])[None]


@keras.saving.register_keras_serializable(package="vtx")
class DecoderLayer(EncoderLayer):
    """Causal self-attention, attention over the encoder output, FFN; each post-norm with dropout.

    Same arguments as `EncoderLayer`. `call` runs teacher-forced over a whole target; `step`
    consumes one position using a key/value cache and gives the same result.
    """

    def __init__(self, d_model: int, d_ff: int, num_heads: int, **kwargs):
        super().__init__(d_model, d_ff, num_heads, **kwargs)
        policy = self.dtype_policy
        self.cross_attention = MultiHeadAttention(num_heads, d_model, self.attention_dropout,
                                                  name="cross_attention", dtype=policy)
        self.cross_attention_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="cross_attention_norm", dtype=policy)

    def build(self, input_shape):
        super().build(input_shape)
        self.cross_attention.build(input_shape)
        self.cross_attention_norm.build(input_shape)
        self.built = True

    def _residual(self, norm, x, sublayer_output, training):
        return norm(x + self.dropout(sublayer_output, training=training))

    def _cross_and_feed_forward(self, x, memory_keys, memory_values, memory_mask, training):
        query = self.cross_attention.project_query(x)
        attended = self.cross_attention.attend(query, memory_keys, memory_values, memory_mask,
                                               training=training)
        x = self._residual(self.cross_attention_norm, x, attended, training)
        return self._residual(self.feed_forward_norm, x, self.feed_forward(x, training=training),
                              training)

    def call(self, x, memory, memory_mask=None, training=False, self_mask=None):
        """Teacher-forced pass.

        Args:
            x: [B, T, D] target-side inputs (shifted right).
            memory: [B, S, D] encoder output. memory_mask: bool [B, 1, S], True on real tokens
                (or [B, T, S]: packed rows, each position seeing its own pair's source).
            self_mask: bool [B, T, T] for the self-attention, causal already (packed rows);
                None: causal over the whole row.

        Returns:
            [B, T, D].
        """
        if self_mask is None:
            self_mask = causal_mask(ops.shape(x)[1])
        attended = self.self_attention(x, x, self_mask, training=training)
        x = self._residual(self.attention_norm, x, attended, training)
        memory_keys, memory_values = self.cross_attention.project_key_value(memory)
        return self._cross_and_feed_forward(x, memory_keys, memory_values, memory_mask, training)

    def project_memory(self, memory):
        """Cross-attention keys and values of the encoder output, each [B, H, S, K]: once a sentence."""
        return self.cross_attention.project_key_value(memory)

    def step(self, x, index, self_keys, self_values, memory_keys, memory_values, memory_mask,
             grow: bool = False, fused_query_key_value=None, grouped_visible=None):
        """One decoding position (inference: no dropout), as `call` computes it at `index`.

        Args:
            x: [B, D] input at position `index`, one row per hypothesis (a matrix: every dense
                layer is then one plain matrix product).
            index: int32 scalar, the position being decoded.
            self_keys, self_values: [B, H, M, K] cache of the earlier positions (M > index); with
                `grow`, [B, H, index, K], to which this position is appended.
            memory_keys, memory_values: [B', H, S, K] from `project_memory`, memory_mask
                [B', 1, S], with B' = B / G: the rows of x are G consecutive hypotheses per
                sentence (a beam search's K beams, which share their sentence's memory: it is
                held once, not once per beam), G = 1 otherwise.
            fused_query_key_value: the self-attention's `fused_query_key_value()`, built once
                outside the decoding loop (built at each call when None).
            grouped_visible: bool [B', G, M * G] for a grouped cache (self_keys, self_values
                [B', H, M * G, K]: position t's G slots, t * G to t * G + G - 1, written by the
                G hypotheses of step t, `Transformer.init_state(group=G)`): what each
                hypothesis may attend to, its own prefix's slots up to `index`. This position
                is written into slot r mod G of row r's sentence.

        Returns:
            (output [B, D], updated self_keys, updated self_values).
        """
        attention = self.self_attention
        # [B, H, 1, K] each
        query, new_keys, new_values = attention.project_rows(x, fused_query_key_value)
        new_keys = ops.cast(new_keys, self_keys.dtype)
        new_values = ops.cast(new_values, self_values.dtype)
        if grouped_visible is not None:
            sentences, heads, _, width = ops.shape(self_keys)
            group = ops.shape(grouped_visible)[1]

            def by_sentence(rows):  # [B' * G, H, 1, K] -> [B', H, G, K]
                return ops.transpose(ops.reshape(rows, (sentences, group, heads, width)),
                                     (0, 2, 1, 3))

            if grow:
                self_keys = ops.concatenate([self_keys, by_sentence(new_keys)], axis=2)
                self_values = ops.concatenate([self_values, by_sentence(new_values)], axis=2)
            else:  # in place under XLA (a 5-D cache read through a reshape is copied whole)
                start = (0, 0, index * group, 0)
                self_keys = ops.slice_update(self_keys, start, by_sentence(new_keys))
                self_values = ops.slice_update(self_values, start, by_sentence(new_values))
            context = attention.context(by_sentence(query), self_keys, self_values,
                                        grouped_visible)
            return self._after_self_attention(x, context, memory_keys, memory_values,
                                              memory_mask), self_keys, self_values
        if grow:
            self_keys = ops.concatenate([self_keys, new_keys], axis=2)
            self_values = ops.concatenate([self_values, new_values], axis=2)
            visible = None  # every cached position is an earlier one
        else:
            start = (0, 0, index, 0)
            self_keys = ops.slice_update(self_keys, start, new_keys)
            self_values = ops.slice_update(self_values, start, new_values)
            visible = (ops.arange(ops.shape(self_keys)[2]) <= index)[None, None, :]  # [1, 1, M]
        context = attention.context(query, self_keys, self_values, visible)
        return self._after_self_attention(x, context, memory_keys, memory_values,
                                          memory_mask), self_keys, self_values

    def _after_self_attention(self, x, context, memory_keys, memory_values, memory_mask):
        """A decoding step from the self-attention's context [B or B', H, 1 or G, K] on: its
        output projection and residual, the cross-attention and the feed-forward -> [B, D]."""
        x = self.attention_norm(x + self.self_attention.output_rows(context))
        # A sentence's G hypotheses as G query positions over its one memory.
        cross = self.cross_attention
        query = cross.query_groups(x, ops.shape(memory_keys)[0])  # [B', H, G, K]
        context = cross.context(query, memory_keys, memory_values, memory_mask)
        x = self.cross_attention_norm(x + cross.output_rows(context))
        return self.feed_forward_norm(x + self.feed_forward(x))
