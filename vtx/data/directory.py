"""An opened data directory, as `vtx preprocess` writes it (`vtx.data.preprocess`): its path and
its meta.json, read and checked once, with what the rest of vtx asks of it (the vocabulary, the
splits, what identifies the training pairs).

    DataDirectory.open(path) -> DataDirectory     meta.json read, every file it names checked
    opened(data_dir) -> DataDirectory             a path opened, an opened directory as it is
    checked_reading(batches, data_dir) -> batches a read error said as the file that changed

The input pipeline (`vtx.data.pipeline`, `vtx.data.packing`) takes either; `vtx train` opens
its data directory once and passes the object.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from vtx import manifest
from vtx.data.preprocess import FORMAT, META_FILE
from vtx.data import vocab
from vtx.data.vocab import Vocabulary
from vtx.errors import DataError


@dataclasses.dataclass(frozen=True)
class DataDirectory:
    """A `vtx preprocess` output directory, opened: `path` and its checked `meta` (meta.json).

    It stands for its path where one is wanted (`os.fspath`, `str`), so that a message names
    the directory by its path.
    """

    path: Path
    meta: dict = dataclasses.field(repr=False, compare=False)

    @classmethod
    def open(cls, path: str | Path) -> "DataDirectory":
        """Read and check `path`/meta.json (`load_meta`), then the directory against its
        manifest (`vtx.manifest`; once a process for each meta.json).

        Raises:
            FileNotFoundError: no meta.json (not a finished `vtx preprocess` directory).
            ValueError: an unknown format.
            DataError: meta.json is damaged, or a file it names is missing or of another size.
            ManifestError: a file changed, missing or added since `vtx preprocess` wrote the
                directory, or a link leaving it (the file named).
        """
        meta = load_meta(path)
        # After meta.json's checks, which say more of a shard (its size); the manifest says
        # the rest: the vocabulary's bytes, meta.json's, a file added, a link leaving it.
        verified = _state(Path(path) / META_FILE)
        if verified not in _VERIFIED:
            manifest.verify(path)
            _VERIFIED.add(verified)
        return cls(Path(path), meta)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def vocabulary_path(self) -> Path:
        """The vocabulary file of the directory (a SentencePiece model, or a pair vocabulary's
        bytes: `vtx.data.vocab.load`)."""
        return self.path / self.meta["vocab"]["model"]

    @property
    def vocab_size(self) -> int:
        """Number of ids of the directory's vocabulary (special ids included)."""
        return int(self.meta["vocab"]["size"])

    def load_vocabulary(self) -> Vocabulary:
        """The directory's vocabulary."""
        return vocab.load(self.vocabulary_path)

    @property
    def splits(self) -> dict:
        """Each split's meta (its counts, longest pair and shards), by name."""
        return self.meta.get("splits", {})

    def split(self, name: str) -> dict:
        """The meta of split `name`.

        Raises:
            ValueError: the directory has no such split (the ones it has named).
        """
        if name not in self.meta["splits"]:
            raise ValueError(f"split {name!r} not in the data directory; it has "
                             f"{', '.join(self.meta['splits'])}")
        return self.meta["splits"][name]

    def shard_prefix(self, shard: dict) -> Path:
        """The path of a shard's files without their suffix (.bin: the ids, .idx: the lengths,
        .txt: the text where kept): in the directory, or in the `folder` its entry names (a
        split segmented anew by `vtx.data.subword`, outside the directory)."""
        return Path(shard.get("folder", self.path)) / shard["name"]

    @property
    def has_training_text(self) -> bool:
        """Whether every training shard keeps its text (`vtx preprocess --keep-train-text`)."""
        shards = self.splits.get("train", {}).get("shards", [])
        return bool(shards) and all("text_bytes" in shard for shard in shards)

    def shard_text(self, shard: dict) -> tuple[list[str], list[str]]:
        """The text of a shard's pairs (its .txt), as (source lines, target lines).

        Raises:
            DataError: the file is missing, or not the text meta.json keeps (its SHA-256).
        """
        path = Path(f"{self.shard_prefix(shard)}.txt")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DataError(f"{path} is missing: a shard's text {self.path / META_FILE} names; "
                            f"run `vtx preprocess` again") from None
        if hashlib.sha256(data).hexdigest() != shard["sha256"]["txt"]:
            raise DataError(f"{path}: damaged since `vtx preprocess` wrote it (its SHA-256 is "
                            f"not the one {self.path / META_FILE} keeps); run `vtx preprocess` "
                            f"again")
        lines = data.decode("utf-8").split("\n")[:-1]
        count = shard["sentences"]
        return lines[:count], lines[count:]

    def training_data(self) -> dict:
        """What identifies the directory's training pairs for a checkpoint: their count, their
        target tokens and a SHA-256 of every training shard's lengths in order (the .idx files,
        8 bytes a pair: 0.3 GB for WMT14 EN-FR's 36M pairs). A data position counts the batches
        cut from these lengths in a seeded order, so other pairs, or the same in another order,
        give it other batches; a directory preprocessed again from the same text gives the
        same."""
        split = self.meta["splits"]["train"]
        digest = hashlib.sha256()
        for shard in split["shards"]:
            with open(f"{self.shard_prefix(shard)}.idx", "rb") as file:
                while chunk := file.read(1 << 24):
                    digest.update(chunk)
        return {"pairs": int(split["sentences"]), "target_tokens": int(split["target_tokens"]),
                "lengths_sha256": digest.hexdigest()}


# What the input pipeline's check says of a shard holding an id past the vocabulary.
IDS_BEYOND_THE_VOCABULARY = "a shard holds ids beyond the vocabulary"

# What the input pipeline's functions take as their data directory.
DataDir = DataDirectory | str | Path


def opened(data_dir: DataDir) -> DataDirectory:
    """`data_dir` as an opened directory: opened now when it is a path."""
    return data_dir if isinstance(data_dir, DataDirectory) else DataDirectory.open(data_dir)


def load_meta(data_dir: str | Path) -> dict:
    """Read `DATA_DIR/meta.json`.

    Raises:
        FileNotFoundError: no meta.json (not a finished `vtx preprocess` directory).
        ValueError: an unknown format.
        DataError: meta.json is not JSON, or a file it names is missing or of another size
            (checked once a process for each meta.json).
    """
    path = Path(data_dir) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {data_dir} is not a `vtx preprocess` "
                                f"output directory")
    try:
        meta = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not readable as JSON ({error}): damaged; run `vtx "
                        f"preprocess` again") from error
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise ValueError(f"{path}: format {found!r}, expected {FORMAT!r}")
    checked = _state(path)
    if checked not in _CHECKED:  # once a process: called per epoch, a WMT dir has many shards
        try:
            _check_files(Path(data_dir), meta)
        except DataError:
            raise
        except KeyError as error:
            raise DataError(f"{path}: no {error} where `vtx preprocess` writes one: damaged; "
                            f"run it again") from error
        except (TypeError, ValueError, AttributeError) as error:
            raise DataError(f"{path}: a value of the wrong kind ({error}): damaged; run `vtx "
                            f"preprocess` again") from error
        _CHECKED.add(checked)
    return meta


_CHECKED: set[tuple[str, int, int]] = set()  # meta.json files whose shards were checked
_VERIFIED: set[tuple[str, int, int]] = set()  # those whose directory matched its manifest


def _state(meta_path: Path) -> tuple[str, int, int]:
    """What tells one meta.json from another, or from itself rewritten: path, time, size."""
    state = meta_path.stat()
    return str(meta_path.resolve()), state.st_mtime_ns, state.st_size


def checked_reading(batches: Iterable, data_dir: DataDir) -> Iterator:
    """`batches` (an epoch read from `data_dir`); an error reading them is raised as the
    DataError naming a file of the directory that is no longer as its meta.json says (missing,
    of another size, of other contents than its checksum), when one is: `load_meta` checks the
    files once a process, and a shard cut short or deleted after that (a disk filling, a `vtx
    preprocess --force` there) failed hours into training in TensorFlow's or NumPy's words
    without the file (a traceback, or "Size of available data is not a multiple of the
    data-type size"). Other errors are raised as they are.

    Raises:
        DataError: a file of `data_dir` changed since the run checked it (named).
    """
    try:
        yield from batches
    except Exception as error:
        _CHECKED.clear()  # the check again, not its cached result
        try:
            meta = load_meta(data_dir)
            _check_ids(Path(data_dir), meta)
        except (DataError, OSError, ValueError) as changed:
            raise changed from error
        if IDS_BEYOND_THE_VOCABULARY in str(error):  # a shard without checksums (older vtx)
            raise DataError(f"a shard of {data_dir} holds ids beyond its vocabulary of "
                            f"{meta['vocab']['size']:,}: damaged since `vtx preprocess` wrote "
                            f"it; run `vtx preprocess` again") from error
        raise


def _check_files(data_dir: Path, meta: dict) -> None:
    """Every file meta.json names is there, each shard of the size its counts give: a shard cut
    short (a full disk, a copy interrupted) would otherwise be read as fewer or emptier pairs
    without a word. Each shard's lengths (.idx, 8 bytes a pair) are read: their SHA-256 where
    meta.json keeps one, their sums and longest against its counts, so that a damaged length
    never makes a batch past the model's positions or --max-tokens. The ids (.bin) are checked
    when reading them fails (`checked_reading`)."""
    again = "run `vtx preprocess` again"
    vocabulary = data_dir / meta["vocab"]["model"]
    if not vocabulary.is_file():
        raise DataError(f"{vocabulary} is missing: the vocabulary {data_dir / META_FILE} names; "
                        f"{again}")
    width = np.dtype(meta["token_dtype"]).itemsize
    for split in meta["splits"].values():
        for shard in split["shards"]:
            pairs, tokens = shard["sentences"], shard["source_tokens"] + shard["target_tokens"]
            sizes = [(".idx", 8 * pairs, f"{2 * pairs:,} lengths"),
                     (".bin", width * tokens, f"{tokens:,} ids")]
            if "text_bytes" in shard:
                sizes.append((".txt", shard["text_bytes"], "the bytes of its text"))
            for suffix, size, what in sizes:
                file = data_dir / (shard["name"] + suffix)
                try:
                    found = os.stat(file).st_size
                except FileNotFoundError:
                    raise DataError(f"{file} is missing: a shard {data_dir / META_FILE} names; "
                                    f"{again}") from None
                if found != size:
                    raise DataError(f"{file} holds {found:,} bytes where {data_dir / META_FILE} "
                                    f"counts {what} ({size:,} bytes): cut short or from another "
                                    f"run; {again}")
            _check_lengths(data_dir / f"{shard['name']}.idx", shard, split, data_dir / META_FILE)


def _check_lengths(index: Path, shard: dict, split: dict, meta_path: Path) -> None:
    """A shard's lengths as meta.json says: their checksum (where kept), their sums and their
    longest.

    Raises:
        DataError: they differ (the file named): damaged since `vtx preprocess` wrote them.
    """
    data = index.read_bytes()
    damaged = f"{index}: damaged since `vtx preprocess` wrote it"
    kept = (shard.get("sha256") or {}).get("idx")
    if kept is not None and hashlib.sha256(data).hexdigest() != kept:
        raise DataError(f"{damaged} (its SHA-256 is not the one {meta_path} keeps); run `vtx "
                        f"preprocess` again")
    lengths = np.frombuffer(data, np.int32).reshape(2, -1).astype(np.int64)
    for side, name in ((0, "source"), (1, "target")):
        total, longest = int(lengths[side].sum()), int(lengths[side].max(initial=0))
        if (total != shard[f"{name}_tokens"] or longest > split[f"max_{name}_length"]
                or int(lengths[side].min(initial=1)) < 0):
            raise DataError(f"{damaged} (its {name} lengths sum to {total:,} with a longest of "
                            f"{longest:,}, where {meta_path} counts {shard[f'{name}_tokens']:,} "
                            f"with a longest of {split[f'max_{name}_length']:,}); run `vtx "
                            f"preprocess` again")


def _check_ids(data_dir: Path, meta: dict) -> None:
    """Each shard's ids (.bin) against the SHA-256 meta.json keeps, where it keeps one.

    Raises:
        DataError: a shard's ids differ (the file named).
    """
    for split in meta["splits"].values():
        for shard in split["shards"]:
            kept = (shard.get("sha256") or {}).get("bin")
            if kept is None:
                continue
            file = data_dir / f"{shard['name']}.bin"
            digest = hashlib.sha256()
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    digest.update(chunk)
            if digest.hexdigest() != kept:
                raise DataError(f"{file}: damaged since `vtx preprocess` wrote it (its SHA-256 "
                                f"is not the one {data_dir / META_FILE} keeps); run `vtx "
                                f"preprocess` again")
