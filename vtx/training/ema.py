"""An exponential moving average (EMA) of the weights (`vtx train --ema-decay`), kept on the
devices beside the weights and updated inside the compiled update: no weight leaves the device
for it.

After update t (counted by Adam's step count, so a skipped update changes nothing):
ema = d * ema + (1 - d) * weights, with d the decay, or 0 for t <= `--ema-start-step` (the
EMA then follows the weights). Every replica holds its own copy of each average, as of each
weight, and steps it from its own copy of the weights: the replicas' weights are equal, so are
their averages, and the update needs no collective for it.

Checkpoints keep the averages (`vtx.checkpoints.Checkpoint.ema`); `vtx translate`, `parse`,
`average-checkpoints` and `export` use them with `--ema`.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from vtx.training.adam import resource_handle


class WeightAverage:
    """The EMA of `weights` on the devices of `strategy`.

    Args:
        weights: the model's float32 trainable variables, in the model's variable order.
        decay: d in [0, 1).
        start_step: updates up to this one set the EMA to the weights.
        strategy: the run's devices; the averages are created in its scope (one copy a
            replica).
        jit_compile: under XLA each replica's step is one XLA program (within the update's
            program where the whole update is one); else a few graph operations a variable.

    Attributes:
        variables: the averages, one a weight, in the order of `weights`.
    """

    def __init__(self, weights: list, decay: float, start_step: int,
                 strategy: tf.distribute.Strategy, jit_compile: bool):
        self.weights, self.decay, self.start_step = weights, decay, start_step
        self.strategy = strategy
        with strategy.scope():
            self.variables = [tf.Variable(tf.zeros(weight.shape, tf.float32), trainable=False,
                                          name=f"ema_{index}")
                              for index, weight in enumerate(weights)]
        self._steps = (tf.function(_ema_steps, jit_compile=True, autograph=False) if jit_compile
                       else _ema_steps)
        self._copy = tf.function(lambda: strategy.run(self._copy_replica), autograph=False)
        self._swap = tf.function(lambda: strategy.run(self._swap_replica), autograph=False)
        self.follow_weights()

    def update(self, ok, iterations) -> None:
        """In the update's cross-replica context: one step of the EMA where `ok` (a boolean
        scalar: Adam stepped), `iterations` Adam's step count after the update."""
        decay = tf.where(iterations > self.start_step, tf.constant(self.decay, tf.float32),
                         tf.constant(0.0, tf.float32))
        self.strategy.run(self._update_replica, args=(ok, decay))

    def _handles(self) -> tuple[list, list]:
        """(the weights', the averages') resource handles of this replica's copies."""
        return ([resource_handle(weight) for weight in self.weights],
                [resource_handle(average) for average in self.variables])

    def _update_replica(self, ok, decay):
        self._steps(ok, decay, *self._handles())

    def _copy_replica(self):
        for weight, average in zip(*self._handles()):
            tf.raw_ops.AssignVariableOp(resource=average, value=_read(weight))

    def _swap_replica(self):
        for weight, average in zip(*self._handles()):
            weights, averages = _read(weight), _read(average)
            tf.raw_ops.AssignVariableOp(resource=weight, value=averages)
            tf.raw_ops.AssignVariableOp(resource=average, value=weights)

    def follow_weights(self) -> None:
        """Set the EMA to the weights (a new run's, or loaded ones)."""
        self._copy()

    @contextlib.contextmanager
    def swapped(self):
        """Within it the model holds the EMA's weights, the averages the weights; both back as
        they were after it (a swap, exact), whatever ends it."""
        self._swap()
        try:
            yield
        finally:
            self._swap()

    def arrays(self) -> list:
        """The averages as NumPy arrays (a replica's copy: all are equal)."""
        return [average.numpy() for average in self.variables]

    def assign(self, arrays: list) -> None:
        """Load the averages (every replica's copy) from `arrays`, in the order of `weights`."""
        for average, array in zip(self.variables, arrays):
            average.assign(array)


def _read(handle) -> tf.Tensor:
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)


def _ema_steps(ok, decay, weights, averages) -> None:
    """ema = decay * ema + (1 - decay) * weight for each pair of resource handles where `ok`,
    else ema kept; with decay 0 the product leaves the weight exactly."""
    for weight, average in zip(weights, averages):
        value = _read(average)
        stepped = decay * value + (1.0 - decay) * _read(weight)
        tf.raw_ops.AssignVariableOp(resource=average, value=tf.where(ok, stepped, value))
