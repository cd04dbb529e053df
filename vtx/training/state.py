"""The run state: where a run is and what it has counted, as every checkpoint keeps it.

One dataclass with one mapping to and from a checkpoint's meta (`to_meta`, `load_meta`): a run
resumed from a checkpoint takes every field back exactly, so a kill mid-training resumes the same
run. The weights, the optimizer's variables and the configuration are the checkpoint's other
parts (`vtx.training.checkpointing`).
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass
class RunState:
    """What a run counts and where it is; fresh for a new run, then as checkpoints restore it."""

    # Updates applied (skipped ones not counted).
    step: int = 0
    # Per worker, (epoch, batches of the epoch already trained on): where its data resumes.
    positions: list[tuple[int, int]] = dataclasses.field(default_factory=lambda: [(0, 0)])
    skipped: int = 0  # updates skipped for a non-finite loss or float16 overflow
    diverged: int = 0  # updates whose loss diverged (applied and counted)
    best_valid: float = math.inf  # the lowest validation loss so far
    best_score: float | None = None  # the best task metric so far (higher is better)
    best_step: int | None = None  # the step of the best validation (by the chosen metric)
    since_best: int = 0  # validations since the best one (what --patience counts)
    # Wall seconds of every run of this save dir before this process.
    elapsed_seconds: float = 0.0
    # The padded batch lengths the positions refer to (`pipeline.optimal_boundaries`); None
    # when unknown.
    bucket_boundaries: list[int] | None = None
    # The (rows, source, target) shapes of packed training batches (`vtx.data.packing`); None:
    # bucketed batches.
    packed_shapes: list[tuple[int, int, int]] | None = None
    # What identifies the training pairs the positions count (`DataDirectory.training_data`): this
    # run's, set by the caller; a checkpoint's is compared with it, never taken.
    training_data: dict | None = None
    # The step's validation was interrupted by a stop signal: made first when resumed.
    validation_pending: bool = False
    # The checkpoint a fine-tuning run started from (`vtx train --finetune-from`); None: a run
    # from random weights.
    finetuned_from: str | None = None
    # The learning rate's cooldown window (start, end] (`--cooldown`): falling linearly to 0 by
    # update `end`, the run's last; None: none (yet). Kept once begun: the run's own schedule.
    cooldown: tuple[int, int] | None = None

    @classmethod
    def fresh(cls, num_workers: int) -> "RunState":
        """A new run's state, every worker at the start of epoch 0."""
        return cls(positions=[(0, 0)] * num_workers)

    def to_meta(self, elapsed_seconds: float) -> dict:
        """The checkpoint meta's fields of this state; `elapsed_seconds`: every run's so far,
        this process's included."""
        return {"step": self.step, "positions": [list(p) for p in self.positions],
                "skipped": self.skipped, "diverged": self.diverged,
                "best_valid": self.best_valid, "best_score": self.best_score,
                "validations_since_best": self.since_best, "best_step": self.best_step,
                "elapsed_seconds": elapsed_seconds,
                "bucket_boundaries": self.bucket_boundaries,
                "validation_pending": self.validation_pending,
                "packed_shapes": ([list(shape) for shape in self.packed_shapes]
                                  if self.packed_shapes else None),
                "training_data": self.training_data, "finetuned_from": self.finetuned_from,
                "cooldown": list(self.cooldown) if self.cooldown else None}

    def load_meta(self, meta: dict) -> None:
        """Take a checkpoint's state (`to_meta`'s fields) in place, keeping this run's
        `training_data`. Fields a checkpoint does not hold take their fresh values."""
        packed = meta.get("packed_shapes")
        self.step, self.skipped = meta["step"], meta.get("skipped", 0)
        self.positions = [tuple(p) for p in meta["positions"]]
        self.diverged = meta.get("diverged", 0)
        self.best_valid = meta.get("best_valid", math.inf)
        self.best_score = meta.get("best_score")
        self.best_step = meta.get("best_step")
        self.since_best = meta.get("validations_since_best", 0)
        self.elapsed_seconds = meta.get("elapsed_seconds", 0.0)
        self.bucket_boundaries = meta.get("bucket_boundaries")
        self.packed_shapes = [tuple(shape) for shape in packed] if packed else None
        self.validation_pending = meta.get("validation_pending", False)
        self.finetuned_from = meta.get("finetuned_from")
        cooldown = meta.get("cooldown")
        self.cooldown = (int(cooldown[0]), int(cooldown[1])) if cooldown else None
