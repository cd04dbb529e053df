"""The run state: where a run is and what it has counted, as every checkpoint keeps it.

One dataclass with one mapping to and from a checkpoint's meta (`to_meta`, `load_meta`): a run
resumed from a checkpoint takes every field back exactly, so a kill mid-training resumes the same
run. The weights, the optimizer's variables and the configuration are the checkpoint's other
parts (`vtx.training.checkpointing`).
"""

from __future__ import annotations

import dataclasses
import math

from vtx.data.batching import BatchPlan


def _read_as(read):
    """A field's metadata: how its value is read back from the checkpoint's JSON (lists)."""
    return {"read": read}


# A field that a checkpoint records but a resumed run does not take: this run's, compared.
_THIS_RUNS = {"compared": True}


@dataclasses.dataclass
class RunState:
    """What a run counts and where it is; fresh for a new run, then as checkpoints restore it.
    Each field is kept in a checkpoint's meta under its own name (tuples as JSON lists), but
    `batches`, under the plan's own names."""

    # Updates applied (skipped ones not counted).
    step: int = 0
    # Per worker, (epoch, batches of the epoch already trained on): where its data resumes.
    positions: list[tuple[int, int]] = dataclasses.field(
        default_factory=lambda: [(0, 0)],
        metadata=_read_as(lambda value: [tuple(position) for position in value]))
    skipped: int = 0  # updates skipped for a non-finite loss or float16 overflow
    diverged: int = 0  # updates whose loss diverged (applied and counted)
    best_valid: float = math.inf  # the lowest validation loss so far
    best_score: float | None = None  # the best task metric so far (higher is better)
    best_step: int | None = None  # the step of the best validation (by the chosen metric)
    validations_since_best: int = 0  # validations since the best one (what --patience counts)
    # Wall seconds of every run of this save dir before this process.
    elapsed_seconds: float = 0.0
    # How the data is cut into the batches the positions count (`vtx.data.batching`): its
    # checkpoint fields are the plan's own (`BatchPlan.to_meta`); None: unknown (a run's caller
    # sets it before `fit`).
    batches: BatchPlan | None = dataclasses.field(
        default=None, metadata={"read": BatchPlan.recorded, "write": BatchPlan.to_meta})
    # What identifies the training pairs the positions count (`DataDirectory.training_data`): this
    # run's, set by the caller; a checkpoint's is compared with it, never taken.
    training_data: dict | None = dataclasses.field(default=None, metadata=_THIS_RUNS)
    # The step's validation was interrupted by a stop signal: made first when resumed.
    validation_pending: bool = False
    # The checkpoint a fine-tuning run started from (`vtx train --finetune-from`); None: a run
    # from random weights.
    finetuned_from: str | None = None
    # The learning rate's cooldown window (start, end] (`--cooldown`): falling linearly to 0 by
    # update `end`, the run's last; None: none (yet). Kept once begun: the run's own schedule.
    cooldown: tuple[int, int] | None = dataclasses.field(
        default=None,
        metadata=_read_as(lambda value: (int(value[0]), int(value[1])) if value else None))

    @classmethod
    def fresh(cls, num_workers: int) -> "RunState":
        """A new run's state, every worker at the start of epoch 0."""
        return cls(positions=[(0, 0)] * num_workers)

    def to_meta(self, elapsed_seconds: float) -> dict:
        """The checkpoint meta's fields of this state; `elapsed_seconds`: every run's so far,
        this process's included."""
        meta = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if write := field.metadata.get("write"):
                meta.update(write(value if value is not None else BatchPlan(None)))
            else:
                meta[field.name] = _as_json(value)
        meta["elapsed_seconds"] = elapsed_seconds
        return meta

    def load_meta(self, meta: dict) -> None:
        """Take a checkpoint's state (`to_meta`'s fields) in place, keeping this run's
        `training_data`. Fields a checkpoint does not hold take their fresh values; `step` and
        `positions` it must hold."""
        fresh = RunState()
        for field in dataclasses.fields(self):
            if field.metadata.get("compared"):
                continue
            read = field.metadata.get("read")
            if field.metadata.get("write"):  # a value of several fields, read from them all
                value = meta
            elif field.name in ("step", "positions"):
                value = meta[field.name]
            else:
                value = meta.get(field.name, getattr(fresh, field.name))
            setattr(self, field.name, read(value) if read else value)


def _as_json(value):
    """`value` with its tuples as lists (how JSON keeps them)."""
    if isinstance(value, (tuple, list)):
        return [_as_json(item) for item in value]
    return value
