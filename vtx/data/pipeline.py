"""tf.data input pipeline over a data directory written by `vtx preprocess` (`vtx.data.preprocess`).

Public API (shapes: B batch, S source length, T target length; a bucket of padded length L
holds the pairs with max(S, T) <= L, and its batches are [B, S_L] and [B, T_L], each side
padded to the longest of that side in the bucket (`side_lengths_for`), so that a parser's
sources, shorter than their trees, are not padded to the tree's length):
    (data_dir: a `vtx.data.directory.DataDirectory`, or its path, opened then)
    padded_lengths(data_dir, splits) -> np.ndarray   each pair's padded length max(S, T)
    optimal_boundaries(lengths, max_shapes=8, step=8) -> list
                                                     <= max_shapes padded lengths (multiples of
                                                     step), fewest pad tokens per pair
    fewest_position_boundaries(pairs, max_tokens, max_shapes=8, step=8) -> list
                                                     the same, fewest positions in an epoch's
                                                     batches (short last batches counted)
    shape_policy(jit_compile, max_shapes=0) -> dict  max_shapes and step for a run (see below)
    bucket_boundaries_for(data_dir, splits, max_shapes=8, step=8, max_tokens=None) -> list
                                                     either of those two for the pairs of `splits`
    side_lengths_for(data_dir, splits, boundaries, step=1) -> list
                                                     each bucket's (source, target) padded lengths
    batch_shapes(max_tokens, boundaries, sides=None) -> list
                                                     every (rows, source, target) a batch can have
    fits_buckets(source, target, boundaries, sides=None) -> np.ndarray
                                                     which pairs of these lengths they hold
    position_fill(data_dir, split, max_tokens, boundaries, sides=None) -> float
                                                     share of an epoch's positions that are real
    epoch_batch_counts(data_dir, split, max_tokens, boundaries, sides=None) -> list
                                                     (shape, batches of it in an epoch)
    train_batches(data_dir, split="train", max_tokens=4096, seed=0, epoch=0, skip_batches=0,
                  num_shards=1, shard_index=0, bucket_boundaries=None, side_lengths=None)
                  -> tf.data.Dataset
        one epoch of {"source": int32 [B, S], "target_in": int32 [B, T],
                      "target_out": int32 [B, T]}, PAD_ID-padded; target_in = bos + target,
        target_out = target + eos. Every kept pair exactly once. Every batch has one of the
        shapes `batch_shapes(max_tokens, boundaries, side_lengths)` (boundaries default: the
        split's `bucket_boundaries_for`; side lengths: L for both sides), B x L <= max_tokens,
        a bucket's short last batch filled up with all-pad rows (index -1 in eval_batches),
        which carry no loss. Order is a function of (seed, epoch) only: shards in a seeded order, each shard
        fully permuted with a stateless seeded shuffle (the whole shard is the shuffle buffer;
        a shard is at most `--shard-size` pairs), SHARDS_AT_ONCE shards read side by side a
        pair from each in turn (a corpus joined from several sources mixes them), so
        `skip_batches=k` yields exactly the batches after the first k of the uninterrupted
        epoch (resume from a saved position).
        `num_shards`/`shard_index`: batch i goes to worker i % num_shards (multi-worker
        training); skip_batches counts this worker's batches. Workers may get one batch less.
    eval_batches(data_dir, split, max_tokens, bucket_boundaries=None, side_lengths=None)
                 -> tf.data.Dataset
        the same dicts plus "index": int64 [B], each pair's line number - 1 in its split, so
        outputs can be put back in corpus order; no shuffling, deterministic order.
    check_max_tokens(data_dir, split, max_tokens, bucket_boundaries=None)
        raises ValueError when batches of max_tokens cannot hold the split's longest pair (what
        train_batches and eval_batches refuse), without building a dataset.

Why few fixed shapes: under XLA every distinct padded shape is a separate compiled program
(a minute or more each for base on a GPU: docs/benchmarks.md), so there are at most MAX_SHAPES
lengths (`--max-shapes`), multiples of LENGTH_STEP (GPU tiles), each with one number of rows, and
a short batch never makes a new shape. Without XLA one traced program runs every shape, so
`shape_policy` allows MAX_SHAPES_DYNAMIC lengths of any value: more of a batch's target slots hold
real tokens, for the same time per update (`vtx train` logs the share it gets).
`vtx train` chooses the lengths for the fewest positions in an epoch's batches
(`fewest_position_boundaries`): a bucket's short last batch costs a whole batch, so a length held
by few pairs is not worth its own bucket (Multi30k at 8192 tokens with XLA: 5 shapes instead of
8, 0.741 of the positions real instead of 0.721; docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.data.directory import IDS_BEYOND_THE_VOCABULARY, DataDir, DataDirectory, opened
from vtx.errors import ArgumentError

_DTYPES = {"<u2": tf.uint16, "<i4": tf.int32}
# Training shards read at once (`_pairs`); each holds its tokens in memory (a shard of the default
# 100,000 pairs is tens of MB as int32).
SHARDS_AT_ONCE = 8


MAX_SHAPES = 8  # distinct padded lengths under XLA: each is one compiled program (minutes)
LENGTH_STEP = 8  # under XLA padded lengths are multiples of this
MAX_SHAPES_DYNAMIC = 16  # without XLA: one traced program runs them all, so more, of any length


def shape_policy(jit_compile: bool, max_shapes: int = 0) -> dict:
    """The batch lengths' max_shapes and step for a run: under XLA (each shape compiled) at
    most `max_shapes` (0: MAX_SHAPES) multiples of LENGTH_STEP, else `max_shapes` (0:
    MAX_SHAPES_DYNAMIC) lengths of any value."""
    if jit_compile:
        return {"max_shapes": max_shapes or MAX_SHAPES, "step": LENGTH_STEP}
    return {"max_shapes": max_shapes or MAX_SHAPES_DYNAMIC, "step": 1}


def padded_lengths(data_dir: DataDir, splits: tuple[str, ...] = ("train",)) -> np.ndarray:
    """int64 [n]: each pair's length once padded for the model, max(|source|, |target| + 1)
    (target_in and target_out hold one id more than the stored target), over `splits`."""
    source, target = _side_lengths(data_dir, splits)
    return np.maximum(source, target)


def optimal_boundaries(lengths: np.ndarray, max_shapes: int = MAX_SHAPES,
                       step: int = LENGTH_STEP) -> list[int]:
    """At most `max_shapes` padded lengths (multiples of `step`, the last >= every length)
    that pad `lengths` with the fewest tokens: an exact dynamic programme over the multiples.

    Args:
        lengths: int [n] padded pair lengths (`padded_lengths`).
    """
    top = max(step, -(-int(np.max(lengths, initial=1)) // step) * step)
    candidates = np.arange(step, top + 1, step)  # [C]
    counts = np.bincount(-(-np.asarray(lengths) // step), minlength=len(candidates) + 1)
    below = np.concatenate([[0], np.cumsum(counts[1:])])  # below[j]: pairs in the first j steps
    return _cheapest_buckets(candidates, max_shapes,
                             lambda j: (below[j] - below[:j]) * candidates[j - 1])


def _cheapest_buckets(candidates: np.ndarray, max_shapes: int,
                      bucket_cost: Callable[[int], np.ndarray]) -> list[int]:
    """The exact dynamic programme of the boundary choices: at most `max_shapes` of the sorted
    `candidates`, the last one included, for the least total cost, where `bucket_cost(j)` is
    float [j]: the cost of a bucket holding the steps (i, j], for i = 0 .. j - 1."""
    slots = len(candidates) + 1
    # cost[k][j]: the least cost of the pairs up to candidates[j - 1] in k buckets.
    cost = np.full((max_shapes + 1, slots), np.inf)
    cost[0][0] = 0.0
    choice = np.zeros_like(cost, dtype=np.int64)
    for j in range(1, slots):
        bucket = bucket_cost(j)
        for k in range(1, max_shapes + 1):
            options = cost[k - 1][:j] + bucket
            choice[k][j] = int(np.argmin(options))
            cost[k][j] = options[choice[k][j]]
    k, j = int(np.argmin(cost[:, -1])), slots - 1  # the fewest buckets among equal costs
    boundaries = []
    while j > 0:
        boundaries.append(int(candidates[j - 1]))
        j, k = choice[k][j], k - 1
    return sorted(boundaries)


def fewest_position_boundaries(pairs: list[tuple[np.ndarray, np.ndarray]], max_tokens: int,
                               max_shapes: int = MAX_SHAPES,
                               step: int = LENGTH_STEP) -> list[int]:
    """At most `max_shapes` padded lengths (multiples of `step`, the last >= every pair) whose
    batches hold the fewest positions, source and target, over an epoch of the first split:
    what training costs. Each bucket's batches are `rows_for_length(max_tokens, L)` rows of
    its side lengths (`side_lengths_for`, over every split), its short last batch filled with
    pad rows, so a bucket with few pairs costs a whole batch: an exact dynamic programme over
    the multiples, like `optimal_boundaries`. The other splits (validation, run once in many
    epochs) only bound the lengths.

    Args:
        pairs: per split, int [n] source and target_in lengths (`_side_lengths`), training
            first.
    """
    longest = max((int(np.max(np.maximum(s, t), initial=1)) for s, t in pairs), default=1)
    top = max(step, -(-longest // step) * step)
    candidates = np.arange(step, top + 1, step)  # [C]
    slots = len(candidates) + 1  # pairs in step c have padded length in (c - 1, c] x step
    side_max = np.zeros((2, slots), np.int64)  # per step: its longest source and target_in
    for split, (source, target) in enumerate(pairs):
        steps = -(-np.maximum(source, target) // step)
        if split == 0:
            counts = np.bincount(steps, minlength=slots)
            below = np.concatenate([[0], np.cumsum(counts[1:])])  # pairs in the first j steps
        for side, lengths in enumerate((source, target)):
            np.maximum.at(side_max[side], steps, lengths)
    rows = [rows_for_length(max_tokens, int(length)) for length in candidates]

    def bucket_cost(j):  # a bucket (i, j]: each side padded to its longest there
        longest_sides = np.maximum.accumulate(side_max[:, j:0:-1], axis=1)[:, ::-1]  # [2, j]
        width = np.minimum(candidates[j - 1], -(-longest_sides // step) * step).sum(axis=0)
        return -(-(below[j] - below[:j]) // rows[j - 1]) * rows[j - 1] * width  # [j]

    return _cheapest_buckets(candidates, max_shapes, bucket_cost)


def bucket_boundaries_for(data_dir: DataDir, splits: tuple[str, ...] = ("train",),
                          max_shapes: int = MAX_SHAPES, step: int = LENGTH_STEP,
                          max_tokens: int | None = None) -> list[int]:
    """The padded lengths of the pairs of `splits` (train and valid together give one set of
    shapes for training and validation): with `max_tokens`, `fewest_position_boundaries`
    (what `vtx train` uses); without, `optimal_boundaries` (fewest pad tokens per pair, what
    runs before the batch positions were counted used, kept for their checkpoints)."""
    if max_tokens is None:
        return optimal_boundaries(padded_lengths(data_dir, splits), max_shapes, step)
    return fewest_position_boundaries([_side_lengths(data_dir, (split,)) for split in splits],
                                      max_tokens, max_shapes, step)


def side_lengths_for(data_dir: DataDir, splits: tuple[str, ...], boundaries: list[int],
                     step: int = 1) -> list[tuple[int, int]]:
    """Each bucket's (source, target_in) padded lengths: the longest of that side among the
    pairs of `splits` in the bucket, rounded up to a multiple of `step`, at most the bucket's
    length (an empty bucket: its length for both). The pairs of every split the batches will
    hold must be among `splits` (`train_batches` refuses a longer one)."""
    source, target = _side_lengths(data_dir, splits)
    boundaries = sorted(boundaries)
    bucket = np.searchsorted(boundaries, np.maximum(source, target), side="left")
    sides = []
    for index, length in enumerate(boundaries):
        held = bucket == index
        if not held.any():
            sides.append((length, length))
            continue
        sides.append(tuple(min(length, -(-int(side[held].max()) // step) * step)
                           for side in (source, target)))
    return sides


def _side_lengths(data_dir: DataDir,
                  splits: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """int64 [n] each: the source and target_in lengths (target + bos) of the pairs of `splits`."""
    data = opened(data_dir)
    found = [np.zeros((2, 0), np.int64)]
    for split in splits:
        for shard in data.split(split)["shards"]:
            lengths = np.fromfile(f"{data.shard_prefix(shard)}.idx", np.int32).reshape(2, -1)
            found.append(np.stack([lengths[0], lengths[1] + 1]).astype(np.int64))
    both = np.concatenate(found, axis=1)
    return both[0], both[1]


def rows_for_length(max_tokens: int, length: int) -> int:
    """Rows of a batch padded to `length`: max_tokens // length, down to a multiple of 8 when
    there are 8 or more (friendly to GPU tiles), at least 1."""
    rows = max(1, max_tokens // length)
    return rows - rows % 8 if rows >= 8 else rows


def position_fill(data_dir: DataDir, split: str, max_tokens: int, boundaries: list[int],
                  sides: list[tuple[int, int]] | None = None) -> float:
    """The share of the positions of `split`'s batches, source and target_in, that hold a real
    token (`batch_shapes`: rows x each side's length, a bucket's short last batch filled with
    pad rows): what the padded lengths (`--max-shapes`) cost, 1.0 when nothing is padded."""
    source, target = _side_lengths(data_dir, (split,))
    slots = sum(batches * rows * (source_length + target_length)
                for (rows, source_length, target_length), batches in
                epoch_batch_counts(data_dir, split, max_tokens, boundaries, sides))
    return float(source.sum() + target.sum()) / slots if slots else 1.0


def epoch_batch_counts(data_dir: DataDir, split: str, max_tokens: int,
                       boundaries: list[int], sides: list[tuple[int, int]] | None = None
                       ) -> list[tuple[tuple[int, int, int], int]]:
    """(shape, batches of that shape in an epoch of `split`) for every `batch_shapes` shape."""
    source, target = _side_lengths(data_dir, (split,))
    boundaries = sorted(boundaries)
    bucket = np.searchsorted(boundaries, np.maximum(source, target), side="left")
    return [(shape, -(-int(np.sum(bucket == index)) // shape[0]))
            for index, shape in enumerate(batch_shapes(max_tokens, boundaries, sides))]


def batch_shapes(max_tokens: int, boundaries: list[int],
                 sides: list[tuple[int, int]] | None = None) -> list[tuple[int, int, int]]:
    """The (rows, source length, target length) of every batch `train_batches`/`eval_batches`
    can yield: rows by the bucket's length, each side's length from `sides`
    (`side_lengths_for`, one per sorted boundary; default: the bucket's length)."""
    boundaries = sorted(boundaries)
    sides = sides or [(length, length) for length in boundaries]
    return [(rows_for_length(max_tokens, length), source, target)
            for length, (source, target) in zip(boundaries, sides)]


def fits_buckets(source: np.ndarray, target: np.ndarray, boundaries: list[int],
                 sides: list[tuple[int, int]] | None = None) -> np.ndarray:
    """bool [n]: which pairs of these source and target_in lengths (int [n] each) the batches of
    `batch_shapes(..., boundaries, sides)` hold: each goes to the bucket of the first boundary
    >= max(S, T), whose side lengths must hold its sides."""
    boundaries = sorted(boundaries)
    sides = np.array(sides or [(length, length) for length in boundaries], np.int64)  # [K, 2]
    bucket = np.searchsorted(boundaries, np.maximum(source, target), side="left")
    inside = bucket < len(boundaries)
    held = sides[np.minimum(bucket, len(boundaries) - 1)]  # [n, 2]
    return inside & (source <= held[:, 0]) & (target <= held[:, 1])


def _read_shard(prefix: tf.Tensor, first_index: tf.Tensor, seed: tf.Tensor,
                dtype: tf.DType, shuffle: bool, vocab_size: int) -> tf.data.Dataset:
    """One shard -> dataset of {"source": [S'], "target": [T'], "index": []}, maybe permuted.
    An id past the vocabulary (a damaged shard) fails the read (`checked_reading` names it)."""
    tokens = tf.cast(tf.io.decode_raw(tf.io.read_file(prefix + ".bin"), dtype), tf.int32)
    in_vocabulary = tf.debugging.assert_less(tokens, vocab_size,
                                             message=IDS_BEYOND_THE_VOCABULARY)
    with tf.control_dependencies([in_vocabulary]):
        tokens = tf.identity(tokens)
    lengths = tf.cast(tf.io.decode_raw(tf.io.read_file(prefix + ".idx"), tf.int32), tf.int64)
    # lengths is [2n]: n source then n target lengths, laid out like the tokens.
    ends = tf.cumsum(lengths)
    starts = ends - lengths
    count = tf.size(lengths, out_type=tf.int64) // 2
    order = tf.range(count)
    if shuffle:
        order = tf.random.experimental.stateless_shuffle(order, seed)

    def pair(i):
        return {"source": tokens[starts[i]:ends[i]],
                "target": tokens[starts[count + i]:ends[count + i]],
                "index": first_index + i}

    return tf.data.Dataset.from_tensor_slices(order).map(_plain(pair))


def _pairs(data: DataDirectory, split: str, seed: int | None, epoch: int) -> tf.data.Dataset:
    """Every pair of a split; seed None: in file order, else shuffled as a function of (seed, epoch)."""
    shards = data.split(split)["shards"]
    counts = [shard["sentences"] for shard in shards]
    first_index = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    prefixes = [str(data.shard_prefix(shard)) for shard in shards]
    rng = np.random.default_rng([seed or 0, epoch])
    order = rng.permutation(len(shards)) if seed is not None else np.arange(len(shards))
    shard_seeds = rng.integers(0, 2**31 - 1, size=(len(shards), 2), dtype=np.int64)
    dtype = _DTYPES[data.meta["token_dtype"]]
    files = tf.data.Dataset.from_tensor_slices((
        tf.constant([prefixes[i] for i in order], tf.string, shape=[len(shards)]),
        tf.constant(first_index[order], tf.int64, shape=[len(shards)]),
        tf.constant(shard_seeds[order], tf.int64, shape=[len(shards), 2])))

    @_plain
    def read(prefix, first, shard_seed):
        return _read_shard(prefix, first, shard_seed, dtype, shuffle=seed is not None,
                           vocab_size=data.vocab_size)

    if seed is None:
        return files.flat_map(read)
    # SHARDS_AT_ONCE shards read side by side, a pair from each in turn: a shard holds
    # consecutive lines, and a corpus is often several joined end to end (WMT14's Europarl,
    # Common Crawl, News Commentary), so one shard at a time trained on one source for a whole
    # shard (at ~27 target tokens a pair, estimated: ~100 updates of 25,000 tokens), then on
    # the next.
    return files.interleave(read, cycle_length=max(1, min(SHARDS_AT_ONCE, len(shards))),
                            block_length=1)  # sequential: deterministic


def _add_bos_eos(pair: dict) -> dict:
    """{"source", "target", "index"} -> model inputs: target_in = bos + target, target_out = target + eos."""
    target = pair["target"]
    return {"source": pair["source"],
            "target_in": tf.concat([[BOS_ID], target], axis=0),
            "target_out": tf.concat([target, [EOS_ID]], axis=0),
            "index": pair["index"]}


def _padded_length_limit(split_meta: dict) -> int:
    # target_in / target_out are one id longer than the stored target.
    return max(split_meta["max_source_length"], split_meta["max_target_length"] + 1)


def _checked_boundaries(longest: int, max_tokens: int, boundaries: list[int]) -> list[int]:
    """Sorted bucket lengths, checked to hold the longest pair within max_tokens."""
    boundaries = sorted(boundaries)
    if boundaries[-1] < longest:
        raise ValueError(f"bucket boundaries end at {boundaries[-1]}, below the longest pair "
                         f"({longest} ids with bos/eos)")
    needed = next(length for length in boundaries if length >= longest)
    if max_tokens < needed:  # an ArgumentError: `vtx train` names its flag, --max-tokens
        raise ArgumentError("{max_tokens} {value} cannot hold the longest pair, padded to "
                            "{needed} ids; raise {max_tokens} to at least {needed}",
                            value=max_tokens, needed=needed)
    return boundaries


def check_max_tokens(data_dir: DataDir, split: str, max_tokens: int,
                     bucket_boundaries: list[int] | None = None) -> None:
    """Check, before any batch is built, that batches of `max_tokens` hold every pair of `split`.

    Raises:
        ValueError: unknown split, or max_tokens below its longest pair (split and directory named).
    """
    data = opened(data_dir)
    longest = _padded_length_limit(data.split(split))
    boundaries = bucket_boundaries or bucket_boundaries_for(data, (split,))
    try:
        _checked_boundaries(longest, max_tokens, boundaries)
    except ArgumentError as error:  # kept an ArgumentError, so that a command names its flag
        raise ArgumentError("{where_} split: " + error.template,
                            where_=f"{data_dir}, {split}", **error.values) from error
    except ValueError as error:
        raise ValueError(f"{data_dir}, {split} split: {error}") from error


def check_positions(data_dir: DataDir, split: str,
                    max_positions: int) -> None:
    """Check that the model's positions hold the longest pair of `split` (target with eos).

    Raises:
        ValueError: a pair is longer (directory, split and both lengths named).
    """
    split_meta = opened(data_dir).split(split)
    source, target = split_meta["max_source_length"], split_meta["max_target_length"] + 1
    if max(source, target) > max_positions:
        raise ValueError(f"{data_dir}, {split} split: its longest pair has {source} source and "
                         f"{target} target ids, more than the model's {max_positions} positions; "
                         f"preprocess again with --max-positions {max_positions}")


def _bucketed(pairs: tf.data.Dataset, longest: int, max_tokens: int, boundaries: list[int],
              sides: list[tuple[int, int]] | None) -> tf.data.Dataset:
    """Group pairs into batches of `rows_for_length` rows padded to their bucket length L, then
    each side cut to its length in `sides` (only padding: a longer pair is an error); a
    bucket's short last batch is filled up with all-pad rows (no loss, no gradient)."""
    boundaries = _checked_boundaries(longest, max_tokens, boundaries)
    batch_sizes = [rows for rows, _, _ in batch_shapes(max_tokens, boundaries)]
    batches = pairs.map(_plain(_add_bos_eos)).bucket_by_sequence_length(
        _plain(lambda pair: tf.maximum(tf.size(pair["source"]), tf.size(pair["target_in"]))),
        # bucket i holds lengths in [boundaries[i-1] + 1, boundaries[i]], padded to boundaries[i]
        bucket_boundaries=[length + 1 for length in boundaries],
        bucket_batch_sizes=batch_sizes + [1],  # the last bucket (too long) stays empty
        pad_to_bucket_boundary=True, padding_values={"source": PAD_ID, "target_in": PAD_ID,
                                                     "target_out": PAD_ID, "index": np.int64(-1)})
    batches = batches.map(_plain(lambda batch: _fill_rows(batch, max_tokens)))
    if sides is None:
        return batches
    if len(sides) != len(boundaries):
        raise ValueError(f"{len(sides)} side lengths for {len(boundaries)} bucket boundaries")
    return batches.map(_plain(lambda batch: _cut_sides(batch, boundaries, sides)))


def _cut_sides(batch: dict, boundaries: list[int], sides: list[tuple[int, int]]) -> dict:
    """Cut a bucket's [B, L] source and targets to its (source, target) lengths."""
    bucket = tf.argmax(tf.cast(tf.equal(boundaries, tf.shape(batch["source"])[1]), tf.int32))
    source = tf.gather([side[0] for side in sides], bucket)
    target = tf.gather([side[1] for side in sides], bucket)
    checks = [tf.debugging.assert_equal(
        tf.reduce_all(tf.equal(batch[key][:, cut:], PAD_ID)), True,
        message=f"a pair has a {name} longer than the {name} length of its bucket (the batch "
                f"lengths were computed from other data)")
        for key, cut, name in (("source", source, "source"), ("target_in", target, "target"))]
    with tf.control_dependencies(checks):
        cut = {"source": batch["source"][:, :source],
               "target_in": batch["target_in"][:, :target],
               "target_out": batch["target_out"][:, :target]}
    return {**batch, **cut}


def _fill_rows(batch: dict, max_tokens: int) -> dict:
    """Pad a [B, L] batch to [rows_for_length(L), L] with all-pad rows (index -1)."""
    length = tf.shape(batch["source"])[1]
    rows = tf.maximum(1, max_tokens // length)
    rows = tf.where(rows >= 8, rows - rows % 8, rows)
    missing = rows - tf.shape(batch["source"])[0]
    filled = {key: tf.pad(value, [[0, missing], [0, 0]], constant_values=PAD_ID)
              for key, value in batch.items() if key != "index"}
    if "index" in batch:
        filled["index"] = tf.pad(batch["index"], [[0, missing]], constant_values=-1)
    return filled


def _plain(function):
    """`function` for tf.data to trace as it is written, without AutoGraph (which tf.data
    applies by default): these functions hold no Python control flow on tensors, and AutoGraph
    parses and rewrites the source of each, and of every function it calls, at each trace."""
    return tf.autograph.experimental.do_not_convert(function)


def _deterministic(dataset: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.deterministic = True
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def train_batches(data_dir: DataDir, split: str = "train", max_tokens: int = 4096,
                  seed: int = 0, epoch: int = 0, skip_batches: int = 0, num_shards: int = 1,
                  shard_index: int = 0, bucket_boundaries: list[int] | None = None,
                  side_lengths: list[tuple[int, int]] | None = None) -> tf.data.Dataset:
    """One shuffled epoch of token-bounded training batches (see the module docstring).

    Returns:
        Dataset of {"source": int32 [B, S], "target_in": int32 [B, T], "target_out": int32 [B, T]}.

    Raises:
        ValueError: unknown split, bad shard arguments, or max_tokens below the longest pair.
    """
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index {shard_index} must be in [0, num_shards={num_shards})")
    if skip_batches < 0:
        raise ValueError(f"skip_batches must be >= 0, got {skip_batches}")
    data = opened(data_dir)
    longest = _padded_length_limit(data.split(split))
    boundaries = bucket_boundaries or bucket_boundaries_for(data, (split,))
    batches = _bucketed(_pairs(data, split, seed, epoch), longest, max_tokens,
                        boundaries, side_lengths)
    batches = batches.map(_plain(lambda batch: {key: batch[key]
                                                for key in ("source", "target_in", "target_out")}))
    return _deterministic(batches.shard(num_shards, shard_index).skip(skip_batches))


def eval_batches(data_dir: DataDir, split: str, max_tokens: int,
                 bucket_boundaries: list[int] | None = None,
                 side_lengths: list[tuple[int, int]] | None = None) -> tf.data.Dataset:
    """All pairs of `split` in token-bounded batches, deterministic order, no shuffling.

    Returns:
        Dataset of {"source": int32 [B, S], "target_in": int32 [B, T], "target_out": int32 [B, T],
        "index": int64 [B]}.
    """
    data = opened(data_dir)
    longest = _padded_length_limit(data.split(split))
    boundaries = bucket_boundaries or bucket_boundaries_for(data, (split,))
    return _deterministic(_bucketed(_pairs(data, split, None, 0), longest,
                                    max_tokens, boundaries, side_lengths))


def split_pairs(data_dir: DataDir, split: str) -> list[tuple[list[int], list[int]]]:
    """Every (source ids, target ids) pair of `split` in file order, without bos/eos.

    Raises:
        ValueError: unknown split.
    """
    pairs = _pairs(opened(data_dir), split, None, 0)
    return [(pair["source"].tolist(), pair["target"].tolist())
            for pair in pairs.as_numpy_iterator()]
