"""The host side of training: updates, validation, checkpoint cadence, time budget, signals.

`TrainingLoop` launches the engine's compiled updates (`engine.py`: `start_update`), reads their
sums (`read_update`), counts steps, skips and divergence in the run state (`state.py`),
validates, saves through the checkpointer (`checkpointing.py`; the file format:
`vtx.checkpoints`) and stops; several workers agree through the collectives (`distribute.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
from typing import Callable, Iterable

import numpy as np

from vtx import atomic, checkpoints, stop
from vtx.errors import SearchInterrupted, TrainingError
from vtx.training.checkpointing import Checkpointer
from vtx.training.compiling import ShapeCompiler
from vtx.training.directory import RunDirectory
from vtx.training.distribute import peer_failure
from vtx.training.engine import UpdateEngine
from vtx.training.profile import StepProfiler
from vtx.training.progress import Progress
from vtx.training.state import RunState
from vtx.training.stream import BatchStream, PrefetchedStream
from vtx.training.validation import Score

# An update's loss (nats per target token) diverges when it exceeds both DIVERGENCE_FACTOR times
# and DIVERGENCE_MARGIN above the running mean of the updates before it with batches as long:
# far beyond the noise of a healthy run, whose loss only drifts slowly. Each batch length has its
# own mean: the loss per token grows with the length, and a bucket of the longest pairs alone
# stands far above the rest (on the WSJ sample, the batch of its two longest trees, once an
# epoch, has twice the loss of the others under the same weights).
DIVERGENCE_FACTOR, DIVERGENCE_MARGIN = 2.0, 1.0
RUNNING_MEAN_WEIGHT = 0.05  # of the newest update in the running mean
# float16's loss scale halves at each overflow: at this or below (fairseq's --min-loss-scale)
# the gradients overflow whatever the scale, and training stops instead of skipping forever.
MIN_LOSS_SCALE = 1e-4


@contextlib.contextmanager
def peer_failures_said(num_workers: int):
    """Within it, a collective's error that says another of `num_workers` workers is gone is
    raised as a TrainingError saying so (`distribute.peer_failure`)."""
    try:
        yield
    except Exception as error:
        if message := peer_failure(error, num_workers):
            raise TrainingError(message) from error
        raise


class TrainingLoop:
    """The host side of one run: `fit` drives the engine's updates, validations and the
    checkpointer's saves, keeping the run state's counters.

    Args:
        engine: the device side (updates, evaluation, batch placement).
        checkpointer: writes and resumes the run's checkpoints.
        compiler: compiles the update for every batch shape before the first (with XLA).
        state: the run state, resumed and saved with every checkpoint.
        run_dir: the save dir: checkpoints, history and learning curve.
        log: receives progress lines.
        clock: seconds from an arbitrary origin, for the time budget, the save cadence and the
            progress lines (tests pass a fake one).
        launch_ahead: launch each update before reading the one before when the host has
            nothing to do in between (one worker only): no host synchronisation between updates;
            False reads every update before the next (the same model either way).
        prefetch: training batches `fit` reads and places on the devices ahead of the updates,
            on a thread of its own (`stream.PrefetchedStream`); 0: each made and placed on the
            training thread as its update starts (the same model either way).
        tensorboard_dir: optional TensorBoard log directory.
        profiler: traces chosen updates (`profile.StepProfiler`), or None.
    """

    def __init__(self, engine: UpdateEngine, checkpointer: Checkpointer, compiler: ShapeCompiler,
                 state: RunState, run_dir: RunDirectory, log: Callable[[str], None],
                 clock: Callable[[], float], launch_ahead: bool = True, prefetch: int = 2,
                 tensorboard_dir: str | None = None, profiler: StepProfiler | None = None):
        self.engine, self.checkpointer, self.compiler, self.state = (engine, checkpointer,
                                                                     compiler, state)
        self.config, self.topology, self.collectives = (engine.config, engine.topology,
                                                        engine.collectives)
        self.run_dir, self.save_dir = run_dir, run_dir.path
        self.log, self.clock = log, clock
        self.launch_ahead, self.prefetch = launch_ahead, prefetch
        self._tensorboard_dir, self._profiler = tensorboard_dir, profiler
        self.stop_signal: int | None = None  # received by the handlers `fit` sets
        self.compiling = False  # inside fit's compile_shapes (what a stop signal waits for)
        self._resumed = False

    def resume(self) -> None:
        """Restore the newest checkpoint of `save_dir` that loads (`Checkpointer.resume`);
        `fit` calls it when it has not been called."""
        self._resumed = True
        self.checkpointer.resume(self.state)
        resumed_from = self.checkpointer.resumed_from
        packed = self.state.batches.packed if self.state.batches else None
        if packed and resumed_from is not None:
            self.engine.keep_packed_shapes(resumed_from, packed)

    def _request_stop(self, signum, frame) -> None:
        self.stop_signal = signum
        if self.compiling:
            self.log(f"received signal {signum}: stopping when the batch shapes under way are "
                     f"compiled, before any update")
        else:
            self.log(f"received signal {signum}: saving a checkpoint after the update or "
                     f"validation under way (a BLEU/F1 decoding stops at its next batch), then "
                     f"exiting")

    def fit(self, make_epoch: Callable[[int, int], Iterable[dict]],
            make_valid: Callable[[], Iterable[dict]] | None = None,
            score_valid: Callable[..., Score] | None = None,
            shapes: list[tuple[int, int]] | None = None) -> int | None:
        """Train until `max_steps`, resuming from the newest checkpoint of `save_dir` that loads.

        Args:
            make_epoch: `(epoch, skip_batches) -> batches` of this worker's shard.
            make_valid: `() -> batches` of the validation set (the same on every worker).
            score_valid: `(should_stop) -> Score` of the model on the validation set by a task
                metric (`vtx.training.validation`), called at each validation on every worker;
                needed when `best_checkpoint_metric` is not "loss". It asks `should_stop()`
                between its decoding batches and raises `SearchInterrupted` when told to: a
                stop signal then saves the step at once, its validation left to the resumed
                run, which makes it before its first update.
            shapes: the (rows, source length, target length) of every batch the data makes
                (`pipeline.batch_shapes`):
                with XLA (`jit_compile`) each is compiled before the first update, so that no
                update ever waits for a compilation.

        Returns:
            None when `max_steps` was reached, the `max_minutes` budget ran out or `patience`
            validations brought no new best (a checkpoint is saved in each case); the signal
            number when SIGTERM/SIGINT stopped it.

        Raises:
            TrainingError: too many non-finite losses in a row, out of memory, or another worker
                gone (TensorFlow's collective error said as such).
        """
        with peer_failures_said(self.topology.num_workers):
            return self._fit(make_epoch, make_valid, score_valid, shapes)

    def _fit(self, make_epoch, make_valid, score_valid, shapes) -> int | None:
        metric = self.config.best_checkpoint_metric
        if metric != "loss" and (score_valid is None or make_valid is None):
            raise TrainingError(f"the best checkpoint is chosen by {metric}, but no validation "
                                f"set or {metric} scorer was given")
        if not self._resumed:
            self.resume()
        self.save_dir.mkdir(parents=True, exist_ok=True)
        if self.topology.is_chief:
            self.run_dir.lock(self.log)  # held since `resume` where the save dir existed
            self.run_dir.say_holder()
            for path, size in atomic.remove_stale_temporaries(self.save_dir):
                self.log(f"removed {path} ({size / 2**20:.1f} MiB): a write interrupted when "
                         f"an earlier run was killed")
            self._complete_best()
        stream = BatchStream(make_epoch, *self.state.positions[self.topology.worker_index])
        if self.prefetch:
            stream = PrefetchedStream(stream, self.engine.place_batch, self.prefetch)
        handlers = {s: signal.signal(s, self._request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        # A signal before these handlers whose exception a library swallowed (`vtx.stop`) stops
        # the run as one received now: at its first update, saved.
        claimed = stop.claim()
        self.stop_signal = self.stop_signal or claimed
        try:
            if self.config.jit_compile and shapes:
                # Before the progress clock starts: compiling is not training (tokens/s, ETA).
                self.compiling = True
                try:
                    packed = bool(self.state.batches and self.state.batches.packed)
                    self.compiler.compile_shapes(shapes, packed)
                finally:
                    self.compiling = False
                # Compiling takes minutes on a GPU: a stop signal received meanwhile stops now.
                # Nothing was trained since the checkpoint resumed from, so nothing is saved.
                if stopped := self._agreed_stop(self.stop_signal is not None):
                    signum, received = stopped
                    self.log(f"stopped before the first update ({received}): nothing trained "
                             f"since step {self.state.step}, no checkpoint to write")
                    return signum
            progress = Progress(self.save_dir, self.config.max_steps,
                                self.log if self.topology.is_chief else (lambda line: None),
                                self._tensorboard_dir if self.topology.is_chief else None,
                                time_budget_seconds=60 * self.config.max_minutes or None,
                                clock=self.clock, start_step=self.state.step,
                                elapsed_before=self.state.elapsed_seconds,
                                history=self.topology.is_chief)
            return self._loop(stream, progress, make_valid, score_valid)
        finally:
            if self._profiler:
                self._profiler.stop(self.state.step)
            stream.close()
            self.run_dir.unlock()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def nothing_to_train(self) -> str | None:
        """Why the run as resumed makes no update (a pending validation is still made), or None."""
        if self.state.step >= self.config.max_steps:
            return (f"step {self.state.step} is already at the step limit {self.config.max_steps} "
                    f"(--max-steps; raise it to go on)")
        if self.state.step >= self.last_step:
            return (f"step {self.state.step} ends the run's cooldown (its learning rate fell to 0 "
                    f"over steps {self.state.cooldown[0] + 1}-{self.last_step}; --cooldown 0 "
                    f"trains on at the paper's rate)")
        since_best = self.state.validations_since_best
        if self.config.patience and since_best >= self.config.patience:
            # The run that saved this checkpoint stopped by patience: the same command again (a
            # requeued job) trained on past it, and wrote checkpoints after the best one.
            return (f"the run stopped at step {self.state.step} with no better "
                    f"{self.config.best_checkpoint_metric} in {since_best} validations "
                    f"(--patience {self.config.patience}; raise it to go on)")
        return None

    def _validate(self, make_valid, score_valid, progress) -> bool | None:
        """Validation loss (and task metric); returns whether this is the best validation, or
        None when a stop signal interrupted the task metric's decoding on any worker (nothing
        recorded: the step is validated again when resumed)."""
        # A signal received during the update: the loss alone would be thrown away.
        if score_valid is not None and self.collectives.any_worker(self.stop_signal is not None):
            return None
        # --validate-with-ema: the model holds the EMA's weights for the validation (swapped back
        # after it, exactly).
        with self.engine.validated_weights(averaged=self.config.validate_ema):
            loss, nll = self.engine.evaluate(make_valid())
            score, interrupted = None, False
            if score_valid is not None:
                try:
                    # Each worker asks its own flag (their decoding batches may differ in
                    # number: each sizes them by its own memory); they agree once it is over.
                    score = score_valid(lambda: self.stop_signal is not None)
                except SearchInterrupted:
                    interrupted = True
        if score_valid is not None:
            if self.collectives.any_worker(interrupted):
                return None
            if self.topology.num_workers > 1:
                # Each worker decodes in batches sized by its own memory, which can move a beam
                # tie: the chief's score decides for all, so they agree on the best and patience.
                chief = self.collectives.every_worker(score.value)[0]
                score = dataclasses.replace(score, value=chief)
        if self.config.best_checkpoint_metric == "loss":
            is_best = loss < self.state.best_valid
        else:
            is_best = self.state.best_score is None or score.value > self.state.best_score
        self.state.best_valid = min(self.state.best_valid, loss)
        state = self.state
        if score is not None and (state.best_score is None or score.value > state.best_score):
            state.best_score = score.value
        state.validations_since_best = 0 if is_best else state.validations_since_best + 1
        if is_best:
            self.state.best_step = self.state.step
        progress.report_valid(self.state.step, loss, nll, is_best, score)
        return is_best

    def _complete_best(self) -> None:
        """Copy the checkpoint resumed from into checkpoint_best when it is the best and the
        copy is not there: a run killed between writing a new best's numbered checkpoint and
        copying it resumed believing it done, and checkpoint_best kept an older step for good
        (what `average-checkpoints --upper-bound best` and the recipes read)."""
        if self.checkpointer.resumed_from is None or self.state.best_step != self.state.step:
            return
        best = self.save_dir / checkpoints.BEST_NAME
        kept = checkpoints.read_meta(best) if best.exists() else None
        if kept is None or kept.get("step") != self.state.step:
            atomic.copy_file(self.checkpointer.resumed_from, best)
            self.log(f"{best} now holds step {self.state.step}, the best (the run that saved it "
                     f"was stopped before copying it; it held "
                     f"{'nothing' if kept is None else 'step ' + str(kept.get('step'))})")

    def _watch_divergence(self, loss: float, watch: dict, length: int | None = None) -> bool:
        """Whether this update's loss diverged from the running mean of the updates with batches
        of this `length` (the longest target row of the update; None: one mean for all), the
        first of a length never (counted and logged).

        Raises:
            TrainingError: `max_diverged_in_a_row` diverging updates in a row.
        """
        mean = watch["means"].get(length)
        if mean is None:  # nothing to judge by; nor does it end a diverging series
            watch["means"][length] = loss
            return False
        if loss > max(DIVERGENCE_FACTOR * mean, mean + DIVERGENCE_MARGIN):
            self.state.diverged, watch["in_a_row"] = self.state.diverged + 1, watch["in_a_row"] + 1
            self.log(f"warning: loss {loss:.4g} at step {self.state.step} is far above its "
                     f"running mean {mean:.3f} ({watch['in_a_row']} such updates in a row, "
                     f"{self.state.diverged} in all); no routine checkpoint is saved until it comes back (a new best "
                     f"validation still is)")
            if watch["in_a_row"] >= self.config.max_diverged_in_a_row:
                raise TrainingError(
                    f"training diverged: the loss stayed far above its running mean {mean:.3f} "
                    f"for {watch['in_a_row']} updates (now {loss:.4g} at step "
                    f"{self.state.step}); the checkpoints written before are kept: lower --lr-scale (now "
                    f"{self.config.lr_scale:g}) or raise --warmup-steps, and resume")
            return True
        watch["in_a_row"] = 0
        watch["means"][length] = (1 - RUNNING_MEAN_WEIGHT) * mean + RUNNING_MEAN_WEIGHT * loss
        return False

    def _loop(self, stream, progress, make_valid, score_valid) -> int | None:
        """Updates until a stop; the next update is launched before the last one is read when
        the host has nothing to do after it (see `_may_launch_ahead`), so the device never waits
        for the host's book-keeping."""
        loop = _LoopState(started=self.clock(), first_step=self.state.step)
        self._cooldown_at_start(progress)
        self.engine.forget_launched()
        loop.last_save = loop.last_read = loop.started
        # Every worker resumed the same step, but each from its own copy: they agree.
        pending = self.collectives.any_worker(self.state.validation_pending)
        self.state.validation_pending = False
        if pending and make_valid and self.config.validate_interval_steps:
            self.log(f"validating step {self.state.step} first: its validation was interrupted "
                     f"by the stop signal that ended the last run")
            # Saved again once validated (clock_due), so that a crash after it does not repeat
            # the validation (and its row of the history).
            done, result = self._after_update(stream, progress, make_valid, score_valid, loop,
                                              True, False, False, validate=True)
            if done:
                return result
            progress.leave_out(self.clock() - loop.started)
            loop.last_read = self.clock()
        if why := self.nothing_to_train():
            self.log(f"nothing to train: {why}")
            return None
        if self._profiler:
            self._profiler.at(self.state.step)
        pending = None  # the sums of an update launched and not yet read
        while True:
            if pending is None:
                if self.state.step >= self.last_step:
                    return None
                pending = self.engine.start_update(stream)
            ahead = (self.engine.start_update(stream)
                     if self._may_launch_ahead(loop, make_valid) else None)
            counted = self._count(self.engine.read_update(pending), progress, loop)
            pending = ahead
            if not counted:
                continue
            clock_due, out_of_time, stop = self._clock_flags(loop)
            cool = self._cooldown_pending() and self.clock() >= self._cooldown_time(loop)
            if pending is not None and (clock_due or out_of_time or stop or cool):
                # The host acts now (saves, stops): the update launched ahead is read first.
                self._count(self.engine.read_update(pending), progress, loop)
                pending = None
            if pending is None:
                paused = self.clock()
                done, result = self._after_update(stream, progress, make_valid, score_valid,
                                                  loop, clock_due, out_of_time, stop, cool)
                if done:
                    return result
                # Validating and saving are not training: left out of tokens/s and of the
                # next update's duration.
                paused = self.clock() - paused
                progress.leave_out(paused)
                loop.last_read += paused

    @property
    def last_step(self) -> int:
        """The run's last update: --max-steps, or the end of its cooldown where that is sooner."""
        window = self.state.cooldown if self.config.cooldown else None
        return min(self.config.max_steps, window[1]) if window else self.config.max_steps

    def _cooldown_at_start(self, progress: Progress) -> None:
        """The cooldown window as the run (re)starts: the one it began (kept in its checkpoint),
        else the last `--cooldown` of --max-steps; the clock may begin it sooner
        (`_begin_cooldown`)."""
        config, state = self.config, self.state
        begun = state.cooldown is not None and state.step >= state.cooldown[0]
        if not config.cooldown:
            window = None
        elif begun:
            window = state.cooldown
            self.log(f"resumed in the cooldown: the learning rate falls linearly to 0 by step "
                     f"{window[1]}, the last")
        else:
            window = (config.max_steps - round(config.cooldown * config.max_steps),
                      config.max_steps)
            clock = (f", or over the last {config.cooldown:g} of --max-minutes where that comes "
                     f"first" if config.max_minutes else "")
            self.log(f"cooldown: the learning rate falls linearly to 0 over steps "
                     f"{window[0] + 1}-{window[1]} (--cooldown {config.cooldown:g} of "
                     f"--max-steps){clock}")
        state.cooldown = window
        self.engine.set_cooldown(window)
        progress.max_steps = self.last_step

    def _cooldown_pending(self) -> bool:
        """Whether the clock may still begin the cooldown: --cooldown with --max-minutes, and the
        window not begun."""
        window = self.state.cooldown
        return (bool(self.config.cooldown and self.config.max_minutes)
                and (window is None or self.state.step < window[0]))

    def _cooldown_time(self, loop: "_LoopState") -> float:
        """The clock at which the time budget's cooldown begins."""
        return loop.started + 60 * self.config.max_minutes * (1 - self.config.cooldown)

    def _begin_cooldown(self, loop: "_LoopState", progress: Progress) -> None:
        """Begin the cooldown now, ending at the step the time budget is expected to run out at:
        this process's updates so far (validations included) at their mean pace. The workers
        agree on the soonest; --max-steps bounds it."""
        config, step = self.config, self.state.step
        used = self.clock() - loop.started
        per_update = used / max(step - loop.first_step, 1)
        end = step + max(1, int((60 * config.max_minutes - used) / per_update))
        end = min(int(min(self.collectives.every_worker(end))), config.max_steps)
        self.state.cooldown = (step, end)
        self.engine.set_cooldown(self.state.cooldown)
        progress.max_steps = end
        self.log(f"cooldown from step {step}, {used / 60:.1f} of {config.max_minutes:g} minutes "
                 f"in (--cooldown {config.cooldown:g}): the learning rate falls linearly to 0 "
                 f"by step {end}, the last ({per_update:.2f} s an update so far)")

    def _may_launch_ahead(self, loop: "_LoopState", make_valid) -> bool:
        """Whether the next update may be launched before the pending one is read: on one worker
        only (each worker's clock differs, their launches must not), and only when the host will
        not act after the pending one: no validation, save or last step at its step, no stop
        signal, and neither the time budget, its cooldown's start nor the save cadence expected
        by its end (the last update's duration after the last read)."""
        config, ending = self.config, self.state.step + 1  # the pending update's step, when finite
        if (not self.launch_ahead or self.topology.num_workers > 1
                or self.stop_signal is not None or ending >= self.last_step
                or (config.save_interval_steps and ending % config.save_interval_steps == 0)
                or (make_valid and config.validate_interval_steps
                    and ending % config.validate_interval_steps == 0)):
            return False
        if loop.seconds_per_update is None:
            return True
        ends_at = loop.last_read + loop.seconds_per_update
        return not ((config.max_minutes and ends_at - loop.started >= 60 * config.max_minutes) or
                    (self._cooldown_pending() and ends_at >= self._cooldown_time(loop)) or
                    (config.save_interval_minutes and
                     ends_at - loop.last_save >= 60 * config.save_interval_minutes))

    def _count(self, totals: np.ndarray, progress: Progress, loop: "_LoopState") -> bool:
        """Book-keeping of a read update: a non-finite one was skipped (counted; too many in a
        row stop training), and so was a finite one whose float16 gradients overflowed (counted;
        the loss scale was halved; a scale at most MIN_LOSS_SCALE stops training); else it is the
        next step, watched for divergence and logged. Returns whether it was a step.

        Raises:
            TrainingError: `max_nonfinite_in_a_row` non-finite updates in a row, the loss scale
                at most MIN_LOSS_SCALE, or divergence.
        """
        config, now = self.config, self.clock()
        loop.seconds_per_update, loop.last_read = now - loop.last_read, now
        length = self.engine.take_launched_length()
        loss_sum, nll_sum, tokens, stepped, loss_scale, nonfinite_grads = totals
        loss_scaled = config.precision == "mixed_float16"
        if not math.isfinite(loss_sum) or (nonfinite_grads and not loss_scaled):
            self.state.skipped += 1
            loop.nonfinite_in_a_row += 1
            what = "loss" if not math.isfinite(loss_sum) else "gradients"
            self.log(f"non-finite {what} at step {self.state.step + 1}: update skipped "
                     f"({loop.nonfinite_in_a_row} in a row, {self.state.skipped} in all)")
            if loop.nonfinite_in_a_row >= config.max_nonfinite_in_a_row:
                # A mixed_float16 checkpoint resumes under mixed_float16 only (its optimizer
                # state holds the loss scale): float32 is then another run.
                other = ("train with --precision float32 in another --save-dir (a mixed_float16 "
                         "checkpoint resumes with mixed_float16 only)" if loss_scaled
                         else "resume with --precision float32")
                raise TrainingError(f"{loop.nonfinite_in_a_row} non-finite updates in a row at "
                                    f"step {self.state.step + 1}; resume with a lower "
                                    f"--lr-scale (now {config.lr_scale:g}), or {other}")
            return False
        if not stepped:  # as fairseq: an overflow step is not an update (nor is its rate's step)
            self.state.skipped += 1
            self.log(f"float16 gradients overflowed at step {self.state.step + 1}: update "
                     f"skipped, loss scale halved to {loss_scale:g} ({self.state.skipped} skipped in all)")
            if loss_scale <= MIN_LOSS_SCALE:
                raise TrainingError(
                    f"float16 gradients overflow at every loss scale: the scale fell to "
                    f"{loss_scale:g}, at most {MIN_LOSS_SCALE:g} (fairseq's --min-loss-scale), at "
                    f"step {self.state.step + 1}; resume with a lower --lr-scale (now "
                    f"{config.lr_scale:g}), or train with --precision mixed_bfloat16 or float32 "
                    f"in another --save-dir (a mixed_float16 checkpoint resumes with "
                    f"mixed_float16 only: its optimizer state holds the loss scale)")
            return False
        self.state.step, loop.nonfinite_in_a_row = self.state.step + 1, 0
        loop.diverging = self._watch_divergence(loss_sum / max(tokens, 1.0), loop.watch, length)
        progress.add(loss_sum, nll_sum, tokens)
        if self.state.step % config.log_interval_steps == 0 or self.state.step == self.last_step:
            progress.report_train(self.state.step, self.engine.learning_rate(self.state.step),
                                  self.state.skipped, self.state.diverged)
        if self._profiler:
            self._profiler.at(self.state.step)
        return True

    def _clock_flags(self, loop: "_LoopState") -> tuple[bool, bool, bool]:
        """This worker's (save due by the clock, time budget used up, stop signal received).
        The budget counts this process only (a resumed run gets a fresh one)."""
        config, now = self.config, self.clock()
        clock_due = bool(config.save_interval_minutes) and (
            now - loop.last_save >= 60 * config.save_interval_minutes)
        out_of_time = bool(config.max_minutes) and now - loop.started >= 60 * config.max_minutes
        return clock_due, out_of_time, self.stop_signal is not None

    def _after_update(self, stream, progress, make_valid, score_valid, loop: "_LoopState",
                      clock_due: bool, out_of_time: bool, stop: bool, cool: bool = False,
                      validate: bool = False) -> tuple[bool, int | None]:
        """Validation, checkpoint and stop decisions after step `self.state.step` (no update in
        flight; `cool`: the clock says the cooldown begins; `validate`: validate whatever the
        step). Returns (whether to stop, `fit`'s return value)."""
        config = self.config
        # Every worker makes this collective or none: they share the config and the state.
        if self._cooldown_pending() and self.collectives.any_worker(cool):
            self._begin_cooldown(loop, progress)
        # Every worker must agree to stop, or the collectives of the next update would hang.
        out_of_time = self.collectives.any_worker(out_of_time)
        if out_of_time:
            self.log(f"time budget of {config.max_minutes:g} minutes used up at step "
                     f"{self.state.step}: saving a checkpoint and stopping")
        is_best = validated = False
        # The last step is validated too (time budget or max_steps), so that the best checkpoint
        # is chosen among all the updates made, not only up to the last interval.
        if make_valid and config.validate_interval_steps and (
                validate or self.state.step % config.validate_interval_steps == 0 or out_of_time
                or self.state.step == self.last_step):
            result = self._validate(make_valid, score_valid, progress)
            # A validation (decoding for BLEU or F1) can take minutes: a stop signal received
            # meanwhile saves now, not after one more update; one that interrupted it (on any
            # worker) leaves the step's validation to the resumed run, said in the checkpoint.
            self.state.validation_pending = result is None
            is_best, validated = bool(result), result is not None
            if self.state.validation_pending:
                self.log(f"validation of step {self.state.step} interrupted by a stop signal: "
                         f"saving step {self.state.step}, to be validated first when resumed")
            stop = stop or self.state.validation_pending or self.stop_signal is not None
        due = clock_due or bool(config.save_interval_steps and
                                self.state.step % config.save_interval_steps == 0)
        # Every worker computes the same validation, so they agree without a collective.
        since_best = self.state.validations_since_best
        patience_out = validated and bool(config.patience) and since_best >= config.patience
        if patience_out:
            self.log(f"no better {config.best_checkpoint_metric} in {since_best} "
                     f"validations (--patience {config.patience}) at step {self.state.step}: "
                     f"saving a checkpoint and stopping")
        out_of_time = out_of_time or patience_out
        # A diverging model is not saved by the cadence, only when the run ends here (signal,
        # budget, last step) or when it validated as the best yet: a validation outweighs one
        # update's loss (a batch of unusually long or hard pairs can spike alone).
        wants_save = bool(due and not loop.diverging or is_best or stop)
        # With a step cadence the numbered checkpoints are its multiples (and the run's end or
        # stop) alone, so that averaging the last N spans N x --save-interval-steps updates as
        # the paper's did; a best between them goes to checkpoint_best only.
        numbered = not (config.save_interval_steps and is_best and not due and not stop)
        if (self.collectives.any_worker(wants_save) or out_of_time
                or self.state.step == self.last_step):
            numbered = numbered or out_of_time or self.state.step == self.last_step
            path = self.checkpointer.save(self.state, stream, numbered)
            loop.last_save = self.clock()
            if path is not None:
                if is_best and numbered:
                    atomic.copy_file(path, self.save_dir / checkpoints.BEST_NAME)
                if progress.history_path.exists():
                    progress.plot()
        if stopped := self._agreed_stop(stop):
            signum, received = stopped
            self.log(f"stopping at step {self.state.step}, saved: {received}")
            return True, signum
        return out_of_time, None

    def _agreed_stop(self, stop: bool) -> tuple[int, str] | None:
        """Whether `stop` holds on any worker (one collective; the others would otherwise hang in
        the next update's): None when on none, else the signal to return (this worker's, else
        the first peer's) and which worker received which signal, for every worker's log (the
        others would stop saying nothing of why)."""
        table = self.collectives.gather(np.array([float(stop), float(self.stop_signal or 0)]))
        if not table[:, 0].any():
            return None
        received = [(worker, int(signum)) for worker, (_, signum) in enumerate(table) if signum]
        if not received:  # not expected: every stop comes of a signal kept by its worker
            return self.stop_signal or signal.SIGTERM, "a stop signal"
        said = []
        for worker, signum in received:
            this = " (this one)" if worker == self.topology.worker_index else ""
            who = "" if len(table) == 1 else f"worker {worker}{this} "
            said.append(f"{who}received signal {signum} ({_signal_name(signum)})")
        return self.stop_signal or received[0][1], " and ".join(said)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unnamed"


@dataclasses.dataclass
class _LoopState:
    """What the training loop carries from one update to the next (host side, this process)."""

    started: float  # clock at the loop's start: the time budget counts from here
    first_step: int = 0  # the step the loop started at
    last_save: float = 0.0
    last_read: float = 0.0  # clock when the last update's sums were read
    seconds_per_update: float | None = None  # between the last two reads
    nonfinite_in_a_row: int = 0
    diverging: bool = False  # the last step's loss is far above its running mean
    # the running mean of the loss by batch length (`_watch_divergence`), diverging in a row
    watch: dict = dataclasses.field(default_factory=lambda: {"means": {}, "in_a_row": 0})
