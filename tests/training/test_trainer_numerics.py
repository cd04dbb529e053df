"""The numbers a Trainer computes: validation loss against a hand computation, and updates under
XLA, under float16 loss scaling and with non-finite gradients on one of two replicas."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_ROOT
from tests.training.synthetic import epoch_maker, make_pairs, to_batch
from vtx import config
from vtx.errors import TrainingError
from vtx.training.loss import label_smoothed_loss
from vtx.training.compiling import compile_workers
from vtx.training.trainer import Trainer

TINY = config.preset("tiny", vocab_size=20, dropout=0.0)
# For the tests that compile with XLA: what they check does not depend on the depth, and XLA
# compiles one layer in about half the time of two (~20-30 s a program at two layers on a 2-core
# AMD EPYC Zen 3).
ONE_LAYER = config.preset("tiny", vocab_size=20, dropout=0.0, num_layers=1)


def make_trainer(save_dir, model=TINY, **options) -> Trainer:
    # adam_epsilon 1e-5: see tests/training/driver.py (round-off in zero gradients stays small).
    train_config = config.TrainConfig(**{"max_steps": 2, "save_interval_minutes": 0,
                                         "validate_interval_steps": 0, "warmup_steps": 10,
                                         "adam_epsilon": 1e-5, **options})
    return Trainer(model, train_config, save_dir, log=lambda line: None)


def hand_loss_sums(logits, labels, epsilon):
    """(smoothed loss sum, nll sum, tokens) in float64 over the non-pad labels."""
    logits = logits.astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 0
    nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    smoothed = (1 - epsilon) * nll - epsilon * log_probs.mean(-1)
    return smoothed[real].sum(), nll[real].sum(), real.sum()


def test_evaluate_returns_the_per_token_means_over_all_batches(tmp_path):
    trainer = make_trainer(tmp_path, label_smoothing=0.1)
    batches = epoch_maker(make_pairs(10, 20, seed=4), 4)(0, 0)  # 4 + 4 + 2 rows, padded
    totals = np.zeros(3)
    for batch in batches:
        logits = np.asarray(trainer.model((batch["source"], batch["target_in"])))
        totals += hand_loss_sums(logits, batch["target_out"], 0.1)
    loss, nll = trainer.engine.evaluate(batches)
    assert loss == pytest.approx(totals[0] / totals[2], rel=1e-5)
    assert nll == pytest.approx(totals[1] / totals[2], rel=1e-5)


def first_two_losses_and_weights(trainer, lengths=None):
    batch = to_batch(make_pairs(8, 20, seed=6), lengths)
    losses = []
    for _ in range(2):
        totals = trainer.engine.train_update(_Repeat(batch))
        losses.append(totals[0] / totals[2])
    return losses, [np.asarray(v.numpy(), np.float32) for v in trainer.model.trainable_variables]


class _Repeat:
    """A BatchStream stand-in that returns the same batch forever."""

    def __init__(self, batch):
        self.batch = batch

    def next(self):
        return self.batch


@pytest.mark.parametrize("update_freq", [1, 2])
@pytest.mark.slow
def test_xla_compiled_updates_equal_graph_updates(tmp_path, update_freq):
    graph_losses, graph_weights = first_two_losses_and_weights(
        make_trainer(tmp_path / "graph", ONE_LAYER, update_freq=update_freq))
    xla_losses, xla_weights = first_two_losses_and_weights(
        make_trainer(tmp_path / "xla", ONE_LAYER, jit_compile=True, update_freq=update_freq))
    np.testing.assert_allclose(xla_losses, graph_losses, rtol=1e-5)
    assert graph_losses[1] < graph_losses[0]
    for a, b in zip(xla_weights, graph_weights):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16", "mixed_float16"])
@pytest.mark.slow
def test_the_compiled_update_holds_no_conditional_nor_copies_of_its_state(tmp_path, precision):
    """XLA on a GPU runs a conditional by copying its predicate to the host and waiting for the
    device (XLA's ConditionalThunk): the host could not launch the next update while the device
    computes this one. The skip of a non-finite update is a selection instead (1 before), of
    a flag computed once; so is float16's loss scale (Keras's loss scaling: 4 before)."""
    trainer = make_trainer(tmp_path, ONE_LAYER, jit_compile=True, precision=precision)
    batch = to_batch(make_pairs(8, 20, seed=6))
    trainer.engine.train_update(_Repeat(batch))
    placed = trainer.engine.collectives.per_replica([trainer.engine.place_batch(batch, 0)])
    engine = trainer.engine
    compiler_ir = engine._update.experimental_get_compiler_ir(placed, engine._apply[True])
    hlo = compiler_ir(stage="hlo")
    assert " dot(" in hlo and " conditional(" not in hlo  # the update's HLO, with no branch
    # The check of the gradients (a sum a variable, the sums added up) computed once, not
    # copied by XLA's fusion into each weight's and moment's selection, 3 x 43 copies of its 43
    # additions here (5,705 scalar additions in all, 245 without the copies, most of them the
    # reductions'; the quick start's model: 126,328 instructions instead of 27,015).
    optimized = compiler_ir(stage="optimized_hlo")
    scalar_adds = re.findall(r"= f32\[\] add\(", optimized)
    assert len(scalar_adds) < 10 * len(trainer.model.trainable_variables), len(scalar_adds)
    # Nor does it copy the optimizer's moments before overwriting them (XLA did while the
    # weight's fusion recomputed the new moments from the old: every moment, twice the weights'
    # elements, were copied at every update, 2 x 63M floats for base). What is left: a few
    # vectors of the model's width (in float16) and scalars.
    copied = sum(int(np.prod([int(n) for n in shape.split(",") if n]))
                 for shape in re.findall(r"= \w+\[([\d,]*)\]\S* copy\(%arg", optimized))
    weights = sum(int(np.prod(v.shape)) for v in trainer.model.trainable_variables)
    assert copied <= 0.05 * weights, (copied, weights)


@pytest.mark.slow
def test_compiling_the_batch_shapes_first_changes_no_weight_nor_optimizer_state(tmp_path):
    """One shape at a time, or several at once (threads, as on a GPU machine's CPU cores): every
    shape is compiled and named, and the first real updates after it (on the first shape's
    programs) are those without it: with dropout, so the compile passes must leave the dropout
    seeds as they found them (else a resumed run draws other masks than an uninterrupted one)."""
    # One layer: what is checked does not depend on the depth, and XLA compiles it in half the time.
    model = config.preset("tiny", vocab_size=20, dropout=0.1, num_layers=1)
    losses, weights = first_two_losses_and_weights(
        make_trainer(tmp_path / "plain", model, jit_compile=True, update_freq=2), (12, 12))
    shapes = [(8, 12, 12), (4, 8, 20)]
    for workers in (1, 2):
        trainer = make_trainer(tmp_path / str(workers), model, jit_compile=True, update_freq=2,
                               compile_workers=workers)
        lines = []
        trainer.compiler.log = lines.append
        state = trainer.model.variables + trainer.engine.optimizer.variables
        before = [np.asarray(v.numpy()) for v in state]
        trainer.compiler.compile_shapes(shapes)
        named = sorted(line.split("(")[1].split(")")[0] for line in lines
                       if line.startswith("compiled the update for batch shape"))
        assert named == ["4x8x20", "8x12"], workers
        for a, b in zip([np.asarray(v.numpy()) for v in state], before):
            np.testing.assert_array_equal(a, b)
        assert int(trainer.engine.optimizer.iterations.numpy()) == 0
        compiled_losses, compiled_weights = first_two_losses_and_weights(trainer, (12, 12))
        np.testing.assert_allclose(compiled_losses, losses, rtol=1e-6)
        for a, b in zip(compiled_weights, weights):
            np.testing.assert_allclose(a, b, atol=1e-6)


def test_compile_workers_half_the_cores_one_device_only():
    assert compile_workers(0, shapes=8, replicas=1, cpus=16) == 8
    assert compile_workers(0, shapes=8, replicas=1, cpus=6) == 3
    assert compile_workers(0, shapes=8, replicas=1, cpus=1) == 1
    assert compile_workers(0, shapes=3, replicas=1, cpus=16) == 3  # no more than the shapes
    assert compile_workers(4, shapes=8, replicas=1, cpus=2) == 4  # asked for: kept
    assert compile_workers(0, shapes=8, replicas=2, cpus=16) == 1  # collectives: one at a time


def test_mixed_float16_update_changes_the_weights_and_stays_finite(tmp_path):
    trainer = make_trainer(tmp_path, precision="mixed_float16")
    assert trainer.model.compute_dtype == "float16"
    before = [np.asarray(v.numpy()) for v in trainer.model.trainable_variables]
    losses, after = first_two_losses_and_weights(trainer)
    assert np.isfinite(losses).all() and losses[1] < losses[0]
    assert all(np.isfinite(w).all() for w in after)
    assert all(w.dtype == np.float32 for w in after)  # float32 master weights
    changed = [not np.array_equal(a, b) for a, b in zip(before, after)]
    assert sum(changed) > len(changed) // 2
    assert float(trainer.engine.optimizer.scale_loss(1.0)) > 1.0  # the loss is scaled


def accumulated_gradients(trainer, batch) -> list[np.ndarray]:
    """The token-weighted gradient sums one micro-batch leaves in the trainer's accumulators
    (a trainer with update_freq > 1: with 1 there are none, the gradients go to Adam)."""
    assert trainer.engine._accumulators, "accumulators need update_freq > 1"
    trainer.engine._reset()
    trainer.engine._accumulate(trainer.engine.collectives.per_replica([batch]))
    return [np.asarray(a.read_value()) for a in trainer.engine._accumulators]


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_float16_overflow_skips_the_update_without_counting_it_as_a_step(tmp_path, jit_compile):
    """A loss scale of 2^40 overflows float16's gradients: each such update leaves the weights
    and halves the scale (Keras's loss scaling; under XLA by selection); as in fairseq it is not
    a step, so the step, the optimizer's iterations (the learning rate's step) and --max-steps
    stay one count."""
    lines = []
    trainer = Trainer(ONE_LAYER if jit_compile else TINY,
                      config.TrainConfig(max_steps=3, precision="mixed_float16",
                                         jit_compile=jit_compile, save_interval_minutes=0,
                                         validate_interval_steps=0),
                      tmp_path, log=lines.append)
    assert trainer.engine._select_skip == jit_compile
    trainer.engine.optimizer.dynamic_scale.assign(2.0 ** 40)  # built by the Trainer
    trainer.fit(epoch_maker(make_pairs(8, 20), 4))
    overflowed = [line for line in lines if line.startswith("float16 gradients overflowed")]
    assert overflowed[0] == ("float16 gradients overflowed at step 1: update skipped, loss scale "
                             "halved to 5.49756e+11 (1 skipped in all)")
    assert trainer.state.step == 3 and int(trainer.engine.optimizer.iterations.numpy()) == 3
    assert trainer.state.skipped == len(overflowed)
    assert float(trainer.engine.optimizer.dynamic_scale.numpy()) == 2.0 ** (40 - len(overflowed))


@pytest.mark.slow
def test_the_compiled_update_scales_the_float16_loss_as_keras_does_without_its_branches(tmp_path):
    """Under XLA the loss scale is kept by selection: an overflow halves it and leaves the
    weights bit for bit; each step taken counts, and the dynamic_growth_steps-th doubles the scale
    and restarts the count (Keras's LossScaleOptimizer); the weights are those of Keras's
    branches compiled the same way."""
    batch = to_batch(make_pairs(8, 20, seed=6))
    trainers = [make_trainer(tmp_path / name, ONE_LAYER, jit_compile=True,
                             precision="mixed_float16") for name in ("select", "branch")]
    trainers[1].engine._select_skip = False  # Keras's branches, as without XLA (read when traced)
    assert trainers[0].engine._select_skip
    seen = []
    for trainer in trainers:
        optimizer = trainer.engine.optimizer
        optimizer.dynamic_growth_steps = 2
        optimizer.dynamic_scale.assign(2.0 ** 40)  # float16 gradients overflow
        before = [np.asarray(v.numpy()) for v in trainer.model.trainable_variables]
        states = []
        for update in range(4):
            if update == 1:
                optimizer.dynamic_scale.assign(2.0 ** 10)  # they do not
            totals = trainer.engine.train_update(_Repeat(batch))
            states.append((int(totals[3]), float(totals[4]), int(optimizer.step_counter.numpy()),
                           int(optimizer.iterations.numpy())))
            if update == 0:
                for a, b in zip(trainer.model.trainable_variables, before):
                    np.testing.assert_array_equal(a.numpy(), b)
        # (stepped, scale after, growth count, Adam's steps): overflow; step; step and growth;
        # step.
        assert states == [(0, 2.0 ** 39, 0, 0), (1, 2.0 ** 10, 1, 1), (1, 2.0 ** 11, 0, 2),
                          (1, 2.0 ** 11, 1, 3)]
        seen.append([np.asarray(v.numpy()) for v in trainer.model.trainable_variables])
    # Equal up to float16's rounding, should the two programs fuse their passes differently on
    # another CPU (0.0 apart on an Intel Xeon model 207); gradients left scaled (Adam would see
    # them grow 2x at the growth) are 4.8e-3 apart.
    for a, b in zip(*seen):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_the_advice_at_the_loss_scale_floor_can_be_followed(tmp_path):
    """Overflow at every scale stops training at the floor; the error said "train with
    --precision mixed_bfloat16 or float32, or lower --lr-scale, and resume", but a mixed_float16
    checkpoint resumes with mixed_float16 only (the loss scale is optimizer state): another
    precision needs another --save-dir, a lower --lr-scale resumes."""
    pairs = make_pairs(8, 20)
    make_trainer(tmp_path, precision="mixed_float16", max_steps=1).fit(epoch_maker(pairs, 4))
    trainer = make_trainer(tmp_path, precision="mixed_float16", max_steps=3)
    gradients = trainer.engine._gradient_fn

    def overflowing(batch):  # float16's overflow on every update
        sums, grads = gradients(batch)
        grads = [tf.convert_to_tensor(grad) for grad in grads]  # the embedding's: IndexedSlices
        return sums, [tf.fill(tf.shape(g), tf.constant(np.inf, g.dtype)) for g in grads]

    trainer.engine._gradient_fn = overflowing  # before the update is first traced
    trainer.resume()
    trainer.engine.optimizer.dynamic_scale.assign(2.0 ** -13)  # one halving to the floor
    with pytest.raises(TrainingError) as error:
        trainer.fit(epoch_maker(pairs, 4))
    message = str(error.value)
    assert "at step 2; resume with a lower --lr-scale (now 1)" in message, message
    assert "or train with --precision mixed_bfloat16 or float32 in another --save-dir" in message
    for precision in ("float32", "mixed_bfloat16"):
        with pytest.raises(TrainingError, match="resume with --precision mixed_float16"):
            make_trainer(tmp_path, precision=precision).resume()
    lower = make_trainer(tmp_path, precision="mixed_float16", lr_scale=0.5)
    lower.resume()
    assert lower.state.step == 1


def test_all_pad_rows_that_fill_a_batch_change_no_gradient(tmp_path):
    trainer = make_trainer(tmp_path, label_smoothing=0.1, update_freq=2)
    batch = to_batch(make_pairs(5, 20, seed=2))
    filled = {key: np.concatenate([value, np.zeros((3, value.shape[1]), value.dtype)])
              for key, value in batch.items()}  # 8 rows, the pipeline's fill
    unfilled, with_pad_rows = (accumulated_gradients(trainer, batch),
                               accumulated_gradients(trainer, filled))
    # 8 rows are summed in another order than 5 (oneDNN blocks a product by its row count):
    # measured 1.9e-6 at most, 1.7e-7 of the largest gradient (an AMD EPYC Zen 3, AVX2), which
    # an element's own tolerance missed (1.4e-6 on a gradient of 0.012). A pad row that weighed
    # anything would move the gradients by a share of that largest one.
    scale = max(np.abs(a).max() for a in unfilled)
    for a, b in zip(unfilled, with_pad_rows):
        assert np.isfinite(b).all()
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_pad_positions_change_no_gradient_projected_or_not(tmp_path, jit_compile):
    """Without XLA only the real target positions are projected onto the vocabulary; with it
    all are (static shapes). Both give the gradient of the same loss."""
    trainer = make_trainer(tmp_path, label_smoothing=0.1, jit_compile=jit_compile, update_freq=2)
    batch = to_batch(make_pairs(8, 20, seed=6))
    assert (batch["target_out"] == 0).any() and (batch["target_out"] != 0).any()
    dense = accumulated_gradients(trainer, batch)
    sums = trainer.engine._sums.read_value().numpy()
    trainer.engine._reset()

    def projected(real_only):  # the accumulated gradient, [loss, nll, tokens]
        with tf.GradientTape() as tape:
            logits, labels = trainer.engine._logits(batch, training=True, real_only=real_only)
            loss_sum, nll_sum, tokens = label_smoothed_loss(logits, labels, 0.1)
        grads = tape.gradient(loss_sum, trainer.model.trainable_variables)
        return [np.asarray(tf.convert_to_tensor(g)) for g in grads], [loss_sum, nll_sum, tokens]

    (real, real_totals), (every, every_totals) = projected(True), projected(False)
    for totals in (real_totals, every_totals):
        # float32 sums of ~50 terms, one side possibly compiled by XLA (its own summation order).
        np.testing.assert_allclose(np.asarray(totals, np.float64), sums, rtol=1e-5)
    scale = max(np.abs(b).max() for b in every)  # of all gradients: some are ~0 (key biases)
    for a, b, accumulated in zip(real, every, dense):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * scale)
        # The trainer's update: the gradient of the per-token mean, times the tokens.
        np.testing.assert_allclose(accumulated, b, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_packed_batch_gives_the_gradient_of_the_same_pairs_bucketed(tmp_path, jit_compile):
    """Several pairs a row (`vtx.data.packing`), pad rows included: the same loss sums and
    gradient as the pairs one a row, to float32 round-off."""
    from vtx.data.packing import pack_batch

    trainer = make_trainer(tmp_path, label_smoothing=0.1, jit_compile=jit_compile, update_freq=2)
    pairs = make_pairs(9, 20, seed=3)
    bucketed = accumulated_gradients(trainer, to_batch(pairs))
    bucketed_sums = trainer.engine._sums.read_value().numpy()
    rows = [pairs[0:3], pairs[3:5], pairs[5:6], pairs[6:9], []]
    packed_batch = pack_batch(rows, (5, 24, 27))
    assert packed_batch["source_segments"].max() == 3
    packed = accumulated_gradients(trainer, packed_batch)
    np.testing.assert_allclose(trainer.engine._sums.read_value().numpy(), bucketed_sums, rtol=1e-5)
    scale = max(np.abs(b).max() for b in bucketed)
    for a, b in zip(packed, bucketed):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("precision, update_freq, jit", [
    ("mixed_float16", 1, False), ("float32", 2, False), ("mixed_float16", 1, True)])
@pytest.mark.slow
def test_gradients_non_finite_on_one_replica_skip_the_update_on_all(tmp_path, precision,
                                                                    update_freq, jit):
    """Two replicas, the second one's gradients infinite (float16's overflow): the update is
    skipped everywhere (Keras's loss scaling checks the first replica only: the weights went NaN),
    float16's loss scale is halved, and an overflow at every scale stops training when the scale
    falls below 1e-4 instead of halving it forever; in float32 such updates count as non-finite.
    Under XLA the skip and the loss scale are selections, the update's graph holds no branch
    (TensorFlow's `If` reads its predicate on the host: on GPUs the host waited for the
    gradients before it launched Adam)."""
    process = subprocess.run(
        [sys.executable, "-m", "tests.training.overflow_driver", str(tmp_path), precision,
         str(update_freq)] + ["jit"] * jit, cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=600)
    assert process.returncode == 0, process.stdout + process.stderr
    lines = process.stdout.splitlines()
    first = json.loads(next(line for line in lines if line.startswith("{")))
    assert first["stepped"] == 0 and first["iterations"] == 0, first
    assert first["unchanged"] and first["finite"], first
    assert first["nonfinite_replicas"] == 1, first
    if jit:
        assert first["conditionals"] == 0, first
    error = next(line for line in lines if line.startswith("error: "))
    if precision == "mixed_float16":
        assert first["scale_after"] == first["scale_before"] / 2, first
        # From 2^-10: four halvings to 2^-14, the first at most 1e-4.
        assert error.startswith(
            "error: float16 gradients overflow at every loss scale: the scale fell to "
            "6.10352e-05, at most 0.0001 (fairseq's --min-loss-scale), at step 1; resume with "
            "a lower --lr-scale"), error
    else:
        assert error.startswith("error: 3 non-finite updates in a row at step 1"), error
        assert any(line.startswith("logged: non-finite gradients at step 1: update skipped (3 in "
                                   "a row") for line in lines), lines


def _merge_call_rule_of_gpus(extended) -> bool:
    """MirroredStrategy's choice of a merge call (`MirroredExtended._use_merge_call`) on GPUs:
    none inside a program XLA compiles, where a sum across replicas becomes a collective of the
    implementation the strategy chose when made. TensorFlow applies this rule only when every
    device is a GPU; on the CPU it merges, and the sum of one replica is a copy."""
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import control_flow_util

    return not control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


@pytest.mark.slow
@pytest.mark.parametrize("update_freq", [1, 2])
def test_one_replica_compiles_without_a_collective_xla_refuses_on_gpus(tmp_path, monkeypatch,
                                                                      update_freq):
    """One replica under XLA compiles its whole update, EMA included. MirroredStrategy on the
    CPU, or on GPUs cut into logical ones (gpu_replicas.py's "1 replica"), implements its
    collectives as "ring", which XLA refuses ("Only compiling NCCL/auto collective is
    supported"); with the GPUs' merge-call rule, a sum across the one replica inside the
    program would be such a collective, and compiling it fails as it did on an H200."""
    from tensorflow.python.distribute.mirrored_strategy import MirroredExtended

    monkeypatch.setattr(MirroredExtended, "_use_merge_call", _merge_call_rule_of_gpus)
    trainer = make_trainer(tmp_path, ONE_LAYER, jit_compile=True, update_freq=update_freq,
                           ema_decay=0.5)
    trainer.compiler.compile_shapes([(8, 12, 12)])
    losses, weights = first_two_losses_and_weights(trainer, (12, 12))
    assert all(np.isfinite(losses))
    assert int(trainer.engine.optimizer.iterations.numpy()) == 2
