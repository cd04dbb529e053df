"""Small parallel corpora cut from Multi30k (written to a temporary folder) and their data dirs."""

import gzip
import itertools
from pathlib import Path

import pytest

from vtx.data.binarize import read_shard  # noqa: F401 -- the tests' reader of shards
from vtx.data.preprocess import PreprocessConfig, preprocess

TRAIN_LINES = 2000
VALID_LINES = 200
SMALL_VOCAB = 1000


def head(path: Path, count: int) -> list[str]:
    """The first `count` lines of a gzip text file, without newlines."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, count)]


def write_lines(path: Path, lines: list[str]) -> Path:
    """Write lines, gzipped when the name ends in .gz."""
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path


@pytest.fixture(scope="session")
def small_corpus(shared_data, tmp_path_factory) -> Path:
    """train.{en,de}.gz (2000 pairs) and plain valid.{en,de} (200 pairs) from Multi30k."""
    folder = tmp_path_factory.mktemp("corpus")
    multi30k = shared_data / "multi30k"
    for lang in ("en", "de"):
        write_lines(folder / f"train.{lang}.gz", head(multi30k / f"train.{lang}.gz", TRAIN_LINES))
        write_lines(folder / f"valid.{lang}", head(multi30k / f"val.{lang}.gz", VALID_LINES))
    return folder


@pytest.fixture(scope="session")
def small_data_dir(small_corpus, tmp_path_factory) -> Path:
    """`vtx preprocess` output for small_corpus, vocabulary 1000, shards of 300 pairs."""
    destdir = tmp_path_factory.mktemp("data") / "bin"
    preprocess(PreprocessConfig("en", "de", destdir, trainpref=str(small_corpus / "train"),
                                validpref=str(small_corpus / "valid"), vocab_size=SMALL_VOCAB,
                                shard_size=300))
    return destdir
