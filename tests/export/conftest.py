"""A tiny Transformer trained for a few hundred steps on 2000 Multi30k pairs (about a minute on
2 cores): enough for varied, non-trivial translations to compare exports against `vtx translate`."""

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from vtx_cli.main import main

TRAIN_PAIRS = 2000
TRAIN_STEPS = "300"


def multi30k_lines(shared_data: Path, name: str, count: int) -> list[str]:
    with gzip.open(shared_data / "multi30k" / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for _, line in zip(range(count), handle)]


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory, shared_data) -> Path:
    root = tmp_path_factory.mktemp("trained")
    for lang in ("en", "de"):
        lines = multi30k_lines(shared_data, f"train.{lang}.gz", TRAIN_PAIRS)
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", root / "train",
           "--destdir", root / "data", "--vocab-size", 1000)
    invoke("train", root / "data", "--arch", "tiny", "--save-dir", root / "save",
           "--max-steps", TRAIN_STEPS, "--max-tokens", 1024, "--warmup-steps", 100,
           "--dropout", 0, "--label-smoothing", 0, "--save-interval-steps", TRAIN_STEPS,
           "--validate-interval-steps", 0, "--log-interval-steps", 100)
    return root / "save" / f"checkpoint_{int(TRAIN_STEPS):08d}.npz"


@pytest.fixture(scope="session")
def test_sentences(shared_data) -> list[str]:
    """The first 200 English sentences of Multi30k test_2016."""
    return multi30k_lines(shared_data, "test_2016_flickr.en.gz", 200)


def vtx_translate(checkpoint: Path, lines: list[str], tmp_path: Path, *options) -> list[str]:
    """`vtx translate` of `lines`, one output line per input line."""
    source, target = tmp_path / "source.txt", tmp_path / "vtx.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke("translate", "--checkpoint", checkpoint, "--input", source, "--output", target,
           *options)
    return target.read_text(encoding="utf-8").split("\n")[:-1]
