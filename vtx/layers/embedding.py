"""One embedding matrix shared by source, target and the pre-softmax projection (section 3.4).

Shapes: B batch, T length, D model width, V vocabulary.
"""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="vtx")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding multiplied by sqrt(D); `project` reuses the same matrix for the logits.

    Args:
        vocab_size: V.
        d_model: D.
        embeddings_initializer: defaults to N(0, D^-0.5), so scaled embeddings start at unit scale.
        scale: multiply the embeddings by sqrt(D) (the paper's, Marian's `scale_embedding`).
        logits_bias: `project` adds a learned bias [V] (initially zero) to the logits, as
            Marian's output layer (Transformers' `final_logits_bias`).
    """

    def __init__(self, vocab_size: int, d_model: int, embeddings_initializer=None,
                 scale: bool = True, logits_bias: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale, self.logits_bias = scale, logits_bias
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=d_model**-0.5)
        )

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        if self.logits_bias:
            self.bias = self.add_weight(name="logits_bias", shape=(self.vocab_size,),
                                        initializer="zeros")
        self.built = True

    def call(self, token_ids):
        """[B, T] int ids -> [B, T, D] embeddings (times sqrt(D) with `scale`)."""
        vectors = ops.take(ops.cast(self.embeddings, self.compute_dtype), token_ids, axis=0)
        if not self.scale:
            return vectors
        return vectors * ops.cast(math.sqrt(self.d_model), self.compute_dtype)

    def project(self, hidden):
        """[B, T, D] decoder states -> [B, T, V] float32 logits with the transposed matrix
        (plus the bias in float32, with `logits_bias`)."""
        logits = ops.matmul(hidden, ops.transpose(ops.cast(self.embeddings, hidden.dtype)))
        logits = ops.cast(logits, "float32")
        return logits + ops.cast(self.bias, "float32") if self.logits_bias else logits

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "scale": self.scale,
            "logits_bias": self.logits_bias,
        }
