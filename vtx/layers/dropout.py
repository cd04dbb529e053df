"""Dropout whose mask costs half the random numbers: 16 random bits an element, not 32.

Keras's `Dropout` on TensorFlow draws one 32-bit uniform float an element
(`tf.nn.experimental.stateless_dropout`; its bfloat16 draw is no faster), and the Philox
generator behind it is most of dropout's cost. Here each 32-bit draw gives two elements their
masks, its low and high 16 bits each compared with rate * 65536, which makes the mask cheaper
than Keras's draw alone and a small model's training update faster, with XLA and without
(`benchmarks/train_throughput.py`, docs/benchmarks.md). The drop probability is then that
threshold over 65536 (0.1 -> 6554 / 65536 = 0.100006), and kept elements are scaled by the
exact inverse of their keep probability, so the expected output is the input, as in Keras.
"""

import keras
import tensorflow as tf

_LEVELS = 1 << 16  # values of a 16-bit draw


@keras.saving.register_keras_serializable(package="vtx")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments and seed generator, no weights) with the 16-bit
    mask above; a `noise_shape` or a rate of 1 falls back to Keras."""

    def call(self, inputs, training=False):
        threshold = round(self.rate * _LEVELS)
        if not training or threshold == 0 or threshold >= _LEVELS or self.noise_shape is not None:
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        # As Keras's TensorFlow backend casts it: stateless ops under XLA take int32 seeds.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        return _drop(inputs, threshold, replica_seed(seed))


def replica_seed(seed):
    """`seed` (int32 [2]) made this replica's own inside `strategy.run` over several replicas,
    unchanged elsewhere. The seed generator's state is a mirrored variable and every worker sets
    the same global seed, so without it every replica of every worker would drop the same units
    of the same positions; `replica_id_in_sync_group` counts the replicas of every worker
    (MultiWorkerMirroredStrategy: worker index * local replicas + local id). A run of one replica
    keeps its masks, a run of several stays reproducible."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return seed
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return tf.random.experimental.stateless_fold_in(seed, replica)


def dropout_mask(shape, threshold: int, seed) -> tf.Tensor:
    """Boolean `shape` mask, each element kept (True) with probability 1 - threshold / 65536,
    from ceil(size / 2) 32-bit Philox draws of `seed` (int32 [2])."""
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                       dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    return tf.reshape(halves >= tf.constant(threshold, tf.uint16), shape)


def _drop(inputs, threshold: int, seed):
    keep = dropout_mask(tf.shape(inputs), threshold, seed)
    scale = tf.cast(_LEVELS / (_LEVELS - threshold), inputs.dtype)
    return tf.where(keep, inputs * scale, tf.zeros_like(inputs))
