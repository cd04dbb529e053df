import keras
import numpy as np
import pytest
import tensorflow as tf

from vtx.training.adam import FusedAdam
from vtx.training.schedule import TransformerSchedule


SHAPES = [(7, 5), (5,), (3, 4, 2)]


def three_variables(optimizer_class, rng):
    """(a one-device MirroredStrategy, as `vtx train` runs, three variables of SHAPES drawn from
    `rng`, an `optimizer_class` built for them on the paper's schedule and Adam settings)."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        variables = [keras.Variable(rng.normal(size=s).astype("float32")) for s in SHAPES]
        optimizer = optimizer_class(TransformerSchedule(16, warmup_steps=4), beta_1=0.9,
                                    beta_2=0.98, epsilon=1e-9)
        optimizer.build(variables)
    return strategy, variables, optimizer


def train(optimizer_class, steps: int = 6):
    """Weights and optimizer state after `steps` updates of three variables under a one-device
    MirroredStrategy (as `vtx train` runs), on the paper's schedule and Adam settings."""
    rng = np.random.default_rng(0)
    strategy, variables, optimizer = three_variables(optimizer_class, rng)

    @tf.function
    def update(grads):
        def replica():  # the gradients made in the replica, as the trainer's are
            optimizer.apply_gradients(zip([tf.identity(g) for g in grads], variables))

        strategy.run(replica)

    for _ in range(steps):
        update([tf.constant(rng.normal(size=s).astype("float32")) for s in SHAPES])
    return [v.numpy() for v in variables] + [v.numpy() for v in optimizer.variables]


def test_fused_adam_trains_as_keras_adam_with_the_same_state():
    keras_state, fused_state = train(keras.optimizers.Adam), train(FusedAdam)
    assert len(keras_state) == len(fused_state)  # same slots, same order: checkpoints load
    for expected, got in zip(keras_state, fused_state):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # The weights moved: the comparison is not between two untouched copies.
    assert not np.allclose(train(FusedAdam, steps=0)[0], fused_state[0])


def test_fused_adam_refuses_amsgrad():
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam(1e-3, amsgrad=True)


def test_fused_adam_refuses_a_variable_that_is_not_float32():
    with pytest.raises(ValueError, match="float32 variables only; .* is bfloat16"):
        FusedAdam(1e-3).build([keras.Variable(np.zeros(3), dtype="bfloat16")])


def train_if(ok: list[bool], optimizer_class=FusedAdam):
    """As `train`, each update through `FusedAdam.apply_if` with its `ok` flag (or, for Keras's
    Adam, `apply_gradients` for the updates flagged ok only), the gradients of a skipped update
    non-finite in part (and drawn apart: the ok updates get the same whatever is skipped)."""
    rng = np.random.default_rng(0)
    strategy, variables, optimizer = three_variables(optimizer_class, rng)

    @tf.function(jit_compile=True)
    def update(grads, flag):
        def replica(flag):
            optimizer.apply_if(flag, [tf.identity(g) for g in grads], variables)

        strategy.run(replica, args=(flag,))

    skipped_rng = np.random.default_rng(1)  # the ok updates' gradients alike whatever is skipped
    for flag in ok:
        grads = [(rng if flag else skipped_rng).normal(size=s).astype("float32") for s in SHAPES]
        if not flag:
            grads[1][2] = np.nan
        if optimizer_class is FusedAdam:
            update([tf.constant(g) for g in grads], tf.constant(flag))
        elif flag:
            strategy.run(lambda: optimizer.apply_gradients(zip(map(tf.constant, grads),
                                                               variables)))
    return [v.numpy() for v in variables] + [v.numpy() for v in optimizer.variables]


def test_adam_applied_if_ok_steps_as_keras_adam_and_leaves_everything_when_not():
    flags = [True, False, True, True, False, False, True]
    keras_state, selected = train_if(flags, keras.optimizers.Adam), train_if(flags)
    assert len(keras_state) == len(selected)
    for expected, got in zip(keras_state, selected):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert all(np.isfinite(value).all() for value in selected)  # no NaN of a skipped update
    assert selected[3] == 4  # `iterations`: the ok updates only
    # Skipped updates change nothing, bit for bit (not merely within the tolerance).
    for expected, got in zip(train_if([True, True]), train_if([True, False, True, False])):
        np.testing.assert_array_equal(got, expected)
