"""Packed training batches: several sentence pairs per row, in one or two batch shapes for a run.

Bucketing pads each pair to its bucket's length and fills a bucket's short last batch with pad
rows; under XLA (lengths multiples of 8, at most 8 shapes, one compiled program each) that leaves
a good share of a batch's positions padding (`packed_fill` against the buckets' share of real
positions: docs/benchmarks.md, packed batches). Packing puts pairs side by side in rows of a
fixed (source, target) length instead, as tensor2tensor does: one or two shapes, each compiled
once, with most of their positions real. Each row's pairs are
told apart by segment ids (1, 2, ... in the row; 0 = padding) and each pair's positions restart
at 0, so the model (`Transformer.decoder_states(..., packing=...)`) attends only within a pair
and computes for every pair exactly what it computes for the pair alone in an unpacked batch
(tested). Attention is computed over a whole row, so rows as long as the longest pair cost
much where a few pairs are far longer than the rest (the WSJ sample's trees: 138 ids at the
99th percentile, 756 the longest): `choose_shapes` then caps the rows at a length most pairs fit
and packs the longer ones into a second shape of their own, picking the cap with
`relative_cost`, an estimate of an epoch's FLOPs.

Public API (shapes: R rows, S source length, T target length; a packing is a list of one or two
(R, S, T), shortest first, and each pair goes into the first it fits):
    packed_shapes(data_dir, max_tokens, step=1, cap=None) -> list
        cap None: one shape for every pair; else rows for the pairs of padded length <= cap,
        and a second shape for the longer ones. A shape for pairs up to L: R =
        `pipeline.rows_for_length(max_tokens, L)`, T = max_tokens // R (>= L), S = T x (the
        split's source tokens / its target tokens), at least the longest source among them;
        multiples of `step`.
    choose_shapes(data_dir, max_tokens, step, model_config, bucketed, all_positions_projected,
                  seed=0) -> (shapes, relative cost)
        the packing of the cheapest cap (`relative_cost`) among a few percentiles of the pair
        lengths and none.
    pack_rows(source_lengths, target_lengths, order, source_capacity, target_capacity,
              window=WINDOW) -> list of rows (lists of pair indices)
    pack_batch(rows, shape) -> dict                  rows of (source ids, target ids) pairs
    packed_batches(data_dir, shapes, split="train", seed=0, epoch=0, skip_batches=0,
                   num_shards=1, shard_index=0) -> iterator of dicts
        one epoch of {"source", "target_in", "target_out", "source_segments",
        "target_segments", "source_positions", "target_positions"}, each int32 [R, S] or
        [R, T] of one of the shapes. Every pair of the split exactly once; the order a function
        of (seed, epoch) only, so `skip_batches=k` yields exactly the batches after the first k
        (resume). Batches are packed as they are needed (no wait at an epoch's start). Each
        shape's last batch is filled with all-pad rows (no loss). Batch i goes to worker
        i % num_shards; skip_batches counts this worker's batches.
    fits_packed(source, target, shapes) -> np.ndarray
        which pairs of these source and target_in lengths a row of the shapes holds.
    packed_batch_counts(data_dir, shapes, split="train", seed=0) -> list of int
    packed_fill(data_dir, shapes, split="train", seed=0) -> float
        the share of an epoch's positions, source and target, that hold a real token.
    relative_cost(model_config, bucketed, packed, target_tokens, all_positions_projected)
        -> float                                     an epoch's FLOPs packed / in buckets
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.data import pipeline
from vtx.data.directory import IDS_BEYOND_THE_VOCABULARY, DataDir, opened
from vtx.errors import DataError

# Rows open at once while packing (at most; a shape keeps 4 batches' rows open): a pair goes into
# the first open row it fits in; when none has room the fullest is closed. More rows fill better
# and cost more per pair (`packed_fill` gives a split's share of real positions).
WINDOW = 128

PACKED_KEYS = ("source_segments", "target_segments", "source_positions", "target_positions")

# Pairs packed to count an epoch's rows (`packed_batch_counts`, `choose_shapes`): a larger split
# is estimated from a sample of this many (a corpus of Multi30k's size packs whole in a fraction
# of a second).
SAMPLE_PAIRS = 100_000

# A batch's pairs of one shard closer than this many ids are read in one system call, the ids
# between them read and dropped (4 KiB of 16-bit ids: a copy cheaper than a call).
READ_GAP = 2048

# The caps `choose_shapes` tries: these percentiles of the pairs' padded lengths, times these
# factors (and no cap).
CAP_PERCENTILES = (90, 95, 99)
CAP_FACTORS = (1.0, 1.5, 2.0)
SECOND_SHAPE_SAVING = 0.02  # of the buckets' FLOPs

Shape = tuple[int, int, int]


def _round_up(length: int, step: int) -> int:
    return -(-length // step) * step


def _shape_for(source: np.ndarray, target: np.ndarray, ratio: float, max_tokens: int,
               step: int) -> Shape:
    """The packed shape of pairs of these source and target_in lengths (see the module
    docstring); `ratio`: the split's source tokens over its target tokens."""
    longest_source = _round_up(max(int(source.max(initial=1)), 1), step)
    longest = max(longest_source, _round_up(max(int(target.max(initial=1)), 1), step))
    rows = pipeline.rows_for_length(max_tokens, longest)
    # Rows as long as the tokens allow once their number is fixed (a multiple of 8): longer rows
    # pack fuller. `full` >= longest, as rows <= max_tokens // longest.
    full = max_tokens // rows // step * step
    balanced = int(round(full * ratio / step)) * step  # the nearest multiple
    return rows, min(max(longest_source, balanced), full), full


def packed_shapes(data_dir: DataDir, max_tokens: int, step: int = 1,
                  cap: int | None = None, split: str = "train") -> list[Shape]:
    """The packing of `split` with rows capped at `cap` (see the module docstring).

    Raises:
        ValueError: `max_tokens` below the longest pair (what one row must hold).
    """
    source, target = pipeline._side_lengths(data_dir, (split,))
    return _shapes_of(source, target, max_tokens, step, cap, f"{data_dir}, {split} split")


def _shapes_of(source: np.ndarray, target: np.ndarray, max_tokens: int, step: int,
               cap: int | None, where: str) -> list[Shape]:
    """`packed_shapes` of pairs of these source and target_in lengths; `where` names them in
    the error."""
    longest = _round_up(max(int(np.maximum(source, target).max(initial=1)), 1), step)
    if max_tokens < longest:
        raise ValueError(f"{where}: --max-tokens {max_tokens} cannot hold a packed row of "
                         f"{longest} ids (its longest pair); raise --max-tokens to at least "
                         f"{longest}")
    ratio = float(source.sum()) / max(float(target.sum()), 1.0)
    whole = _shape_for(source, target, ratio, max_tokens, step)
    if cap is None or cap >= longest:
        return [whole]
    short = np.maximum(source, target) <= cap
    if not short.any():
        return [whole]
    first = _shape_for(source[short], target[short], ratio, max_tokens, step)
    return [first] if _assign(source, target, [first]).max() == 0 else [first, whole]


def _assign(source: np.ndarray, target: np.ndarray, shapes: list[Shape]) -> np.ndarray:
    """int [n]: the index of the first shape each pair fits in (len(shapes): none)."""
    shape_of = np.full(len(source), len(shapes))
    for index in reversed(range(len(shapes))):
        _, source_length, target_length = shapes[index]
        shape_of[(source <= source_length) & (target <= target_length)] = index
    return shape_of


def fits_packed(source: np.ndarray, target: np.ndarray, shapes: list[Shape]) -> np.ndarray:
    """bool [n]: which pairs of these source and target_in lengths (int [n] each) a row of one
    of `shapes` holds."""
    return _assign(source, target, shapes) < len(shapes)


def caps_to_try(data_dir: DataDir, step: int, split: str = "train") -> list[int | None]:
    """None (no cap) and the lengths `choose_shapes` tries as caps."""
    return _caps(*pipeline._side_lengths(data_dir, (split,)), step)


def _caps(source: np.ndarray, target: np.ndarray, step: int) -> list[int | None]:
    lengths = np.maximum(source, target)
    caps = {_round_up(int(np.ceil(np.percentile(lengths, q) * factor)), step)
            for q in CAP_PERCENTILES for factor in CAP_FACTORS} if len(lengths) else set()
    return [None] + sorted(cap for cap in caps if cap < lengths.max(initial=0))


def choose_shapes(data_dir: DataDir, max_tokens: int, step: int, model_config,
                  bucketed: list[tuple[Shape, int]], all_positions_projected: bool,
                  seed: int = 0, split: str = "train") -> tuple[list[Shape], float]:
    """The packing whose epoch costs the fewest FLOPs (`relative_cost` against `bucketed`,
    (shape, batches) per bucket), among rows capped at each of `caps_to_try`, and that cost; two
    shapes only where they save `SECOND_SHAPE_SAVING` over one. The split is read once, and
    caps that give the same shapes are packed once."""
    pairs = _Split(data_dir, split)
    source, target = pairs.side_lengths()
    candidates = []
    for cap in _caps(source, target, step):
        shapes = _shapes_of(source, target, max_tokens, step, cap, f"{data_dir}, {split} split")
        if shapes not in candidates:
            candidates.append(shapes)
    best = None
    for shapes in candidates:
        counts = _batch_counts(pairs, shapes, seed)
        cost = relative_cost(model_config, bucketed, list(zip(shapes, counts)),
                             int(target.sum()), all_positions_projected)
        # A second shape is one more compiled program (minutes for a large model on a GPU:
        # `benchmarks/gpu_train.py`, docs/benchmarks.md): worth it for a saving of
        # SECOND_SHAPE_SAVING at least.
        weighed = cost + SECOND_SHAPE_SAVING * (len(shapes) - 1)
        if best is None or weighed < best[2]:
            best = (shapes, cost, weighed)
    return best[:2]


class _Packer:
    """Rows of one capacity filled one pair at a time: a pair goes into the first of at most
    `window` open rows with room on both sides; when none has room, the fullest row is closed
    and the pair opens a new one."""

    def __init__(self, source_capacity: int, target_capacity: int, window: int = WINDOW):
        self.capacity, self.window = (source_capacity, target_capacity), window
        self.rows: list[list[int]] = []
        self.room_source: list[int] = []
        self.room_target: list[int] = []
        self.room: list[int] = []  # both sides' room, to close the fullest row

    def add(self, pair: int, need_source: int, need_target: int) -> list[int] | None:
        """Place a pair; returns the row it closed, if any.

        Raises:
            ValueError: the pair is longer than the capacities (its index and lengths named).
        """
        source_capacity, target_capacity = self.capacity
        if need_source > source_capacity or need_target > target_capacity:
            raise ValueError(f"pair {pair} has {need_source} source and {need_target} target "
                             f"ids, more than a packed row's {source_capacity} and "
                             f"{target_capacity}")
        room_source, room_target, room = self.room_source, self.room_target, self.room
        for row in range(len(room)):
            if room_source[row] >= need_source and room_target[row] >= need_target:
                self.rows[row].append(pair)
                room_source[row] -= need_source
                room_target[row] -= need_target
                room[row] -= need_source + need_target
                return None
        closed = None
        if len(self.rows) == self.window:
            fullest = room.index(min(room))
            closed = self.rows.pop(fullest)
            del room_source[fullest], room_target[fullest], room[fullest]
        self.rows.append([pair])
        room_source.append(source_capacity - need_source)
        room_target.append(target_capacity - need_target)
        room.append(source_capacity + target_capacity - need_source - need_target)
        return closed

    def flush(self) -> list[list[int]]:
        """The rows still open, in the order they opened; the packer is empty after."""
        rows = self.rows
        self.rows, self.room_source, self.room_target, self.room = [], [], [], []
        return rows


def pack_rows(source_lengths: np.ndarray, target_lengths: np.ndarray, order: np.ndarray,
              source_capacity: int, target_capacity: int,
              window: int = WINDOW) -> list[list[int]]:
    """Rows of pair indices, the pairs taken in `order`: each goes into the first of at most
    `window` open rows with room on both sides; when none has room, the fullest row is closed
    and the pair opens a new one. Rows in the order they close, then the open ones.

    Raises:
        ValueError: a pair longer than the capacities (its index and lengths named).
    """
    source_lengths = np.asarray(source_lengths).tolist()
    target_lengths = np.asarray(target_lengths).tolist()
    packer, rows = _Packer(source_capacity, target_capacity, window), []
    for pair in np.asarray(order).tolist():
        closed = packer.add(pair, source_lengths[pair], target_lengths[pair])
        if closed is not None:
            rows.append(closed)
    return rows + packer.flush()


class _Shard(NamedTuple):
    """An open shard of a split: its token file's descriptor and the size its index counts."""
    descriptor: int
    path: Path  # the .bin
    index: Path  # the .idx
    size: int  # bytes


class _Split:
    """A split's pairs, read from its shards: lengths in memory, tokens read by `os.pread` from
    descriptors opened once; each shard's size checked against its index before each batch
    that reads it, and a read past its end (a cut made in between) named.

    Not memory maps: reading a page past a mapped file's end kills the process by SIGBUS,
    without a word, and a check of the size before each batch still left the reads after it
    exposed to a cut made in between."""

    def __init__(self, data_dir: DataDir, split: str):
        data = opened(data_dir)
        self.dtype = np.dtype(data.meta["token_dtype"])
        self.vocab_size = data.vocab_size
        self._shards: list[_Shard] = []
        shard, starts, lengths = [], [], []
        for index, entry in enumerate(data.split(split)["shards"]):
            prefix = data.shard_prefix(entry)
            path = Path(f"{prefix}.bin")
            both = np.fromfile(f"{prefix}.idx", np.int32).reshape(2, -1).astype(np.int64)
            self._shards.append(_Shard(os.open(path, os.O_RDONLY), path, Path(f"{prefix}.idx"),
                                       int(both.sum()) * self.dtype.itemsize))
            ends = np.cumsum(both.reshape(-1)).reshape(2, -1)
            starts.append(ends - both)
            lengths.append(both)
            shard.append(np.full(both.shape[1], index, np.int64))
        self.shard = np.concatenate(shard) if shard else np.zeros(0, np.int64)
        self.starts = np.concatenate(starts, axis=1) if starts else np.zeros((2, 0), np.int64)
        self.lengths = np.concatenate(lengths, axis=1) if lengths else np.zeros((2, 0), np.int64)

    def __del__(self):
        for shard in getattr(self, "_shards", ()):
            os.close(shard.descriptor)

    def __len__(self) -> int:
        return len(self.shard)

    def side_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 [n] source and target_in (target + bos) lengths."""
        return self.lengths[0], self.lengths[1] + 1

    def batch(self, rows: list[list[int]], shape: Shape) -> dict:
        """`pack_batch` of these rows of pair indices, the ids read with a few reads a side.

        Raises:
            DataError: a shard cut short since it was opened (named).
            ValueError: the pairs of a row do not fit the shape (a bug of the caller).
        """
        counts = np.array([len(row) for row in rows], np.int64)
        pairs = np.fromiter(itertools.chain.from_iterable(rows), np.int64, int(counts.sum()))
        self._check_sizes(np.unique(self.shard[pairs]).tolist())
        lengths = self.lengths[:, pairs]
        return _layout(counts, lengths, [self._gather(pairs, side, lengths[side])
                                         for side in (0, 1)], shape)

    def _gather(self, pairs: np.ndarray, side: int, lengths: np.ndarray) -> np.ndarray:
        """int32: the ids of `pairs`' `side`, one pair after another. The pairs are read in
        file order, one read per run of pairs less than `READ_GAP` ids apart in a shard (the
        ids between them read and dropped): one system call for several pairs where a batch
        holds most of a small shard.

        Raises:
            DataError: a shard cut short since it was opened (named).
        """
        shard, start = self.shard[pairs], self.starts[side, pairs]
        order = np.lexsort((start, shard))
        shard, start, end = shard[order], start[order], start[order] + lengths[order]
        new_run = np.ones(len(order), bool)
        new_run[1:] = (shard[1:] != shard[:-1]) | (start[1:] - end[:-1] > READ_GAP)
        first = np.flatnonzero(new_run)
        run_start, run_end = start[first], end[np.append(first[1:], len(order)) - 1]
        sizes = run_end - run_start
        bases = np.cumsum(sizes) - sizes
        item = self.dtype.itemsize
        runs = list(zip(shard[first].tolist(), (run_start * item).tolist(),
                        (sizes * item).tolist()))
        # os.pread and a join: cheaper than os.preadv into one buffer.
        chunks = [os.pread(self._shards[which].descriptor, length, offset)
                  for which, offset, length in runs]
        if sum(map(len, chunks)) < int(sizes.sum()) * item:  # a short read: find it
            chunks = [self._read_on(which, chunk, offset, length)
                      for chunk, (which, offset, length) in zip(chunks, runs)]
        buffer = np.frombuffer(b"".join(chunks), self.dtype)
        if buffer.size and int(buffer.max()) >= self.vocab_size:
            raise DataError(f"{IDS_BEYOND_THE_VOCABULARY} of {self.vocab_size:,} ids")
        run = np.cumsum(new_run) - 1
        at = np.empty(len(order), np.int64)
        at[order] = bases[run] + start - run_start[run]  # each pair's first id in the buffer
        index = (np.repeat(at - (np.cumsum(lengths) - lengths), lengths)
                 + np.arange(int(lengths.sum())))
        return buffer[index].astype(np.int32)

    def _check_sizes(self, shards: list[int]) -> None:
        """Each of `shards` holds the bytes its index counts (one fstat each): a shard rewritten
        or cut short since it was checked would be read as other ids, or end in a short read.

        Raises:
            DataError: a shard of another size (named).
        """
        for which in shards:
            shard = self._shards[which]
            if os.fstat(shard.descriptor).st_size != shard.size:
                raise self._changed(which)

    def _read_on(self, which: int, chunk: bytes, offset: int, length: int) -> bytes:
        """`length` bytes of shard `which` from `offset`, of which a first read gave `chunk`
        (as is when whole; else fewer: at the shard's end, cut short between `_check_sizes` and
        the read, or, where a file system allows it, a read cut short).

        Raises:
            DataError: the shard ends before (named).
        """
        while len(chunk) < length:
            more = os.pread(self._shards[which].descriptor, length - len(chunk),
                             offset + len(chunk))
            if not more:
                raise self._changed(which)
            chunk += more
        return chunk

    def _changed(self, which: int) -> DataError:
        shard = self._shards[which]
        now = os.fstat(shard.descriptor).st_size
        return DataError(f"{shard.path} holds {now:,} bytes where {shard.index} counts "
                         f"{shard.size:,}: cut short or rewritten since training opened it (a "
                         f"copy over it, a full disk); run `vtx preprocess` again")


def _epoch_batches(split: _Split, shapes: list[Shape], seed: int, epoch: int,
                   sample: int | None = None) -> Iterator[tuple[int, list[list[int]]]]:
    """The epoch's batches as (shape index, rows of pair indices), made as they are needed (no
    wait at an epoch's start, whatever the corpus): the pairs in a seeded order, each packed
    into rows of the first shape it fits (`_assign`); a batch goes out when its shape has
    rows enough, so the shapes' batches come mixed; at the end each shape's last rows, its last
    batch filled with empty rows. `sample`: only that many pairs of the seeded order (an
    estimate of a large split's batches).

    Raises:
        ValueError: a pair longer than every shape's rows.
    """
    order = np.random.default_rng([seed, epoch]).permutation(len(split))[:sample]
    source, target = split.side_lengths()
    shape_of = _assign(source, target, shapes)
    if (shape_of[order] == len(shapes)).any():
        pair = int(order[shape_of[order] == len(shapes)][0])
        raise ValueError(f"pair {pair} has {source[pair]} source and {target[pair]} target "
                         f"ids, more than the packed rows {shapes} hold")
    # A shape's open rows: at most 4 batches' worth, so that a shape of few pairs (the long
    # ones) sends its batches out through the epoch, not all at its end.
    packers = [_Packer(source_length, target_length, min(WINDOW, 4 * rows))
               for rows, source_length, target_length in shapes]
    ready: list[list[list[int]]] = [[] for _ in shapes]
    # Python ints of the ordered pairs only (a sample of a large split converts only its own).
    for pair, index, need_source, need_target in zip(
            order.tolist(), shape_of[order].tolist(), source[order].tolist(),
            target[order].tolist()):
        closed = packers[index].add(pair, need_source, need_target)
        if closed is not None:
            ready[index].append(closed)
            if len(ready[index]) == shapes[index][0]:
                yield index, ready[index]
                ready[index] = []
    for index, (rows_per_batch, _, _) in enumerate(shapes):
        rows = ready[index] + packers[index].flush()
        rows += [[] for _ in range(-len(rows) % rows_per_batch)]
        for start in range(0, len(rows), rows_per_batch):
            yield index, rows[start:start + rows_per_batch]


def pack_batch(rows: list[list[tuple]], shape: tuple[int, int, int]) -> dict:
    """The batch of `rows`, each a list of (source ids, target ids) pairs (no bos/eos) that fit
    the shape's row lengths: ids, segment ids and positions, int32 [len(rows), S or T].

    Raises:
        ValueError: the pairs of a row do not fit the shape.
    """
    pairs = [pair for row in rows for pair in row]
    lengths = np.array([[len(source) for source, _ in pairs],
                        [len(target) for _, target in pairs]], np.int64).reshape(2, -1)
    ids = [np.concatenate([np.asarray(pair[side], np.int32) for pair in pairs] or
                          [np.zeros(0, np.int32)]) for side in (0, 1)]
    return _layout(np.array([len(row) for row in rows], np.int64), lengths, ids, shape)


def _layout(counts: np.ndarray, lengths: np.ndarray, ids: list[np.ndarray], shape: Shape) -> dict:
    """`pack_batch`'s arrays from the pairs laid end to end: `counts` pairs a row, `lengths`
    int [2, pairs] (source, target without bos/eos), `ids` [source ids, target ids], each the
    pairs' ids one pair after another. Array operations over all the batch's tokens at once,
    not pair by pair: the batch is made on the host between two updates, where a GPU waits.

    Raises:
        ValueError: the pairs of a row do not fit the shape.
    """
    _, source_length, target_length = shape
    rows, pairs = len(counts), lengths.shape[1]
    row_of = np.repeat(np.arange(rows), counts)
    first_of_row = np.repeat(np.cumsum(counts) - counts, counts)
    segment = np.arange(pairs) - first_of_row + 1
    batch = {}
    for side, width in ((0, source_length), (1, target_length)):
        # Each pair's span in its row: the source ids, or bos + the target ids (target_in) and
        # the target ids + eos (target_out).
        spans = lengths[side] + side
        starts = np.cumsum(spans) - spans  # in the pairs laid end to end
        offsets = starts - starts[first_of_row]
        if (offsets + spans > width).any():
            pair = int(np.argmax(offsets + spans > width))
            raise ValueError(f"pair {pair} of the batch does not fit its packed row of {width} "
                             f"{'target' if side else 'source'} positions")
        within = np.arange(int(spans.sum())) - np.repeat(starts, spans)
        span_of = np.repeat(np.arange(pairs), spans)
        flat = row_of[span_of] * width + offsets[span_of] + within
        name = "source" if side == 0 else "target"
        for key, values in ((f"{name}_segments", segment[span_of]),
                            (f"{name}_positions", within)):
            array = np.zeros(rows * width, np.int32)
            array[flat] = values
            batch[key] = array.reshape(rows, width)
        if side == 0:
            source = np.full(rows * width, PAD_ID, np.int32)
            source[flat] = ids[0]
            batch["source"] = source.reshape(rows, width)
            continue
        # The target ids sit at span positions 1.. of target_in (0: bos) and 0.. of target_out
        # (the last: eos).
        target_in = np.full(rows * width, PAD_ID, np.int32)
        target_in[flat[within == 0]] = BOS_ID
        target_in[flat[within > 0]] = ids[1]
        token = within < lengths[1][span_of]
        target_out = np.full(rows * width, PAD_ID, np.int32)
        target_out[flat[token]] = ids[1]
        target_out[flat[~token]] = EOS_ID
        batch["target_in"] = target_in.reshape(rows, width)
        batch["target_out"] = target_out.reshape(rows, width)
    return {key: batch[key] for key in ("source", "target_in", "target_out") + PACKED_KEYS}


def packed_batches(data_dir: DataDir, shapes: list[Shape], split: str = "train",
                   seed: int = 0, epoch: int = 0, skip_batches: int = 0, num_shards: int = 1,
                   shard_index: int = 0) -> Iterator[dict]:
    """One epoch of packed batches (see the module docstring).

    Raises:
        ValueError: bad shard arguments, or a pair longer than the shapes' rows.
    """
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index {shard_index} must be in [0, num_shards={num_shards})")
    if skip_batches < 0:
        raise ValueError(f"skip_batches must be >= 0, got {skip_batches}")
    pairs = _Split(data_dir, split)
    batches = itertools.islice(_epoch_batches(pairs, shapes, seed, epoch),
                               shard_index + skip_batches * num_shards, None, num_shards)
    for index, rows in batches:
        yield pairs.batch(rows, shapes[index])


def packed_batch_counts(data_dir: DataDir, shapes: list[Shape], split: str = "train",
                        seed: int = 0) -> list[int]:
    """Batches of each shape in an epoch (epoch 0 of `seed`; others differ little): counted by
    packing it, or estimated from `SAMPLE_PAIRS` of its pairs when it has more."""
    return _batch_counts(_Split(data_dir, split), shapes, seed)


def _batch_counts(pairs: _Split, shapes: list[Shape], seed: int) -> list[int]:
    sample = min(len(pairs), SAMPLE_PAIRS)
    batches = _epoch_batches(pairs, shapes, seed, 0, sample)
    counts = np.bincount([index for index, _ in batches], minlength=len(shapes))
    return [int(np.ceil(count * len(pairs) / max(sample, 1))) for count in counts]


def packed_fill(data_dir: DataDir, shapes: list[Shape], split: str = "train",
                seed: int = 0) -> float:
    """The share of the positions, source and target_in, of an epoch's packed batches that hold
    a real token (`packed_batch_counts`' epoch)."""
    pairs = _Split(data_dir, split)
    source, target = pairs.side_lengths()
    positions = sum(count * rows * (source_length + target_length) for count, (
        rows, source_length, target_length) in zip(_batch_counts(pairs, shapes, seed), shapes))
    return float(source.sum() + target.sum()) / positions if positions else 1.0


def relative_cost(model_config, bucketed: list[tuple[Shape, int]],
                  packed: list[tuple[Shape, int]], target_tokens: int,
                  all_positions_projected: bool) -> float:
    """An epoch's update FLOPs in packed batches over those in length buckets (< 1: packing is
    cheaper): the matrix products of every position, linear layers (independent of the row
    length) and attention (in proportion to it: packed rows are long, and attention within a
    pair is computed over the whole row), forward and backward (x 3), and the projection onto
    the vocabulary, over every target position with XLA (`all_positions_projected`), else
    over the `target_tokens` real ones alike in both.

    Checked against the training speed of the quick start's model packed and in buckets, with
    XLA and without, on Multi30k and on the WSJ sample's trees (`vtx train --pack` against
    `--no-pack`; docs/benchmarks.md, packed batches): the estimate orders the two as the
    measurement does.

    Args:
        model_config: a `ModelConfig` (layers, widths, vocabulary).
        bucketed: (shape, batches in an epoch) per bucket (`pipeline.epoch_batch_counts`).
        packed: (shape, batches in an epoch) per packed shape (`packed_batch_counts`).
    """
    width, inner, layers = model_config.d_model, model_config.d_ff, model_config.num_layers
    projection = 2 * width * model_config.vocab_size

    def flops(shape, batches):
        rows, source, target = shape
        encoder = source * (2 * (4 * width * width + 2 * width * inner) + 4 * source * width)
        decoder = target * (2 * (8 * width * width + 2 * width * inner)
                            + 4 * target * width + 4 * source * width)
        per_row = layers * (encoder + decoder)
        if all_positions_projected:
            per_row += target * projection
        return 3 * batches * rows * per_row

    real = 0 if all_positions_projected else 3 * target_tokens * projection
    buckets = sum(flops(shape, batches) for shape, batches in bucketed) + real
    return (sum(flops(shape, batches) for shape, batches in packed) + real) / buckets
