"""vtx's Transformer as a keras-hub Backbone: encoder and decoder states from token ids.

Shapes: B batch, S source length, T target length, D model width.
"""

from __future__ import annotations

import keras
from keras import ops
from keras_hub.models import Backbone

from vtx.config import PAD_ID, ModelConfig
from vtx.models.transformer import Transformer


class _SequenceStates(keras.layers.Layer):
    """The functional graph's one step: a vtx Transformer's encoder output and decoder states
    (before the projection onto the vocabulary). Positions whose padding mask is False are
    read as PAD, vtx's own mask."""

    def __init__(self, transformer: Transformer, **kwargs):
        super().__init__(**kwargs)
        self.transformer = transformer

    def call(self, inputs):
        source = ops.where(ops.cast(inputs["encoder_padding_mask"], "bool"),
                           inputs["encoder_token_ids"], PAD_ID)  # [B, S]
        target = ops.where(ops.cast(inputs["decoder_padding_mask"], "bool"),
                           inputs["decoder_token_ids"], PAD_ID)  # [B, T]
        memory, memory_mask = self.transformer.encode(source)
        return {"encoder_sequence_output": memory,  # [B, S, D]
                "decoder_sequence_output": self.transformer.decode(target, memory, memory_mask)}


@keras.saving.register_keras_serializable(package="vtx")
class TransformerBackbone(Backbone):
    """The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017,
    section 3): vtx's own model (`vtx.models.transformer.Transformer`, `self.transformer`),
    post-norm, sinusoidal positions, one embedding matrix scaled by sqrt(D).

    Inputs: a dict of int "encoder_token_ids" [B, S], "encoder_padding_mask" [B, S],
    "decoder_token_ids" [B, T] and "decoder_padding_mask" [B, T] (the decoder's start with
    `<s>`, id 2). Outputs: a dict of "encoder_sequence_output" [B, S, D] and
    "decoder_sequence_output" [B, T, D].

    Args:
        vocabulary_size: V, the joint source-target vocabulary.
        num_layers: N, layers of each stack.
        hidden_dim: D.
        intermediate_dim: the feed-forward network's inner width.
        num_heads: attention heads.
        dropout: on sub-layer outputs and embedding sums. attention_dropout: on attention
            weights. relu_dropout: inside the feed-forward network.
        max_sequence_length: the longest source or target the model accepts.
        layer_norm_epsilon: the layer norms' epsilon.
        dtype: a Keras dtype policy name.
    """

    def __init__(self, vocabulary_size: int, num_layers: int, hidden_dim: int,
                 intermediate_dim: int, num_heads: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, relu_dropout: float = 0.0,
                 max_sequence_length: int = 1024, layer_norm_epsilon: float = 1e-6,
                 dtype=None, **kwargs):
        config = ModelConfig(vocab_size=vocabulary_size, num_layers=num_layers,
                             d_model=hidden_dim, d_ff=intermediate_dim, num_heads=num_heads,
                             dropout=dropout, attention_dropout=attention_dropout,
                             relu_dropout=relu_dropout, max_positions=max_sequence_length,
                             layer_norm_epsilon=layer_norm_epsilon)
        self.transformer = Transformer(config, dtype=dtype, name="transformer")
        self.transformer.build()
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ("encoder_token_ids", "encoder_padding_mask",
                               "decoder_token_ids", "decoder_padding_mask")}
        outputs = _SequenceStates(self.transformer, dtype=dtype, name="sequence_states")(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.model_config = config

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs) -> "TransformerBackbone":
        """A backbone of vtx model configuration `config` (random weights)."""
        return cls(vocabulary_size=config.vocab_size, num_layers=config.num_layers,
                   hidden_dim=config.d_model, intermediate_dim=config.d_ff,
                   num_heads=config.num_heads, dropout=config.dropout,
                   attention_dropout=config.attention_dropout,
                   relu_dropout=config.relu_dropout, max_sequence_length=config.max_positions,
                   layer_norm_epsilon=config.layer_norm_epsilon, **kwargs)

    def get_config(self):
        config = self.model_config
        return {**super().get_config(), "vocabulary_size": config.vocab_size,
                "num_layers": config.num_layers, "hidden_dim": config.d_model,
                "intermediate_dim": config.d_ff, "num_heads": config.num_heads,
                "dropout": config.dropout, "attention_dropout": config.attention_dropout,
                "relu_dropout": config.relu_dropout,
                "max_sequence_length": config.max_positions,
                "layer_norm_epsilon": config.layer_norm_epsilon}
