"""One training run, composed: the device-side engine (`engine.py`: model, optimizer, compiled
update), the checkpointer (`checkpointing.py`), the shape compiler (`compiling.py`), the host loop
(`loop.py`) and the run state they share (`state.py`).

`Trainer` builds them for a save dir and offers what a caller needs: `resume` (to check a save
dir before writing into it) and `fit`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import keras
import tensorflow as tf

from vtx.config import ModelConfig, TrainConfig
from vtx.training.checkpointing import Checkpointer
from vtx.training.compiling import ShapeCompiler
from vtx.training.directory import RunDirectory
from vtx.training.distribute import (Collectives, Topology, make_strategy, topology,
                                      unseen_gpus_warning)
from vtx.training.engine import UpdateEngine
from vtx.training.loop import TrainingLoop
from vtx.training.precision import AUTO, resolve_precision
from vtx.training.profile import StepProfiler
from vtx.training.state import RunState


class Trainer:
    """The model, optimizer, checkpoints and loop of one run.

    Args:
        model_config, train_config: what to train and how.
        save_dir: checkpoints, config, history and learning curve; resumed from when it has
            checkpoints (a path, or the `RunDirectory` opened on it).
        strategy: default `make_strategy()` (every GPU, or TF_CONFIG's cluster).
        log: receives progress lines.
        vocab: serialized SentencePiece model stored in every checkpoint.
        tensorboard_dir: optional TensorBoard log directory.
        clock: seconds from an arbitrary origin, for the time budget, the save cadence and the
            progress lines (tests pass a fake one).
        launch_ahead, prefetch: how the loop feeds the device (`TrainingLoop`).
        profile: (first, last): TensorFlow's profiler traces updates first to last
            (`profile.StepProfiler`; the chief worker only) into `tensorboard_dir`, else
            SAVE_DIR/profile.

    Attributes:
        engine, checkpointer, compiler, loop: the parts (see the module's docstring).
        state: the run state (`RunState`), fresh, then as `resume` restores it. `training_data`
            and `batches` (the run's `BatchPlan`) are the caller's to set before `fit`.
    """

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig,
                 save_dir: str | Path | RunDirectory,
                 strategy: tf.distribute.Strategy | None = None,
                 log: Callable[[str], None] = print, vocab: bytes | None = None,
                 tensorboard_dir: str | None = None,
                 clock: Callable[[], float] = time.monotonic, launch_ahead: bool = True,
                 prefetch: int = 2, profile: tuple[int, int] | None = None):
        run_dir = (save_dir if isinstance(save_dir, RunDirectory)
                   else RunDirectory.open(save_dir))
        strategy = strategy or make_strategy()
        workers = topology(strategy)
        collectives = Collectives(strategy, workers)
        # `auto` times bfloat16 where the CPU's flags do not settle it, a resumed run keeps its
        # checkpoint's precision instead, and several workers agree on one.
        precision, reason = resolve_precision(
            train_config.precision, (model_config.d_model, model_config.d_ff),
            run_dir.recorded_precision() if train_config.precision == AUTO else None,
            collectives.every_worker if workers.num_workers > 1 else None,
            train_config.jit_compile)
        requested_precision = train_config.precision
        train_config = dataclasses.replace(train_config, precision=precision)
        log(f"precision: {precision} ({reason}); devices: "
            f"{', '.join(strategy.extended.worker_devices)}")
        if warning := unseen_gpus_warning():
            log(warning)
        profiler = (StepProfiler(profile, tensorboard_dir or run_dir.profile_folder, log)
                    if profile and workers.is_chief else None)
        self.engine = UpdateEngine(model_config, train_config, strategy, workers, collectives,
                                   prefetch)
        self.state = RunState.fresh(workers.num_workers)
        self.checkpointer = Checkpointer(self.engine, run_dir, workers, collectives, log, vocab,
                                         requested_precision, clock)
        self.compiler = ShapeCompiler(self.engine, workers, log, clock,
                                      stop_signal=lambda: self.loop.stop_signal)
        self.loop = TrainingLoop(self.engine, self.checkpointer, self.compiler, self.state,
                                 run_dir, log, clock, launch_ahead, prefetch, tensorboard_dir,
                                 profiler)

    @property
    def model(self) -> keras.Model:
        """The Transformer being trained (`engine.model`)."""
        return self.engine.model

    @property
    def config(self) -> TrainConfig:
        """The run's training configuration, its precision resolved (never `auto`)."""
        return self.engine.config

    @property
    def topology(self) -> Topology:
        """The workers of the run and this process's place among them."""
        return self.engine.topology

    @property
    def resumed_from(self) -> Path | None:
        """The checkpoint `resume` restored, or None."""
        return self.checkpointer.resumed_from

    def start_from(self, start, path) -> None:
        """Start a run that resumed nothing from the weights of the checkpoint `start` read from
        `path` (`Checkpointer.start_from`: a fine-tuning's start)."""
        self.checkpointer.start_from(start, path, self.state)

    def resume(self) -> None:
        """Restore the newest checkpoint of the save dir that loads (damaged ones set aside);
        writes nothing else, so a caller can check a save dir before writing into it. `fit`
        calls it when it has not been called."""
        self.loop.resume()

    def nothing_to_train(self) -> str | None:
        """Why the run as resumed makes no update, or None (`TrainingLoop.nothing_to_train`)."""
        return self.loop.nothing_to_train()

    def fit(self, make_epoch, make_valid=None, score_valid=None, shapes=None) -> int | None:
        """Train until `max_steps`, a budget, patience or a signal (`TrainingLoop.fit`)."""
        return self.loop.fit(make_epoch, make_valid, score_valid, shapes)
