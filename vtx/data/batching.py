"""The batch plan of a training run: its buckets' padded lengths, each bucket's side lengths and
its packed shapes, chosen once from the data for a new run (`BatchPlan.choose`) or kept from the
checkpoint a run resumes from (`BatchPlan.from_meta`), so that the data position a checkpoint
keeps names the same batches whatever the flags of the run resuming it.

Shapes: a batch shape is (rows, source length, target length).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from vtx.config import ModelConfig, TrainConfig
from vtx.data import packing, pipeline
from vtx.data.directory import DataDir, DataDirectory, checked_reading

Shape = tuple[int, int, int]


def format_shape(shape: Shape) -> str:
    """rows x length, or rows x source length x target length when the sides differ."""
    rows, source, target = shape
    return f"{rows}x{source}" if source == target else f"{rows}x{source}x{target}"


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How a run cuts its data into batches. A checkpoint records `boundaries` and `packed`
    (`to_meta`); `sides` are derived from the data and the boundaries, so a resumed run cuts
    the same batches."""

    # The buckets' padded lengths (`pipeline.bucket_boundaries_for`); None: unknown (a plan read
    # from a checkpoint written before they were recorded).
    boundaries: list[int] | None
    # The packed training batches' shapes (`vtx.data.packing`); None: training in buckets.
    # Validation is in buckets either way.
    packed: list[Shape] | None = None
    # Each bucket's (source, target) padded lengths (`pipeline.side_lengths_for`); None: not
    # derived (a plan as a checkpoint records it).
    sides: list[tuple[int, int]] | None = None

    def to_meta(self) -> dict:
        """The checkpoint meta's fields of this plan."""
        return {"bucket_boundaries": self.boundaries,
                "packed_shapes": [list(shape) for shape in self.packed] if self.packed else None}

    @classmethod
    def recorded(cls, meta: dict) -> "BatchPlan":
        """The plan as a checkpoint's meta records it (`to_meta`), its sides not derived."""
        packed = meta.get("packed_shapes")
        return cls(meta.get("bucket_boundaries"),
                   [tuple(shape) for shape in packed] if packed else None)

    @classmethod
    def choose(cls, shaped: DataDir, splits: tuple[str, ...], train_config: TrainConfig,
               model_config: ModelConfig, log: Callable[[str], None]) -> "BatchPlan":
        """A new run's plan over the pairs of `splits` in `shaped` (the data, or the view of a
        subword sampler's epochs): the lengths of the fewest positions an epoch, packed rows
        where `--pack` asks or, by default with XLA, where they cost fewer FLOPs.

        Raises:
            ValueError: a pair longer than the model's positions or than --max-tokens holds.
        """
        policy = pipeline.shape_policy(train_config.jit_compile, train_config.max_shapes)
        boundaries = pipeline.bucket_boundaries_for(shaped, splits, **policy,
                                                    max_tokens=train_config.max_tokens)
        for split in splits:
            pipeline.check_positions(shaped, split, model_config.max_positions)
            pipeline.check_max_tokens(shaped, split, train_config.max_tokens, boundaries)
        sides = pipeline.side_lengths_for(shaped, splits, boundaries, policy["step"])
        return cls(boundaries, _packing(shaped, train_config, model_config, boundaries, sides,
                                        policy["step"], log), sides)

    @classmethod
    def from_meta(cls, meta: dict, new: "BatchPlan", data: DataDirectory, shaped: DataDir,
                  splits: tuple[str, ...], train_config: TrainConfig,
                  log: Callable[[str], None]) -> "BatchPlan":
        """The plan of a run resumed from a checkpoint of `meta`: its lengths and packing
        (those of a checkpoint from before the lengths were recorded: the 8 multiples of 8 used
        then), what a new run with these flags would use (`new`, `choose`'s) said where it
        differs. The kept lengths are checked against the deterministic pairs of `data`: sampled
        pairs they do not hold fall back to those.

        Raises:
            ValueError: --max-tokens cannot hold the longest pair at the kept lengths.
        """
        kept = cls.recorded(meta)
        boundaries = kept.boundaries or pipeline.bucket_boundaries_for(data, splits)
        if boundaries != new.boundaries:
            log(f"batch lengths kept from the checkpoint so that the data resumes where it was: "
                f"{boundaries} (a new run with these flags would use {new.boundaries})")
            for split in splits:
                pipeline.check_max_tokens(data, split, train_config.max_tokens, boundaries)
        if kept.packed != new.packed:
            log(f"training batches kept as the checkpoint's so that the data resumes where it "
                f"was: {_said(kept.packed)} (a new run with these flags would use "
                f"{_said(new.packed)})")
        step = pipeline.shape_policy(train_config.jit_compile)["step"]
        return cls(boundaries, kept.packed,
                   pipeline.side_lengths_for(shaped, splits, boundaries, step))

    def training_shapes(self, shaped: DataDir, train_config: TrainConfig, has_valid: bool,
                        log: Callable[[str], None]) -> list[Shape]:
        """The training batches' shapes (packed, or the buckets'), said with the share of their
        positions that hold a real token, and the validation batches' (the buckets') when they
        differ."""
        shapes = pipeline.batch_shapes(train_config.max_tokens, self.boundaries, self.sides)
        listed = ", ".join(format_shape(shape) for shape in shapes)
        if self.packed:
            if has_valid:
                log(f"batch shapes (rows x length, or rows x source x target), validation: "
                    f"{listed}")
            fill = packing.packed_fill(shaped, self.packed, seed=train_config.seed)
            log(f"training batches packed, several pairs a row: "
                f"{', '.join(format_shape(shape) for shape in self.packed)}; "
                f"{fill:.3f} of their positions hold a real token")
            return self.packed
        fill = pipeline.position_fill(shaped, "train", train_config.max_tokens, self.boundaries,
                                      self.sides)
        log(f"batch shapes (rows x length, or rows x source x target), "
            f"{'training and validation' if has_valid else 'training'}: {listed}")
        log(f"padding: {fill:.3f} of the training batches' positions hold a real token "
            f"({len(shapes)} shapes; --max-shapes sets how many, --pack packs pairs instead)")
        return shapes

    def readers(self, data: DataDirectory, train_config: TrainConfig, shards: int, shard: int,
                sampler=None, max_positions: int | None = None) -> tuple[Callable, Callable]:
        """(make_epoch, make_valid) for `Trainer.fit`: `make_epoch(epoch, skip)` gives this
        worker's training batches of an epoch (packed, or in buckets), after the first `skip`,
        of `data`'s pairs or of `sampler`'s for the epoch (`vtx.data.subword`: each sampled pair
        that the batch shapes or `max_positions` do not hold as preprocessed); `make_valid()`
        the validation batches, read once and kept."""

        def fits(source, target):  # int [n] source and target_in lengths -> bool [n]
            if self.packed:
                held = packing.fits_packed(source, target, self.packed)
            else:
                held = pipeline.fits_buckets(source, target, self.boundaries, self.sides)
            return held & (np.maximum(source, target) <= max_positions)

        def make_epoch(epoch: int, skip: int):
            pairs = sampler.epoch(epoch, fits) if sampler else data
            if self.packed:
                batches = packing.packed_batches(
                    pairs, self.packed, seed=train_config.seed, epoch=epoch, skip_batches=skip,
                    num_shards=shards, shard_index=shard)
            else:
                batches = pipeline.train_batches(
                    pairs, max_tokens=train_config.max_tokens, seed=train_config.seed,
                    epoch=epoch, skip_batches=skip, num_shards=shards, shard_index=shard,
                    bucket_boundaries=self.boundaries,
                    side_lengths=self.sides).as_numpy_iterator()
            # A shard is read (tf.data) or mapped (packing) as an epoch goes, long after the
            # start checked it: one damaged since is named.
            return checked_reading(batches, pairs)

        cached = []

        def make_valid():
            if not cached:
                cached.extend({k: v for k, v in batch.items() if k != "index"}
                              for batch in pipeline.eval_batches(
                                  data, "valid", train_config.max_tokens,
                                  bucket_boundaries=self.boundaries,
                                  side_lengths=self.sides).as_numpy_iterator())
            return cached

        return make_epoch, make_valid


def _packing(shaped: DataDir, train_config: TrainConfig, model_config: ModelConfig,
             boundaries: list[int], sides: list[tuple[int, int]], step: int,
             log: Callable[[str], None]) -> list[Shape] | None:
    """The packed shapes of a new run's training batches, None for buckets: `--no-pack`;
    `--pack`: the packing of the fewest FLOPs an epoch (`packing.choose_shapes`); by default
    that packing with XLA where it costs fewer FLOPs than the buckets (packed rows are long,
    and attention grows with their length)."""
    if train_config.pack is False or (train_config.pack is None
                                      and not train_config.jit_compile):
        return None
    shapes, ratio = packing.choose_shapes(
        shaped, train_config.max_tokens, step, model_config,
        pipeline.epoch_batch_counts(shaped, "train", train_config.max_tokens, boundaries, sides),
        all_positions_projected=train_config.jit_compile, seed=train_config.seed)
    packed = train_config.pack or ratio < 1
    log(f"training batches {'packed' if packed else 'in length buckets'} (--pack/--no-pack "
        f"choose): packed rows {' + '.join(format_shape(shape) for shape in shapes)} cost "
        f"{ratio:.3f} of the buckets' FLOPs an epoch (estimated)")
    return shapes if packed else None


def _said(packed: list[Shape] | None) -> str:
    return ("packed rows " + " + ".join(format_shape(shape) for shape in packed) if packed
            else "buckets")
