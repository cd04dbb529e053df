import keras
import numpy as np
import pytest
import tensorflow as tf

from vtx.training.adam import FusedAdam
from vtx.training.schedule import TransformerSchedule


def train(optimizer_class, steps: int = 6):
    """Weights and optimizer state after `steps` updates of three variables under a one-device
    MirroredStrategy (as `vtx train` runs), on the paper's schedule and Adam settings."""
    rng = np.random.default_rng(0)
    shapes = [(7, 5), (5,), (3, 4, 2)]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        variables = [keras.Variable(rng.normal(size=s).astype("float32")) for s in shapes]
        optimizer = optimizer_class(TransformerSchedule(16, warmup_steps=4), beta_1=0.9,
                                    beta_2=0.98, epsilon=1e-9)
        optimizer.build(variables)

    @tf.function
    def update(grads):
        def replica():  # the gradients made in the replica, as the trainer's are
            optimizer.apply_gradients(zip([tf.identity(g) for g in grads], variables))

        strategy.run(replica)

    for _ in range(steps):
        update([tf.constant(rng.normal(size=s).astype("float32")) for s in shapes])
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
