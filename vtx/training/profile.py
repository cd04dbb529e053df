"""TensorFlow's profiler over a range of training updates (`vtx train --profile FIRST:LAST`).

The trace shows, per device stream, every kernel and copy of the traced updates and the gaps
between them: where an update's time goes and whether the device waits for the host. It is
written as TensorBoard's profile plugin reads it (`DIR/plugins/profile/<run>/<host>.xplane.pb`);
`benchmarks/xplane_summary.py DIR` summarizes it as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def parse_steps(text: str) -> tuple[int, int]:
    """`FIRST:LAST` (or one step `N`) as (first, last), 1 <= first <= last.

    Raises:
        ValueError: anything else, the text quoted.
    """
    parts = text.split(":")
    try:
        if len(parts) > 2:
            raise ValueError
        steps = int(parts[0]), int(parts[-1])
    except ValueError:
        raise ValueError(f"{text!r} is not FIRST:LAST, two update numbers such as 500:510")
    if not 1 <= steps[0] <= steps[1]:
        raise ValueError(f"{text!r}: FIRST:LAST needs 1 <= FIRST <= LAST")
    return steps


class StepProfiler:
    """Starts TensorFlow's profiler once update `first - 1` has been read (at once when the run
    resumes between `first - 1` and `last`) and stops it once update `last` has been read. Updates
    launched ahead (`TrainingLoop._may_launch_ahead`) mean the trace may begin with the end of
    update `first - 1` and end with part of update `last + 1`."""

    def __init__(self, steps: tuple[int, int], directory, log: Callable[[str], None]):
        self.first, self.last = steps
        self.directory, self.log = Path(directory), log
        self.started_at: int | None = None  # the step read when tracing began
        self.done = False

    def at(self, step: int) -> None:
        """The update `step` has been read (or the run starts at it): start or stop tracing."""
        if self.done:
            return
        if self.started_at is None and self.first - 1 <= step < self.last:
            import tensorflow as tf

            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                tf.profiler.experimental.start(str(self.directory))
            except (OSError, tf.errors.OpError) as error:  # a diagnosis: the run goes on
                self.done = True
                self.log(f"--profile: could not start TensorFlow's profiler into "
                         f"{self.directory} ({error}): nothing profiled, training goes on")
                return
            self.started_at = step
            self.log(f"profiling updates {step + 1}-{self.last} into {self.directory}")
        elif self.started_at is not None and step >= self.last:
            self.stop(step)
        elif self.started_at is None and step >= self.last:
            self.done = True
            self.log(f"--profile: updates {self.first}-{self.last} were made before this run "
                     f"(it resumed at step {step}): nothing profiled")

    def stop(self, step: int) -> None:
        """Stop tracing (after update `step`) and write the trace; when tracing never began
        (the run ended before the range, or made no update), say that nothing was profiled. A
        trace that cannot be written is said, not raised: the run's own end (its checkpoint, its
        exit status, its error) stands."""
        if self.done:
            return
        self.done = True
        if self.started_at is None:
            self.log(f"--profile: the run stopped at step {step}, before update {self.first}: "
                     f"nothing profiled" if step < self.first else
                     f"--profile: the run made no update (at step {step}): nothing profiled")
            return
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
        except (OSError, tf.errors.OpError) as error:
            self.log(f"--profile: the trace of updates {self.started_at + 1}-{step} could not "
                     f"be written under {self.directory}: {error}")
            return
        early = "" if step >= self.last else f" (the run stopped at step {step})"
        self.log(f"profile of updates {self.started_at + 1}-{step}{early} written under "
                 f"{self.directory}: TensorBoard's profile plugin shows it (tensorboard --logdir "
                 f"{self.directory}), `python benchmarks/xplane_summary.py {self.directory} "
                 f"--updates {step - self.started_at}` summarizes it")
