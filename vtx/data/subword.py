"""Subword regularization: each epoch, the training pairs segmented anew by sampling.

Kudo 2018 ("Subword Regularization", section 3): a unigram vocabulary samples a segmentation of
each sentence, `alpha` smoothing the segmentations' probabilities, among the `nbest` best (None:
all). For a BPE vocabulary (what `vtx preprocess` trains by default) SentencePiece's sampling is
BPE-dropout (Provilkov et al. 2020): each merge is dropped with probability `alpha`.

How the data flows, so that the batching stays as it is and a run resumes exactly:
    `vtx preprocess --keep-train-text` keeps the training pairs' text beside their ids
    (`train.NNNNN.txt`, checksummed in meta.json).
    `SubwordSampler.epoch(e, fits)` encodes that text anew, each shard sampled with a seed that is
    a function of (seed, e, shard) only, and writes the ids as a data directory of the training
    split alone, FOLDER/epoch-EEEEEE (built aside, renamed into place: `vtx.atomic`; `vtx train`'s
    FOLDER is a hidden one of its process in the save dir: `atomic.scratch_directory`), which the
    unchanged batching (`pipeline.train_batches`, `packing.packed_batches`) reads. A resumed run
    makes the same epoch again, every worker the same one. A sampled pair that the run's batch
    shapes do not hold (`fits`: `pipeline.fits_buckets`, `packing.fits_packed`) keeps its
    deterministic ids, those of the preprocessed shards: counted and said.
    `SubwordSampler.shapes_view(max_positions)`: the data directory with a training split of both
    the deterministic pairs and epoch 0's sampled ones, over which a run chooses its batch shapes,
    so that they hold the sampled lengths (longer: BPE-dropout at alpha 0.1 makes Multi30k's
    pairs ~1.4x as long) and every deterministic pair (the fallback).
Validation and test pairs are never sampled: they are read from the data directory as they are.
What an epoch's encoding costs: docs/results.md, subword regularization.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from vtx import atomic
from vtx.data.binarize import read_shard, write_shard
from vtx.data.directory import DataDirectory
from vtx.data.preprocess import META_FILE, SPM_FILE
from vtx.errors import ArgumentError, DataError

# fits(source lengths, target_in lengths) -> bool [n]: the pairs a run's batch shapes hold.
Fits = Callable[[np.ndarray, np.ndarray], np.ndarray]

EPOCH_FOLDER = re.compile(r"epoch-(\d{6})")
KEPT_EPOCHS = 2  # an epoch's folder and the next's: the read-ahead may have begun the next


def check_sampling(data: DataDirectory, alpha: float, nbest: int | None) -> str:
    """Check that `data` can be sampled so; return its vocabulary's type ("bpe" or "unigram").

    Raises:
        DataError: `data` keeps no training text (an older directory, or one preprocessed
            without --keep-train-text), or its vocabulary is of a type SentencePiece samples
            not.
        ArgumentError: `alpha` past 1 or an `nbest` with a BPE vocabulary.
    """
    if not data.has_training_text:
        raise DataError(f"{data} keeps no text of its training pairs (its meta.json names no "
                        f"train.NNNNN.txt), which subword regularization segments anew each "
                        f"epoch: run `vtx preprocess` again with --keep-train-text")
    model_type = data.load_vocabulary().model_type
    if model_type == "bpe" and alpha > 1:
        raise ArgumentError("{subword_alpha} {value}: for a BPE vocabulary it is the probability "
                            "of dropping each merge (BPE-dropout), in (0, 1]", value=alpha)
    if model_type == "bpe" and nbest is not None:
        raise ArgumentError("{subword_nbest} {value} goes with a unigram vocabulary: BPE-dropout "
                            "samples no n-best list (leave it out)", value=nbest)
    if model_type not in ("bpe", "unigram"):
        raise DataError(f"{data.vocabulary_path} is a {model_type} vocabulary: SentencePiece "
                        f"samples segmentations of bpe and unigram ones only")
    return model_type


class SubwordSampler:
    """The training split of `data` segmented anew each epoch (see the module docstring).

    Args:
        data: a data directory that keeps its training text (`check_sampling`).
        alpha, nbest: SentencePiece's sampling (`Vocabulary.sample_batch`).
        seed: the run's seed; epoch e is sampled from (seed, e).
        folder: where the epochs' data directories are written (this process's own).
        log: told of each epoch's encoding: its time and the pairs kept deterministic.

    Raises:
        DataError, ArgumentError: as `check_sampling`.
    """

    def __init__(self, data: DataDirectory, alpha: float, nbest: int | None, seed: int,
                 folder: Path, log: Callable[[str], None] = lambda line: None):
        self.model_type = check_sampling(data, alpha, nbest)
        self.data, self.alpha, self.nbest, self.seed = data, alpha, nbest, seed
        self.folder, self.log = Path(folder), log
        self._vocabulary = data.load_vocabulary()
        self._written: dict[int, DataDirectory] = {}  # this process's newest epochs
        self._lock = threading.Lock()  # one epoch written at a time

    def epoch(self, epoch: int, fits: Fits) -> DataDirectory:
        """The data directory of epoch `epoch`'s sampled training pairs, each one `fits` does not
        hold replaced by its deterministic ids; written once a process (the same `fits` each
        time), later calls return it."""
        with self._lock:
            if epoch not in self._written:
                started = time.perf_counter()
                self._written[epoch], kept = self._write(f"epoch-{epoch:06d}", epoch, fits)
                pairs = self.data.split("train")["sentences"]
                self.log(f"subword sampling: epoch {epoch} segmented anew in "
                         f"{time.perf_counter() - started:.1f} s; {kept:,} of {pairs:,} pairs "
                         f"kept deterministic (their sampled ids fit no batch shape)")
                self._prune()
            return self._written[epoch]

    def shapes_view(self, max_positions: int) -> DataDirectory:
        """`data` with a training split of its deterministic pairs and epoch 0's sampled ones
        (those within `max_positions`), to choose a run's batch shapes over; its other splits
        as they are."""
        sampled, _ = self._write("shapes", 0, lambda source, target: np.maximum(source, target)
                                 <= max_positions)
        ours, theirs = self.data.split("train"), sampled.split("train")
        shards = ours["shards"] + [{**shard, "folder": str(sampled.path)}
                                   for shard in theirs["shards"]]
        both = {**ours, "shards": shards,
                **{key: ours[key] + theirs[key]
                   for key in ("sentences", "source_tokens", "target_tokens")},
                **{key: max(ours[key], theirs[key])
                   for key in ("max_source_length", "max_target_length")}}
        meta = {**self.data.meta, "splits": {**self.data.splits, "train": both}}
        return DataDirectory(self.data.path, meta)

    def _write(self, name: str, epoch: int, fits: Fits) -> tuple[DataDirectory, int]:
        """Encode epoch `epoch` and write it as FOLDER/`name`; (its data directory, the pairs
        kept deterministic)."""
        path = self.folder / name
        self.folder.mkdir(parents=True, exist_ok=True)
        dtype = self.data.meta["token_dtype"]
        shards, kept = [], 0
        with atomic.new_directory(path) as building:
            for index, shard in enumerate(self.data.split("train")["shards"]):
                source, target, deterministic = self._sampled_shard(index, shard, epoch, fits)
                shards.append(write_shard(building / shard["name"], source, target, dtype))
                kept += deterministic
            shutil.copyfile(self.data.vocabulary_path, building / SPM_FILE)
            (building / META_FILE).write_text(json.dumps(self._meta(epoch, shards), indent=2))
        return DataDirectory.open(path), kept

    def _sampled_shard(self, index: int, shard: dict, epoch: int,
                       fits: Fits) -> tuple[list, list, int]:
        """(source ids, target ids, pairs kept deterministic) of one training shard in epoch
        `epoch`: sampled with a seed of (seed, epoch, index), a pair that `fits` does not hold
        replaced by its deterministic ids."""
        source_text, target_text = self.data.shard_text(shard)
        seed = int(np.random.SeedSequence([self.seed, epoch, index]).generate_state(1)[0])
        sampled = self._vocabulary.sample_batch(source_text + target_text, self.alpha,
                                                self.nbest, seed)
        count = len(source_text)
        source, target = sampled[:count], sampled[count:]
        lengths = np.array([[len(ids) for ids in side] for side in (source, target)],
                           np.int64).reshape(2, count)
        held = fits(lengths[0], lengths[1] + 1)  # target_in: bos + the target
        if held.all():
            return source, target, 0
        old_source, old_target = read_shard(self.data.shard_prefix(shard),
                                            self.data.meta["token_dtype"])
        for pair in np.flatnonzero(~held).tolist():
            source[pair], target[pair] = old_source[pair], old_target[pair]
        return source, target, int(np.sum(~held))

    def _meta(self, epoch: int, shards: list[dict]) -> dict:
        """meta.json of an epoch's directory: the data directory's, its training split alone
        (`shards`: `write_shard`'s entries, their longest pairs taken out)."""
        longest = {key: max(shard.pop(key) for shard in shards)
                   for key in ("max_source_length", "max_target_length")}
        split = {"source_file": None, "target_file": None, "filtered": {}, **longest,
                 **{key: sum(shard[key] for shard in shards)
                    for key in ("sentences", "source_tokens", "target_tokens")},
                 "shards": shards}
        return {**self.data.meta, "keep_train_text": False, "splits": {"train": split},
                "subword": {"data_dir": str(self.data.path), "epoch": epoch, "seed": self.seed,
                            "alpha": self.alpha, "nbest": self.nbest}}

    def _prune(self) -> None:
        """Remove the epochs' folders but the newest `KEPT_EPOCHS` this process wrote (the
        shapes' folder stays: `shapes_view` may still read it)."""
        keep = sorted(self._written)[-KEPT_EPOCHS:]
        self._written = {epoch: self._written[epoch] for epoch in keep}
        for path in self.folder.iterdir():
            match = EPOCH_FOLDER.fullmatch(path.name)
            if match and int(match.group(1)) not in keep:
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def sampling(data: DataDirectory, train_config, save_dir: Path, log: Callable[[str], None]):
    """A training run's `SubwordSampler` (`train_config.subword_alpha`, a `TrainConfig`'s; None
    without), writing its epochs into a folder of this process's own in `save_dir`, removed
    when the block ends.

    Raises:
        DataError: the data directory keeps no training text.
        ArgumentError: a setting its vocabulary's type refuses.
    """
    if train_config.subword_alpha is None:
        yield None
        return
    check_sampling(data, train_config.subword_alpha, train_config.subword_nbest)
    save_dir.mkdir(parents=True, exist_ok=True)
    with atomic.scratch_directory(save_dir / "subword") as folder:
        sampler = SubwordSampler(data, train_config.subword_alpha, train_config.subword_nbest,
                                 train_config.seed, folder, log)
        nbest = train_config.subword_nbest
        log(f"subword regularization: each epoch the training text segmented anew "
            f"({'BPE-dropout' if sampler.model_type == 'bpe' else 'unigram sampling'}, alpha "
            f"{train_config.subword_alpha:g}"
            f"{f', among the {nbest} best' if nbest else ''}); validation as preprocessed")
        yield sampler
