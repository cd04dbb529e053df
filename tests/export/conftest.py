"""Fixtures for the export tests: a tiny model trained long enough for varied translations."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import train_tiny
from vtx_cli.main import main


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="session")
def export_checkpoint(multi30k_small) -> Path:
    """A tiny model trained 300 steps without dropout or label smoothing (about 50 s on 2 cores):
    its translations vary with the input (the suite's 150-step model mostly repeats a few), so
    comparisons cover many search paths, EOS decisions and length limits."""
    return train_tiny(multi30k_small, "export_run", {"dropout": 0.0}, max_steps=300,
                      max_tokens=2048, warmup_steps=100, label_smoothing=0.0)


@pytest.fixture(scope="session")
def test_sentences(multi30k_small) -> list[str]:
    """The first 200 English sentences of Multi30k test_2016."""
    return (multi30k_small / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()


def vtx_translate(checkpoint: Path, lines: list[str], tmp_path: Path, *options) -> list[str]:
    """`vtx translate` of `lines`, one output line per input line."""
    source, target = tmp_path / "source.txt", tmp_path / "vtx.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke("translate", "--checkpoint", checkpoint, "--input", source, "--output", target,
           *options)
    return target.read_text(encoding="utf-8").split("\n")[:-1]
