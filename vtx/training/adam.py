"""Adam (paper section 5.3) with one fused kernel per variable.

Keras's `Adam.update_step` writes the update as ~28 TensorFlow operations per variable (the bias
corrections recomputed for each, then the moments and the weight each in several element-wise
passes). Without XLA every one is a separate kernel launch and pass over memory, a share of a
small model's update on a CPU worth saving (`benchmarks/train_throughput.py`, docs/benchmarks.md).
`tf.raw_ops.ResourceApplyAdam` is TensorFlow's own fused kernel for the same formula
(`training_ops.cc`: alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
v += (g^2 - v)(1 - beta_2); w -= alpha m / (sqrt(v) + epsilon)), with kernels on the CPU, the GPU
and under XLA. The bias corrections are computed once per update and device, not once per
variable.

The optimizer's variables, their order and the checkpoint format are Keras's Adam's unchanged.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf


def resource_handle(variable):
    """The resource handle of a Keras or TensorFlow variable (in an update context, of the
    current device's copy of a mirrored one)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


def _computed_once(flag) -> tf.Tensor:
    """`flag` (a boolean scalar), through a square root XLA computes once. Without it, XLA's
    fusion copies the scalar operations behind it (with one replica: the gradients' sums added
    one by one, `trainer._nonfinite`) into every fusion that reads it, each weight's and moment's
    selection in `FusedAdam.apply_if`, which makes the compiled update several times larger and
    slower to compile than with a branch. XLA removes
    optimisation barriers before fusion, and its algebraic simplifier turns a reduction of
    stacked scalars back into additions; fusion does not copy an expensive operation (a square
    root) into a consumer that reads its element more than once (the selection's broadcast)."""
    return tf.sqrt(tf.cast(flag, tf.float32)) > 0.5  # sqrt(0) = 0, sqrt(1) = 1


class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` (same arguments, state and results; `amsgrad` unsupported) whose
    update is one `ResourceApplyAdam` per float32 variable."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.amsgrad:
            raise ValueError("FusedAdam does not implement amsgrad")

    def build(self, variables):
        """Keras's, for float32 variables only (the kernel's scalars are float32; every vtx
        precision, mixed ones included, keeps its weights in float32)."""
        for variable in variables:
            if variable.dtype != "float32":
                raise ValueError(f"FusedAdam updates float32 variables only; {variable.path} is "
                                 f"{variable.dtype}")
        super().build(variables)

    def _kernel_scalars(self, learning_rate) -> dict:
        """`ResourceApplyAdam`'s scalar arguments for this update (step = iterations + 1)."""
        step = tf.cast(self.iterations + 1, tf.float32)
        beta_1, beta_2 = (tf.constant(b, tf.float32) for b in (self.beta_1, self.beta_2))
        return {"lr": tf.cast(learning_rate, tf.float32), "beta1": beta_1, "beta2": beta_2,
                "beta1_power": tf.pow(beta_1, step), "beta2_power": tf.pow(beta_2, step),
                "epsilon": tf.constant(self.epsilon, tf.float32)}

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        """Keras's (each variable updated on each of its devices, in the cross-replica context),
        with the update's scalars computed once per device rather than once per variable."""
        scalars_on = {}  # device -> the kernel's scalar arguments

        def apply(variable, gradient, learning_rate):
            if variable.device not in scalars_on:
                scalars_on[variable.device] = self._kernel_scalars(learning_rate)
            index = self._get_variable_index(variable)
            return tf.raw_ops.ResourceApplyAdam(
                var=resource_handle(variable), m=resource_handle(self._momentums[index]),
                v=resource_handle(self._velocities[index]), grad=tf.cast(gradient, tf.float32),
                **scalars_on[variable.device])

        for gradient, variable in grads_and_vars:
            distribution.extended.update(variable, apply, args=(gradient, learning_rate),
                                         group=False)

    def apply_if(self, ok, grads, variables) -> None:
        """In a replica context: Adam on `grads` where `ok` (a boolean tensor, the same on every
        replica), else no change at all (weights, moments and `iterations` kept), without a
        branch: the step is computed either way and its results selected. Under XLA on a GPU a
        conditional (`tf.cond`) has the host read its predicate, waiting for the device to
        finish everything before it, so the host could not launch the next update while the
        device computed this one. The same formula as `ResourceApplyAdam`'s. ~10 graph
        operations a variable and device: for a caller compiled by XLA (one replica), which
        makes them one program."""
        ok = _computed_once(ok)
        grads_and_vars = [(grad, variable.value) for grad, variable in zip(grads, variables)]
        # With one replica there is nothing to sum, and no collective is made: in a program
        # XLA compiles, one on GPUs cut into logical ones would be "ring", which XLA refuses.
        if tf.distribute.get_replica_context().num_replicas_in_sync > 1:
            grads_and_vars = self._all_reduce_sum_gradients(grads_and_vars)
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_select_step, self._distribution_strategy, grads_and_vars,
            self.learning_rate, ok)
        self._iterations.assign_add(tf.cast(ok, self._iterations.dtype))

    def apply_flat_if(self, ok, gradients, variables, scale, start: int = 0) -> None:
        """`apply_if` for a caller that XLA does not compile whole (several replicas): in a
        replica context, each replica steps its own copy of every variable in one XLA program.
        `gradients`: one float32 buffer, from its element `start` the variables' gradients
        flattened one after another, already summed across replicas (not summed here),
        multiplied by `scale` (a float32 scalar) in the program.

        The buffer is split into one tensor a variable before the program, by one `Split`,
        which shares the buffer's memory where each part starts 64-byte aligned (`start` and
        the sizes multiples of 16) and copies otherwise. Read at offsets inside the program,
        XLA:CPU would generate a kernel of its own for every variable's fusions, where
        same-shaped variables otherwise share one, and take twice as long to compile."""
        if self._select_program is None:
            self._select_program = tf.function(_select_steps, jit_compile=True, autograph=False)
        # In a replica context a mirrored variable's handle is this replica's copy's: each
        # replica steps its own copy by the same summed gradients, as `extended.update` does.
        slots, shapes = [], []
        for variable in variables:
            index = self._get_variable_index(variable.value)
            slots.append([resource_handle(variable), resource_handle(self._momentums[index]),
                          resource_handle(self._velocities[index])])
            shapes.append(tuple(variable.shape))
        parts = tf.split(gradients, [start] + [math.prod(shape) for shape in shapes])[1:]
        self._select_program(ok, self._select_scalars(self.learning_rate), scale, parts, slots,
                             tuple(shapes))
        self._iterations.assign_add(tf.cast(ok, self._iterations.dtype))

    _select_program = None  # `_select_steps` compiled by XLA, made at the first `apply_flat_if`

    def _select_scalars(self, learning_rate) -> tuple:
        """(alpha, 1 - beta_1, 1 - beta_2, epsilon): `ResourceApplyAdam`'s step size and
        constants for this update."""
        kernel = self._kernel_scalars(learning_rate)
        one = tf.constant(1.0, tf.float32)
        alpha = (kernel["lr"] * tf.sqrt(one - kernel["beta2_power"])
                 / (one - kernel["beta1_power"]))
        return alpha, one - kernel["beta1"], one - kernel["beta2"], kernel["epsilon"]

    def _distributed_select_step(self, distribution, grads_and_vars, learning_rate, ok):
        """The update's scalars once per device, as in `_distributed_tf_update_step`. Computed
        for each variable they would be ~12 graph operations each, a square root among them,
        each translated to XLA again for every batch shape compiled, which lengthens every
        shape's compile; XLA merges the copies, so the result is the same bit for bit."""
        scalars_on = {}  # device -> `_select_scalars`

        def apply(variable, gradient, learning_rate, ok):
            if variable.device not in scalars_on:
                scalars_on[variable.device] = self._select_scalars(learning_rate)
            index = self._get_variable_index(variable)
            return _select_step(ok, scalars_on[variable.device], tf.cast(gradient, tf.float32),
                                [resource_handle(variable), resource_handle(self._momentums[index]),
                                 resource_handle(self._velocities[index])])

        for gradient, variable in grads_and_vars:
            distribution.extended.update(variable, apply, args=(gradient, learning_rate, ok),
                                         group=False)


def _select_step(ok, scalars, gradient, slots):
    """Adam's step of one variable where `ok`, else no change: `slots` are the resource handles
    of the weight and its two moments (float32), `scalars` `FusedAdam._select_scalars`'s.

    The weight's step reads the moments as stored (selected), not the new values before the
    selection: from those, XLA's fusion recomputed each new moment inside the weight's fusion,
    from the old moment, which the moment's own fusion overwrites in place, so XLA would copy
    every moment first (two copies of the model's size an update). Where the step is skipped
    the weight is kept by its own selection."""
    alpha, mix_1, mix_2, epsilon = scalars
    weight, m, v = (tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32) for h in slots)
    new_m = tf.where(ok, m + (gradient - m) * mix_1, m)
    new_v = tf.where(ok, v + (tf.square(gradient) - v) * mix_2, v)
    new_weight = tf.where(ok, weight - new_m * alpha / (tf.sqrt(new_v) + epsilon), weight)
    return tf.group(*[tf.raw_ops.AssignVariableOp(resource=h, value=new)
                      for h, new in zip(slots, (new_weight, new_m, new_v))])


def _select_steps(ok, scalars, scale, gradients, slots, shapes) -> None:
    """`_select_step` of every variable (`slots`: each one's three handles; `shapes`: each
    one's shape) by its gradient (`gradients`: each one's, flattened) times `scale`."""
    for gradient, handles, shape in zip(gradients, slots, shapes):
        _select_step(ok, scalars, tf.reshape(gradient, shape) * scale, handles)
