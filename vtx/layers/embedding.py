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
    """

    def __init__(self, vocab_size: int, d_model: int, embeddings_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=d_model**-0.5)
        )

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, token_ids):
        """[B, T] int ids -> [B, T, D] embeddings times sqrt(D)."""
        vectors = ops.take(ops.cast(self.embeddings, self.compute_dtype), token_ids, axis=0)
        return vectors * ops.cast(math.sqrt(self.d_model), self.compute_dtype)

    def project(self, hidden):
        """[B, T, D] decoder states -> [B, T, V] float32 logits with the transposed matrix."""
        logits = ops.matmul(hidden, ops.transpose(ops.cast(self.embeddings, hidden.dtype)))
        return ops.cast(logits, "float32")

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
