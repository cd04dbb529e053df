"""The device side of training: model, optimizer and the compiled update, with gradient
accumulation over micro-batches and replicas in a custom `strategy.run` step (paper section 5).

`vtx.training.trainer.Trainer` joins it with the checkpointer (`checkpointing.py`), the shape
compiler (`compiling.py`) and the host loop (`loop.py`); the cross-worker collectives are
`distribute.py`'s.

Shapes: B batch, S source length, T target length, V vocabulary.

One update ("step") = `update_freq` micro-batches on every replica. Gradients are accumulated
unnormalised (sum over tokens) in per-replica variables and divided by the number of non-pad target
tokens over all replicas and micro-batches, so 1 replica x 8 micro-batches and 8 replicas x 1
micro-batch train the same model; the last micro-batch's gradients go to Adam without being
stored (with `update_freq` 1 there are no accumulators). A non-finite loss skips the update (the
accumulators are cleared) and is counted by the loop; too many in a row stop training.
"""

from __future__ import annotations

import collections
import contextlib
from pathlib import Path
from typing import Iterable

import keras
import numpy as np
import tensorflow as tf

from vtx.config import PAD_ID, ModelConfig, TrainConfig
from vtx.data.batching import format_shape
from vtx.data.packing import PACKED_KEYS
from vtx.errors import TrainingError, out_of_device_memory
from vtx.models import transformer
from vtx.training.adam import FusedAdam
from vtx.training.distribute import SUM, Collectives, Topology
from vtx.training.ema import WeightAverage
from vtx.training.loss import label_smoothed_loss
from vtx.training.schedule import TransformerSchedule, cooldown_factor, paper_learning_rate
from vtx.training.stream import BatchStream, PrefetchedStream


def make_optimizer(train_config: TrainConfig,
                   schedule: TransformerSchedule) -> keras.optimizers.Optimizer:
    """Adam(0.9, 0.98, 1e-9) on `schedule`; loss-scaled for float16."""
    optimizer = FusedAdam(schedule, beta_1=train_config.adam_beta_1,
                          beta_2=train_config.adam_beta_2, epsilon=train_config.adam_epsilon)
    if train_config.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


# With several replicas under XLA, the elements before the gradients in a replica's buffer
# (`UpdateEngine._weighted_gradients`): its loss sums, then zeros up to 64 bytes, so that every
# gradient whose size is a multiple of 16 starts 64-byte aligned, and TensorFlow's `Split`
# (`FusedAdam.apply_flat_if`) hands Adam views of the buffer instead of copies.
_HEADER = 16


def _float32(grad) -> tf.Tensor:
    """A gradient as a dense float32 tensor (the embedding's may come as IndexedSlices)."""
    return tf.cast(tf.convert_to_tensor(grad), tf.float32)


def _nonfinite(grads) -> tf.Tensor:
    """1.0 when an element of the float32 `grads` is inf or NaN, else 0.0. One sum per tensor
    (a non-finite element makes it non-finite) instead of an elementwise test: finite gradients
    whose sum overflows float32 (beyond 3e38) would count too, an update diverged anyway."""
    return 1.0 - tf.cast(tf.math.is_finite(tf.add_n([tf.reduce_sum(grad) for grad in grads])),
                         tf.float32)


def _sum_across_replicas(value: tf.Tensor) -> tf.Tensor:
    """In a replica context: `value` summed over every replica of the run. With one replica it
    is `value` itself, and no collective is made: XLA compiles the whole update of one replica
    (`UpdateEngine`), and in a compiled program MirroredStrategy on GPUs makes its collective
    without a merge call, with the implementation it chose when made; on GPUs cut into logical
    ones that is "ring", which XLA's GPU backend refuses (it compiles NCCL's and "auto" only)."""
    context = tf.distribute.get_replica_context()
    if context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(SUM, value)


def _any_shape(value) -> tf.TypeSpec:
    """The type of `value` (an array, tensor or distributed value) with every dimension unknown."""
    spec = getattr(value, "_type_spec", None)  # a distributed value's (PerReplicaSpec)
    if spec is None:
        spec = tf.type_spec_from_value(tf.convert_to_tensor(value))
    return spec._with_tensor_ranks_only()  # each dimension None, each rank kept


# TensorFlow names every traced function after a process-wide counter (`ops.uid`), and its
# persistent XLA cache keys a program by the function's name and by its HLO, which holds the names
# of the functions inside it. A resumed run reaches the update's trace after another count of
# traces than the run it continues, so each of its programs would get other names and be compiled
# again. Traced from the next multiple of this block, a run's update gets the same names whatever
# came before it, as long as that stayed within the same block (a fresh process traces a few
# thousand names before the update, far fewer than the block).
_TRACE_NAME_BLOCK = 1 << 20


def _align_trace_names() -> None:
    """Advance TensorFlow's name counter to the next multiple of `_TRACE_NAME_BLOCK` (~0.15 s)."""
    from tensorflow.python.framework import ops  # private: the counter has no public setter

    for _ in range(-ops.uid() % _TRACE_NAME_BLOCK):
        ops.uid()


def _empty_batch() -> dict:
    """A batch of one pad token: contributes no loss and no tokens (fills idle replicas)."""
    pad = np.full((1, 1), PAD_ID, np.int32)
    return {"source": pad, "target_in": pad, "target_out": pad}

class UpdateEngine:
    """The device side of one run: the model, the optimizer, the accumulators and the compiled
    update, accumulation and evaluation; `start_update` launches an update, `read_update` waits
    for its sums.

    Args:
        model_config, train_config: what to train and how (`train_config.precision` resolved:
            never `auto`).
        strategy, topology, collectives: the devices and workers (`vtx.training.distribute`).
        prefetch: the batches a `PrefetchedStream` keeps on the devices, for the advice of an
            out-of-memory error.
    """

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig,
                 strategy: tf.distribute.Strategy, topology: Topology, collectives: Collectives,
                 prefetch: int = 2):
        self.model_config, self.config = model_config, train_config
        self.strategy, self.topology, self.collectives = strategy, topology, collectives
        self.prefetch = prefetch
        # (checkpoint, packed batch shapes) of a resumed packed run, whose shapes --max-tokens
        # cannot change: an out-of-memory error then says so (`out_of_memory`).
        self._resumed_packed: tuple[Path, list] | None = None
        # The longest target row of each update launched and not yet counted by the loop,
        # oldest first (at most two are in flight; the bound keeps callers that never count,
        # such as benchmarks, from growing it).
        self.launched_lengths: collections.deque = collections.deque(maxlen=4)
        self.cooldown: tuple[int, int] | None = None  # the rate's cooldown window (set_cooldown)
        keras.utils.set_random_seed(train_config.seed)
        whole_update_jit = train_config.jit_compile and strategy.num_replicas_in_sync == 1
        # With several replicas under XLA the update is two programs on each device: the
        # micro-batch's gradients, weighed by its tokens, as one buffer with the loss sums
        # (`_weighted_gradients`), then after one sum of the buffers across replicas and one
        # check of it, Adam's step (`FusedAdam.apply_flat_if`), which divides by the update's
        # tokens. Outside XLA the check, the weighing, float16's unscaling, the sum's packing
        # and Adam would each be an operation a variable and replica, launched by the host.
        programs = train_config.jit_compile and not whole_update_jit
        with strategy.scope():
            self.model = transformer.build(model_config, dtype=train_config.precision)
            # The paper's schedule; the training loop sets its cooldown (`set_cooldown`).
            self.schedule = TransformerSchedule(model_config.d_model, train_config.warmup_steps,
                                                train_config.lr_scale)
            self.optimizer = make_optimizer(train_config, self.schedule)
            self.optimizer.build(self.model.trainable_variables)
            # The sums of an update's micro-batches before its last (none with update_freq 1);
            # with several replicas under XLA one buffer (`_weighted_gradients`).
            variables = self.model.trainable_variables
            self._accumulators = (
                [] if train_config.update_freq == 1 else
                [self._local_variable((_HEADER + sum(v.shape.num_elements() for v in variables),))]
                if programs else [self._local_variable(v.shape) for v in variables])
            self._sums = self._local_variable((3,))  # loss, nll, tokens
        # The weights' moving average (`--ema-decay`), stepped in the update; None without.
        self.ema = (WeightAverage([v for v in self.model.variables if v.trainable],
                                  train_config.ema_decay, train_config.ema_start_step, strategy,
                                  train_config.jit_compile)
                    if train_config.ema_decay is not None else None)
        self._make_programs(train_config.jit_compile, whole_update_jit, programs)

    def _make_programs(self, jit_compile: bool, whole_update_jit: bool, programs: bool) -> None:
        """The update's, the accumulation's and the evaluation's functions (traced later, as
        they are first called or by `trace_for_any_shape`)."""
        # Every program traced without AutoGraph: none holds Python control flow on tensors,
        # and AutoGraph would parse and rewrite the source of each function traced through at
        # the run's start, a third of the update's tracing time.
        self._gradient_fn = self._replica_gradients  # looked up as it is traced
        self._weighted_program = (tf.function(self._weighted_gradients, jit_compile=True,
                                              autograph=False) if programs else None)
        self._accumulate = tf.function(self._accumulate_impl, reduce_retracing=True,
                                       autograph=False, jit_compile=whole_update_jit or None)
        # The last micro-batch of an update, the check of its loss and the Adam step (or the
        # skip of a non-finite update) are one program; on one device XLA compiles all of it.
        self._update = tf.function(self._update_impl, reduce_retracing=True, autograph=False,
                                   jit_compile=whole_update_jit or None)
        # Under XLA a non-finite update is skipped by selection (`FusedAdam.apply_if`), not by
        # a branch: XLA on a GPU runs a conditional by copying its predicate to the host and
        # waiting for the device (its ConditionalThunk), so the host could not launch the next
        # update while the device computed this one (the device then idles between updates);
        # so does TensorFlow's own `If` (several replicas: the update is
        # not one XLA program), whose predicate lives in the host's memory. With several
        # replicas each one's Adam step is then one XLA program of its own. Without XLA the
        # branch stays: it runs Adam as one fused kernel a variable, where the selection would
        # be ~10 operations each. float16's loss scale (Keras's LossScaleOptimizer, whose own
        # `apply` branches twice) is then kept by selection too (`_loss_scale_by_selection`).
        self._select_skip = jit_compile
        self._loss_scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self._evaluate = tf.function(self._evaluate_impl, reduce_retracing=True, autograph=False)
        self._reset = tf.function(self._reset_impl, autograph=False)
        # The update's and the accumulation's programs traced for batches of any shape
        # (`trace_for_any_shape`), called directly: through the `tf.function` every call hashes
        # the function's type, each of its hundreds of captured variables included, to find the
        # same program again, milliseconds of the calling thread an update.
        self._update_program = self._accumulate_program = None
        # The update's `apply` flag, kept on the first replica's device: an argument from the
        # host would be copied to the device at every launch.
        with tf.device(self.strategy.extended.worker_devices[0]):
            self._apply = {flag: tf.constant(flag) for flag in (False, True)}

    @staticmethod
    def _local_variable(shape):
        return tf.Variable(tf.zeros(shape, tf.float32), trainable=False,
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM)

    # ---- per-replica computations (traced inside strategy.run) ----

    def _replica_gradients(self, batch):
        with tf.GradientTape() as tape:
            logits, labels = self._logits(batch, training=True,
                                          real_only=not self.config.jit_compile)
            loss_sum, nll_sum, tokens = label_smoothed_loss(logits, labels,
                                                            self.config.label_smoothing)
            # Differentiate the per-token mean (well-scaled for low precision), then re-weight.
            scaled = self.optimizer.scale_loss(loss_sum / tf.maximum(tokens, 1.0))
        grads = tape.gradient(scaled, self.model.trainable_variables)
        return tf.stack([loss_sum, nll_sum, tokens]), grads

    def _weighted_gradients(self, batch, earlier=None):
        """One float32 buffer: its `_HEADER` elements this replica's [loss, nll, tokens] sums
        then zeros, then its gradients as sums over its tokens (each the per-token mean's
        gradient times the tokens), flattened one variable after another. `earlier`: the buffer
        of the update's earlier micro-batches, added."""
        sums, grads = self._gradient_fn(batch)
        weighted = [tf.reshape(_float32(grad) * sums[2], [-1]) for grad in grads]
        if earlier is not None:
            sums, offset = sums + earlier[:3], _HEADER
            for index, variable in enumerate(self.model.trainable_variables):
                size = variable.shape.num_elements()
                weighted[index] += earlier[offset:offset + size]
                offset += size
        return tf.concat([sums, tf.zeros([_HEADER - 3])] + weighted, 0)

    def _logits(self, batch, training: bool, real_only: bool = True):
        """(logits [N, V] float32, labels [N]). `real_only`: only the N real target positions
        are projected onto the vocabulary, the largest product and tensor of a step (a batch's
        pad positions, about a tenth on Multi30k, cost as much as real ones); XLA needs static
        shapes, so a compiled update has N = B * T, pad positions included (they weigh nothing).
        (On a GPU without XLA, `tf.where` has the host read its count: one wait per micro-batch.)"""
        batch = {key: tf.cast(ids, tf.int32) for key, ids in batch.items()}  # int64 if placed
        packing = ({key: batch[key] for key in PACKED_KEYS} if "source_segments" in batch
                   else None)  # rows of several pairs (`vtx.data.packing`)
        states = self.model.decoder_states((batch["source"], batch["target_in"]),
                                           training=training, packing=packing)  # [B, T, D]
        labels = batch["target_out"]  # [B, T]
        if real_only:
            real = tf.where(labels != PAD_ID)  # [N, 2]: (row, position) of every real token
            states, labels = tf.gather_nd(states, real), tf.gather_nd(labels, real)
        return self.model.embedding.project(states), labels

    def _accumulate_impl(self, batch):
        def replica(batch):
            if self._weighted_program is not None:
                self._accumulators[0].assign_add(self._weighted_program(batch))
                return
            sums, grads = self._gradient_fn(batch)
            for accumulator, grad in zip(self._accumulators, grads):
                accumulator.assign_add(_float32(grad) * sums[2])
            self._sums.assign_add(sums)

        self.strategy.run(replica, args=(batch,))

    def _update_impl(self, batch, apply):
        """The last micro-batch, then Adam on the update's gradients when `apply` (a boolean
        tensor), the update's loss is finite and so is every replica's share of its gradients;
        the accumulators (of earlier micro-batches) are cleared either way. Returns the update's
        [loss, nll, tokens] sums, 1 where Adam stepped, else 0, the loss scale after it (1
        without loss scaling) and how many replicas' gradients were not finite. Finite loss,
        non-finite gradients under float16's loss scaling is an overflow: the scale is halved and
        the weights are left, as Keras's LossScaleOptimizer does on one device; it is decided on
        the sum over all replicas, because Keras's own check looks at the first replica only."""
        totals, grads = self.strategy.run(self._last_micro_batch, args=(batch,))
        # Every replica and worker holds the same totals, so all take the same branch.
        totals = self.strategy.experimental_local_results(totals)[0]
        nonfinite_grads = totals[3]
        iterations = tf.identity(self.optimizer.iterations.value)
        ok = tf.logical_and(apply, tf.logical_and(tf.reduce_all(tf.math.is_finite(totals)),
                                                  nonfinite_grads == 0))
        # Float16's overflow: a finite loss whose gradients are not (see `_skip`).
        overflowed = tf.logical_and(apply, tf.math.is_finite(totals[0])) & (nonfinite_grads > 0)
        if self._select_skip:
            # Several replicas under XLA: their gradients are one buffer of token sums, divided
            # by the update's tokens in Adam's program (see `_last_micro_batch`).
            per_token = (1.0 / tf.maximum(totals[2], 1.0) if self._weighted_program is not None
                         else None)
            self.strategy.run(self._apply_replica_if, args=(grads, ok, per_token))
            if self._loss_scaled:
                self._loss_scale_by_selection(ok, overflowed)
        else:  # without XLA: Adam's fused kernels behind one branch
            tf.cond(ok, lambda: self.strategy.run(self._apply_replica, args=(grads,)),
                    lambda: self._skip(overflowed))
        if self.ema is not None:  # after Adam: it averages the weights Adam just wrote
            self.ema.update(ok, tf.identity(self.optimizer.iterations.value))
        stepped = tf.cast(tf.identity(self.optimizer.iterations.value) - iterations, tf.float32)
        scale = (tf.cast(tf.identity(self.optimizer.dynamic_scale.value), tf.float32)
                 if self._loss_scaled else 1.0)
        if self.config.update_freq > 1:
            self.strategy.run(self._zero_accumulators)
        return tf.concat([totals[:3], tf.stack([stepped, scale, nonfinite_grads])], 0)

    def _skip(self, overflowed):
        """A skipped update: when `overflowed` (float16 gradients of a finite loss) and the loss
        is scaled, the scale is halved and its growth count restarts (Keras's rule)."""
        if self._loss_scaled:
            def halve():
                self.optimizer.step_counter.assign(0)
                self.optimizer.dynamic_scale.assign(self.optimizer.dynamic_scale * 0.5)

            tf.cond(overflowed, halve, lambda: None)

    def _last_micro_batch(self, batch):
        """(the update's [loss, nll, tokens] sums over every replica and micro-batch and the
        number of replicas whose gradients are not finite, this replica's share of the update's
        gradients: its sums over tokens / all the update's tokens). With `update_freq` 1 the
        gradients go straight to Adam: no accumulator is written, read or cleared (three passes
        over the model's size saved). With several replicas under XLA (`_weighted_program`) the
        gradients are the update's sums over tokens, one flat buffer (`_weighted_gradients`),
        summed across replicas with the totals in one collective (Adam's program divides), and
        the count of replicas with non-finite gradients is 1 where any has them."""
        across = _sum_across_replicas
        if self._weighted_program is not None:
            earlier = self._accumulators[0].read_value() if self._accumulators else None
            summed = across(self._weighted_program(batch, earlier))
            # Checked once summed: a non-finite element of any replica's makes the sum's, so one
            # check serves every replica (a check in each replica's program is one more
            # reduction over the gradients, and XLA:CPU's reductions are slow). Adam splits off
            # the gradients.
            return tf.concat([summed[:3], [_nonfinite([summed])]], 0), summed
        sums, grads = self._gradient_fn(batch)
        grads = [_float32(grad) for grad in grads]
        if self.config.update_freq == 1:
            totals = across(tf.concat([sums, [_nonfinite(grads)]], 0))
            share = sums[2] / tf.maximum(totals[2], 1.0)  # in [0, 1]: finite grads stay finite
            return totals, [grad * share for grad in grads]
        numerators = [accumulator.read_value() + grad * sums[2]
                      for accumulator, grad in zip(self._accumulators, grads)]
        totals = across(tf.concat([self._sums.read_value() + sums, [_nonfinite(numerators)]], 0))
        total = tf.maximum(totals[2], 1.0)
        return totals, [numerator / total for numerator in numerators]

    def _apply_replica(self, grads):
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    def _apply_replica_if(self, grads, ok, per_token=None):
        """Adam where `ok`. `per_token`: with several replicas under XLA, `grads` is the flat
        buffer of the update's totals and summed gradients (`_last_micro_batch`), the gradients
        multiplied by it (1 / the update's tokens) in Adam's program (`apply_flat_if`)."""
        optimizer = self.optimizer
        if self._loss_scaled:
            # Unscaled as Keras's LossScaleOptimizer does before its inner optimizer's step.
            if per_token is None:
                grads = [keras.ops.divide(grad, optimizer.dynamic_scale) for grad in grads]
            else:
                per_token = per_token / tf.cast(optimizer.dynamic_scale.value, tf.float32)
            optimizer = optimizer.inner_optimizer
        if per_token is None:
            optimizer.apply_if(ok, grads, self.model.trainable_variables)
        else:
            optimizer.apply_flat_if(ok, grads, self.model.trainable_variables, per_token,
                                    start=_HEADER)

    def _loss_scale_by_selection(self, ok, overflowed):
        """Keras's dynamic loss scaling (LossScaleOptimizer.apply, `_skip`) without its branches:
        a step taken (`ok`) counts towards the scale's growth, doubling it and restarting the
        count at the `dynamic_growth_steps`-th; an overflow halves it and restarts the count;
        an update not applied (or of a non-finite loss) leaves both."""
        optimizer = self.optimizer
        count, scale = (tf.identity(v.value) for v in (optimizer.step_counter,
                                                          optimizer.dynamic_scale))
        grow = ok & tf.equal(count, optimizer.dynamic_growth_steps - 1)
        zero = tf.zeros_like(count)
        optimizer.step_counter.assign(
            tf.where(grow | overflowed, zero, tf.where(ok, count + 1, count)))
        optimizer.dynamic_scale.assign(
            tf.where(grow, scale * 2.0, tf.where(overflowed, scale * 0.5, scale)))

    def reset(self) -> None:
        """Clear the accumulators (after updates run with Adam off, e.g. compile passes)."""
        self._reset()

    def _reset_impl(self):
        self.strategy.run(self._zero_accumulators)

    def _zero_accumulators(self):
        for accumulator in self._accumulators + [self._sums]:
            accumulator.assign(tf.zeros_like(accumulator))

    def _evaluate_impl(self, batch):
        def replica(batch):
            logits, labels = self._logits(batch, training=False)
            return tf.stack(label_smoothed_loss(logits, labels, self.config.label_smoothing))

        return self.strategy.reduce(SUM, self.strategy.run(replica, args=(batch,)), axis=None)

    # ---- what a checkpoint holds of the engine ----

    def checkpoint_arrays(self) -> tuple[list, list, list | None]:
        """(model, optimizer, ema) arrays a checkpoint keeps (`vtx.checkpoints.Checkpoint`):
        every model and optimizer variable, and with --ema-decay the averages of the trainable
        variables beside the model's own values of the others (None without)."""
        model = [np.asarray(v.numpy()) for v in self.model.variables]
        optimizer = [np.asarray(v.numpy()) for v in self.optimizer.variables]
        if self.ema is None:
            return model, optimizer, None
        averages = iter(self.ema.arrays())
        ema = [next(averages) if v.trainable else array
               for v, array in zip(self.model.variables, model)]
        return model, optimizer, ema

    def checkpoint_shapes(self) -> tuple[list[tuple], list[tuple]]:
        """The shapes of the model's and of the optimizer's variables, in checkpoint order."""
        return ([tuple(v.shape) for v in self.model.variables],
                [tuple(v.shape) for v in self.optimizer.variables])

    @property
    def keeps_ema(self) -> bool:
        """Whether the run keeps a moving average of the weights (--ema-decay)."""
        return self.ema is not None

    def load_checkpoint_arrays(self, model: list, optimizer: list, ema: list | None) -> None:
        """Take a checkpoint's arrays (`checkpoint_arrays`' order and shapes, checked by the
        caller); `ema` None: the average (where kept) starts from the weights."""
        for variables, arrays in ((self.model.variables, model),
                                  (self.optimizer.variables, optimizer)):
            for variable, array in zip(variables, arrays):
                variable.assign(array)
        if self.ema is None:
            return
        if ema is None:
            self.ema.follow_weights()
        else:
            self.ema.assign([array for array, variable in zip(ema, self.model.variables)
                             if variable.trainable])

    def load_weights(self, model: list) -> None:
        """Take the floating-point model variables of a checkpoint's `model` arrays (a
        fine-tuning's start; shapes checked by the caller); the optimizer and the dropout's
        random state stay fresh, the average (where kept) starts from the weights."""
        for variable, array in zip(self.model.variables, model):
            if np.issubdtype(array.dtype, np.floating):
                variable.assign(array)
        if self.ema is not None:
            self.ema.follow_weights()

    def keep_packed_shapes(self, checkpoint: Path, shapes: list) -> None:
        """Say that this run resumed from `checkpoint` keeps its packed batch `shapes`
        whatever --max-tokens says: an out-of-memory error then advises accordingly."""
        self._resumed_packed = (checkpoint, shapes)

    @contextlib.contextmanager
    def validated_weights(self, averaged: bool):
        """Within it the model holds the averaged weights where `averaged` (--validate-with-ema;
        swapped back after it, exactly), else its own."""
        with self.ema.swapped() if averaged else contextlib.nullcontext():
            yield

    def random_state(self) -> list:
        """The model's non-trainable variables' values (the dropout layers' seeds), which every
        pass through the update advances: `restore_random_state` puts them back."""
        return [variable.numpy() for variable in self.model.non_trainable_variables]

    def restore_random_state(self, values: list) -> None:
        """Put back the values `random_state` returned."""
        for variable, value in zip(self.model.non_trainable_variables, values):
            variable.assign(value)

    def take_launched_length(self) -> int | None:
        """The longest target row of the oldest update launched and not yet taken (None: with
        several workers, or none recorded), for the loop's divergence watch."""
        return self.launched_lengths.popleft() if self.launched_lengths else None

    def forget_launched(self) -> None:
        """Drop the lengths of updates launched outside the training loop (never read by it)."""
        self.launched_lengths.clear()

    # ---- host side ----
    # ---- host side ----

    def set_cooldown(self, window: tuple[int, int] | None) -> None:
        """Cool the rate down to 0 over the updates of `window` (start, end], or not at all
        (None): from the next update launched on."""
        self.cooldown = window
        self.schedule.set_cooldown(window)

    def learning_rate(self, step: int) -> float:
        """The rate used by update number `step` (counted from 1)."""
        rate = paper_learning_rate(step, self.model_config.d_model, self.config.warmup_steps,
                                   self.config.lr_scale)
        if self.cooldown is not None:
            rate = rate * cooldown_factor(step, *self.cooldown)
        return float(rate)

    def start_update(self, stream: BatchStream | PrefetchedStream) -> tf.Tensor:
        """Launch one update: `update_freq` micro-batches per replica, then Adam when the loss and
        the gradients are finite (the update is skipped otherwise). Returns its [loss, nll,
        tokens] sums, whether Adam stepped, the loss scale and the count of replicas with
        non-finite gradients as a tensor that is not read: on a GPU the host goes on while the
        device computes."""
        longest = 0
        for micro_batch in range(self.config.update_freq):
            with self._out_of_memory_said([], placing=True):
                # Placed ahead by a PrefetchedStream, else here: every update is traced for
                # (and compiled from) batches placed alike.
                batches = [batch if isinstance(batch["source"], tf.Tensor)
                           else self.place_batch(batch, replica)
                           for replica, batch in enumerate(
                               stream.next() for _ in range(self.topology.local_replicas))]
            longest = max([longest] + [batch["target_in"].shape[1] for batch in batches])
            with self._out_of_memory_said(batches):
                placed = self.collectives.per_replica(batches)
                self.trace_for_any_shape(placed)  # before the first update only
                if micro_batch < self.config.update_freq - 1:
                    self._accumulate_program(placed)
                else:
                    # The loop judges divergence by batch length; workers see different
                    # batches and must agree (they stop together), so with several one mean.
                    self.launched_lengths.append(longest if self.topology.num_workers == 1
                                                 else None)
                    return self._update_program(placed, self._apply[True])

    def place_batch(self, batch: dict, index: int) -> dict:
        """`batch` (NumPy arrays) as int64 tensors on the device of local replica `index` modulo
        the local replicas: `start_update` gives each micro-batch's k-th batch to the k-th local
        replica. int64, because TensorFlow keeps an int32 tensor of a GPU in host memory (its
        kernels for int32 on a GPU read and write the host's), so int32 ids would still be
        copied as each update is launched; the update casts them back (`_logits`)."""
        device = self.strategy.extended.worker_devices[index % self.topology.local_replicas]
        with tf.device(device):
            return {key: tf.identity(np.asarray(value, np.int64)) for key, value in batch.items()}

    def trace_for_any_shape(self, batches) -> None:
        """Trace the update (and the accumulation) once for batches of any shape, before the
        first: every batch then runs through the same program (XLA compiles one per shape from
        it). Left to TensorFlow (`reduce_retracing`), the first shape a process meets gets a
        program of its own and every later shape a general one; the two sum in other orders, so
        a run resumed from a checkpoint, whose first batch has another shape, ended up to ~1e-6
        away from the run it continues (with or without XLA). `batches`: a distributed value of
        batches of the kind the run trains on (their shapes do not matter)."""
        if self._update_program is not None:
            return
        spec = tf.nest.map_structure(_any_shape, batches)
        if self.config.jit_compile:  # the programs a resumed run finds in the XLA cache
            _align_trace_names()
        if self.config.update_freq > 1:
            self._accumulate_program = self._accumulate.get_concrete_function(spec)
        self._update_program = self._update.get_concrete_function(spec,
                                                                  tf.TensorSpec([], tf.bool))

    def run_without_adam(self, batches) -> None:
        """The whole update on `batches` (placed, one per replica) with Adam off, waited for: it
        compiles the update's program for their shape and changes no weight (the accumulators
        it fills are cleared by `reset`)."""
        if self.config.update_freq > 1:
            self._accumulate_program(batches)
        self._update_program(batches, self._apply[False]).numpy()

    def read_update(self, totals: tf.Tensor) -> np.ndarray:
        """Wait for a launched update and return its [loss, nll, tokens] sums, whether Adam
        stepped (1 or 0), the loss scale after it and the count of replicas with non-finite
        gradients, as float64 (see `_update_impl`)."""
        with self._out_of_memory_said([]):
            return totals.numpy().astype(np.float64)

    def train_update(self, stream: BatchStream) -> np.ndarray:
        """One update, launched and read: its [loss, nll, tokens] sums, whether Adam stepped, the
        loss scale after it and the count of replicas with non-finite gradients."""
        return self.read_update(self.start_update(stream))

    @contextlib.contextmanager
    def _out_of_memory_said(self, batches: list, kind: str = "", placing: bool = False):
        """Within it, the device's memory running out (`errors.out_of_device_memory`) is raised
        as `out_of_memory`'s TrainingError; other errors as they are."""
        try:
            yield
        except tf.errors.OpError as error:
            if out_of_device_memory(error):
                raise self.out_of_memory(batches, kind, placing) from error
            raise

    def out_of_memory(self, batches: list, kind: str = "",
                       placing: bool = False) -> TrainingError:
        """The error of the device's memory running out on `batches` (of `kind`, e.g.
        "validation"), or `placing` a batch on a device: what to lower, and for a resumed packed
        run why it cannot."""
        # The read-ahead (`PrefetchedStream`) keeps `prefetch` batches on the devices.
        ahead = (f"; or lower --prefetch (now {self.prefetch}: batches kept on the device "
                 f"ahead of the updates; 0 keeps none)" if placing and self.prefetch else "")
        shapes = ", ".join(f"source {tuple(b['source'].shape)} target "
                           f"{tuple(b['target_in'].shape)}" for b in batches)
        on = f" on a {kind + ' ' if kind else ''}batch of {shapes}" if shapes else ""
        what = f"out of memory{on}"
        if self._resumed_packed is not None:
            # A resumed run keeps its checkpoint's packed rows (`BatchPlan.from_meta`):
            # --max-tokens cannot shrink them without moving the data position.
            resumed_from, shapes = self._resumed_packed
            kept = " + ".join(format_shape(shape) for shape in shapes)
            return TrainingError(
                f"{what}; this run resumed from {resumed_from} and keeps its packed batch "
                f"shapes ({kept}) whatever --max-tokens says, so that its data resumes where it "
                f"was: resume on a device with more memory, or start a new run (another "
                f"--save-dir) with a lower --max-tokens (now {self.config.max_tokens}) and a "
                f"higher --update-freq to keep the tokens per step{ahead}")
        return TrainingError(f"{what}; lower --max-tokens (now {self.config.max_tokens}) and "
                             f"raise --update-freq to keep the tokens per step{ahead}")

    def evaluate(self, batches: Iterable[dict]) -> tuple[float, float]:
        """Mean label-smoothed loss and NLL per target token over `batches` (no dropout)."""
        batches, replicas = list(batches), self.strategy.num_replicas_in_sync
        totals, first = np.zeros(3, np.float64), self.topology.worker_index * self.topology.local_replicas
        for start in range(0, len(batches), replicas):
            own = batches[start + first:start + first + self.topology.local_replicas]
            group = own + [_empty_batch()] * (self.topology.local_replicas - len(own))
            with self._out_of_memory_said(own, "validation"):
                totals += self._evaluate(self.collectives.per_replica(group)).numpy()
        tokens = max(totals[2], 1.0)
        return totals[0] / tokens, totals[1] / tokens
