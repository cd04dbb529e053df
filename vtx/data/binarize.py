"""Binarization: parallel text -> SentencePiece ids in sharded files, streamed, in worker processes.

Shard format (read by `vtx.data.pipeline` with `tf.io.decode_raw`, no TensorFlow needed to write):
    `SPLIT.NNNNN.bin`  token ids, little-endian `token_dtype` (uint16 when the vocabulary has at
                       most 65,536 ids, else int32): all source sentences of the shard, then all
                       target sentences, concatenated, no bos/eos.
    `SPLIT.NNNNN.idx`  little-endian int32 [2, n]: the n source lengths, then the n target lengths.
    `SPLIT.NNNNN.txt`  (training shards of `vtx preprocess --keep-train-text` only) the text of
                       the same pairs, UTF-8: the n source lines, then the n target lines, each
                       ending in "\n"; what `vtx.data.subword` segments anew each epoch.
A shard holds up to `shard_size` consecutive input pairs (fewer once training pairs are filtered).

The main process reads the text in lockstep, cuts it into chunks of `shard_size` pairs and hands
each to a worker, which decodes UTF-8, encodes, filters and writes one shard. At most
2 x workers chunks are in flight, so memory does not grow with the corpus.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import errno
import hashlib
import itertools
import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from vtx.data.text import DataError, decode_line, read_parallel
from vtx.data import vocab
from vtx.data.vocab import Vocabulary
from vtx.progress_lines import LineProgress

FILTER_REASONS = ("empty", "too_long", "length_ratio")
IDX_DTYPE = "<i4"


def token_dtype(vocab_size: int) -> str:
    """The numpy dtype of stored ids: "<u2" when every id fits in 16 bits, else "<i4"."""
    return "<u2" if vocab_size <= 1 << 16 else "<i4"


@dataclasses.dataclass(frozen=True)
class PairFilter:
    """Which training pairs to drop; with `drop` False (validation and test, whose pairs are never
    dropped) a pair longer than the positions is an error instead."""

    max_positions: int  # longest source, and longest target with bos/eos added
    max_length_ratio: float  # drop when the longer side has more than ratio x the shorter's ids
    drop: bool = True

    def reason(self, source_length: int, target_length: int) -> str | None:
        """The first of FILTER_REASONS that applies to a pair of lengths, or None to keep it."""
        if source_length == 0 or target_length == 0:
            return "empty"
        if source_length > self.max_positions or target_length + 1 > self.max_positions:
            return "too_long"
        if max(source_length, target_length) > self.max_length_ratio * min(source_length,
                                                                            target_length):
            return "length_ratio"
        return None


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One unit of work: consecutive raw pairs and where their shard goes."""

    source_path: Path
    target_path: Path
    first_line: int  # 1-based line number of the first pair
    source_lines: list[bytes]
    target_lines: list[bytes]
    shard_prefix: Path  # the shard is written to shard_prefix + ".bin" / ".idx"
    pair_filter: PairFilter | None
    token_dtype: str
    keep_text: bool = False  # also write the kept pairs' text, shard_prefix + ".txt"


_VOCABULARY: Vocabulary | None = None  # one per worker process, loaded by `_load_vocabulary`


def _load_vocabulary(model_path: Path) -> None:
    global _VOCABULARY
    _VOCABULARY = vocab.load(model_path)


def _decode_all(lines: list[bytes], path: Path, first_line: int) -> list[str]:
    try:
        return [line.decode("utf-8") for line in lines]
    except UnicodeDecodeError:
        # Rare path: find the offending line to name it.
        return [decode_line(line, path, first_line + i) for i, line in enumerate(lines)]


def _flatten(ids: list[list[int]], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), IDX_DTYPE, count=len(ids))
    tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(lengths.sum()))
    return tokens, lengths


def encode_chunk(chunk: Chunk) -> dict:
    """Decode, encode, filter and write one shard; return its counts (see `_empty_stats`)."""
    texts = [_decode_all(chunk.source_lines, chunk.source_path, chunk.first_line),
             _decode_all(chunk.target_lines, chunk.target_path, chunk.first_line)]
    source, target = _VOCABULARY.encode_source_batch(texts[0]), _VOCABULARY.encode_batch(texts[1])
    stats = _empty_stats()
    kept = range(len(source))
    if chunk.pair_filter is not None and not chunk.pair_filter.drop:
        _check_positions(chunk, source, target)
    elif chunk.pair_filter is not None:
        reasons = [chunk.pair_filter.reason(len(src), len(tgt)) for src, tgt in zip(source, target)]
        kept = [i for i, reason in enumerate(reasons) if reason is None]
        for reason in filter(None, reasons):
            stats["filtered"][reason] += 1
    if not kept:
        return stats
    shard = write_shard(chunk.shard_prefix, [source[i] for i in kept], [target[i] for i in kept],
                        chunk.token_dtype,
                        [[side[i] for i in kept] for side in texts] if chunk.keep_text else None)
    stats.update({key: shard[key] for key in ("sentences", "source_tokens", "target_tokens")},
                 max_source_length=shard.pop("max_source_length"),
                 max_target_length=shard.pop("max_target_length"), shards=[shard])
    return stats


def read_shard(prefix: Path, dtype: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The pairs of shard `prefix` (`write_shard`'s .bin and .idx): (source ids, target ids),
    one array of `dtype` a pair, in stored order."""
    tokens = np.fromfile(f"{prefix}.bin", dtype)
    lengths = np.fromfile(f"{prefix}.idx", IDX_DTYPE).reshape(2, -1)
    pieces = np.split(tokens, np.cumsum(lengths.reshape(-1))[:-1])
    count = lengths.shape[1]
    return pieces[:count], pieces[count:]


def write_shard(prefix: Path, source: list, target: list, dtype: str,
                texts: list[list[str]] | None = None) -> dict:
    """Write the shard `prefix`.bin/.idx of these pairs' ids (each a sequence of ints, no
    bos/eos), and `prefix`.txt of their `texts` ([source lines, target lines]) when given.

    Returns:
        The shard's entry of meta.json: name, sentences, source_tokens, target_tokens, sha256 of
        each file (and text_bytes with the text), and its max_source_length, max_target_length.
    """
    source_tokens, source_lengths = _flatten(source, dtype)
    target_tokens, target_lengths = _flatten(target, dtype)
    arrays = {"bin": np.concatenate([source_tokens, target_tokens]),
              "idx": np.stack([source_lengths, target_lengths])}
    if texts is not None:
        arrays["txt"] = np.frombuffer("".join(line + "\n" for side in texts for line in side)
                                      .encode("utf-8"), np.uint8)
    digests = {suffix: _write_array(Path(f"{prefix}.{suffix}"), array)
               for suffix, array in arrays.items()}
    shard = {"name": Path(prefix).name, "sentences": len(source),
             "source_tokens": int(source_lengths.sum()),
             "target_tokens": int(target_lengths.sum()), "sha256": digests,
             "max_source_length": int(source_lengths.max(initial=0)),
             "max_target_length": int(target_lengths.max(initial=0))}
    if texts is not None:
        shard["text_bytes"] = int(arrays["txt"].size)
    return shard


def _write_array(path: Path, array: np.ndarray) -> str:
    """Write `array`'s bytes to `path` and return their SHA-256 (kept in meta.json, so that a
    shard damaged later is named); a full disk is said as such, with the shard (NumPy's
    `tofile` said only "N requested and M written").

    Raises:
        DataError: the disk or quota is full (the folder, which becomes --destdir when done).
        OSError: any other error writing it.
    """
    data = np.ascontiguousarray(array).data
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DataError(f"no room on the disk for shard {path.name} ({error.strerror}; writing "
                        f"into {path.parent}, which becomes --destdir when done; nothing is "
                        f"left there): free space and run again") from None
    return hashlib.sha256(data).hexdigest()


def _check_positions(chunk: Chunk, source: list[list[int]], target: list[list[int]]) -> None:
    """A pair that is kept whatever its length must fit the model's positions (DataError)."""
    limit = chunk.pair_filter.max_positions
    for offset, (src, tgt) in enumerate(zip(source, target)):
        if len(src) > limit or len(tgt) + 1 > limit:
            raise DataError(
                f"{chunk.source_path} / {chunk.target_path}, line {chunk.first_line + offset}: "
                f"{len(src)} source and {len(tgt)} target ids (+1 for eos), more than "
                f"--max-positions {limit}; validation and test pairs are never dropped: shorten "
                f"or remove this line, or raise --max-positions")


def _empty_stats() -> dict:
    return {"sentences": 0, "source_tokens": 0, "target_tokens": 0, "max_source_length": 0,
            "max_target_length": 0, "filtered": dict.fromkeys(FILTER_REASONS, 0), "shards": []}


def _merge_stats(total: dict, part: dict) -> None:
    for key in ("sentences", "source_tokens", "target_tokens"):
        total[key] += part[key]
    for key in ("max_source_length", "max_target_length"):
        total[key] = max(total[key], part[key])
    for reason, count in part["filtered"].items():
        total["filtered"][reason] += count
    total["shards"].extend(part["shards"])


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT held back (not lost: delivered at the end) while a worker process may start: a
    worker inherits it held for good. Ctrl-C reaches the whole process group, and each worker
    would print a KeyboardInterrupt traceback of its own; held, the main process alone stops (the
    pool's shutdown lets the chunks being encoded finish, then ends the workers)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class Encoder:
    """Runs `encode_chunk` in the calling process (workers == 1) or in worker processes.

    Use as a context manager; the worker processes end on exit.

    Args:
        model_path: the SentencePiece model every worker loads once.
        workers: number of encoding processes.
    """

    def __init__(self, model_path: Path, workers: int):
        self.workers = workers
        self._executor = None
        if workers > 1:
            # spawn, not fork: the caller may have TensorFlow's threads running. An executor, not
            # multiprocessing.Pool: a worker that dies raises BrokenProcessPool instead of hanging.
            self._executor = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_load_vocabulary, initargs=(model_path,))
        else:
            _load_vocabulary(model_path)

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def map_ordered(self, fn: Callable, items: Iterable) -> Iterator:
        """fn(item) for each item, in order, with at most 2 x workers items in flight."""
        if self._executor is None:
            yield from map(fn, items)
            return
        pending = collections.deque()
        for item in items:
            with _interrupts_held():
                pending.append(self._executor.submit(fn, item))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _chunks(source: Path, target: Path, shard_size: int, out_prefix: Path,
            pair_filter: PairFilter | None, dtype: str, keep_text: bool) -> Iterator[Chunk]:
    pairs = read_parallel(source, target)
    for index in itertools.count():
        batch = list(itertools.islice(pairs, shard_size))
        if not batch:
            return
        source_lines, target_lines = zip(*batch)
        yield Chunk(source, target, index * shard_size + 1, list(source_lines),
                    list(target_lines), Path(f"{out_prefix}.{index:05d}"), pair_filter, dtype,
                    keep_text)


def binarize_split(encoder: Encoder, source: Path, target: Path, out_prefix: Path,
                   vocab_size: int, shard_size: int, pair_filter: PairFilter | None,
                   progress: LineProgress | None = None, keep_text: bool = False) -> dict:
    """Encode one split (a pair of parallel files) into shards `out_prefix.NNNNN.{bin,idx}`.

    Args:
        encoder: the process pool (or in-process runner) to encode with.
        source, target: the parallel text files (plain or .gz).
        out_prefix: e.g. DIR/train; shards are numbered from 00000.
        vocab_size: decides the stored id dtype (`token_dtype`).
        shard_size: input pairs per shard.
        pair_filter: None keeps every pair; one with `drop` False keeps them all too, but
            refuses a pair longer than its positions (validation and test).
        progress: told of each shard's pairs, kept or filtered, as it is written.
        keep_text: also write each shard's text (`SPLIT.NNNNN.txt`).

    Returns:
        Counts: sentences, source_tokens, target_tokens kept (ids, no bos/eos), max_source_length,
        max_target_length, filtered {reason: pairs}, shards [{name, sentences, source_tokens,
        target_tokens, sha256, and text_bytes with the text}] (empty shards are not written).

    Raises:
        DataError: unequal line counts, invalid UTF-8 (file and line named), unreadable gzip, a
            pair too long for a non-dropping filter (files and line named).
    """
    stats = _empty_stats()
    chunks = _chunks(source, target, shard_size, out_prefix, pair_filter, token_dtype(vocab_size),
                     keep_text)
    for part in encoder.map_ordered(encode_chunk, chunks):
        _merge_stats(stats, part)
        if progress:
            progress.update(part["sentences"] + sum(part["filtered"].values()))
    return stats

