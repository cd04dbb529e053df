"""The paper's learning-rate schedule (section 5.3, equation 3)."""

import keras
from keras import ops


def paper_learning_rate(step, d_model: int, warmup_steps: int, scale: float = 1.0):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1."""
    step = ops.maximum(ops.cast(step, "float32"), 1.0)
    return scale * d_model**-0.5 * ops.minimum(step**-0.5, step * float(warmup_steps) ** -1.5)


@keras.saving.register_keras_serializable(package="vtx")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Keras schedule for `paper_learning_rate`.

    The optimizer passes its update count, which starts at 0; the paper's first step is 1.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

    def __call__(self, iterations):
        return paper_learning_rate(iterations + 1, self.d_model, self.warmup_steps, self.scale)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
