"""The paper's learning-rate schedule (section 5.3, equation 3), and a linear cooldown to 0
over the end of a run's budget (`--cooldown`)."""

import keras
import tensorflow as tf
from keras import ops

# The cooldown window of a run without one: it begins after any step a run reaches.
NO_COOLDOWN = (2**30, 2**30)


def paper_learning_rate(step, d_model: int, warmup_steps: int, scale: float = 1.0):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1."""
    step = ops.maximum(ops.cast(step, "float32"), 1.0)
    return scale * d_model**-0.5 * ops.minimum(step**-0.5, step * float(warmup_steps) ** -1.5)


def cooldown_factor(step, start, end):
    """The multiplier of update `step`'s rate in the cooldown window (`start`, `end`]: 1 up to
    `start`, then falling linearly to 0 one update after `end` (update `end`, the last, is at
    1 / (end - start + 1) of its rate)."""
    step, start, end = (ops.cast(x, "float32") for x in (step, start, end))
    falling = ops.clip((end + 1.0 - step) / ops.maximum(end + 1.0 - start, 1.0), 0.0, 1.0)
    return ops.where(step <= start, 1.0, falling)


@keras.saving.register_keras_serializable(package="vtx")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Keras schedule for `paper_learning_rate`, times `cooldown_factor` of the window the
    `cooldown` variable holds (`set_cooldown`; none at first).

    The optimizer passes its update count, which starts at 0; the paper's first step is 1.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale
        # Made under the run's distribution strategy (mirrored), set by the host between
        # updates: the compiled update reads it.
        self.cooldown = tf.Variable(NO_COOLDOWN, dtype=tf.float32, trainable=False,
                                    name="cooldown_window")

    def set_cooldown(self, window: tuple[int, int] | None) -> None:
        """Cool down over `window` (start, end), or not at all (None)."""
        self.cooldown.assign(window or NO_COOLDOWN)

    def __call__(self, iterations):
        step = iterations + 1
        return (paper_learning_rate(step, self.d_model, self.warmup_steps, self.scale)
                * cooldown_factor(step, self.cooldown[0], self.cooldown[1]))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
