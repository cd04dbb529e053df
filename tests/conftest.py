"""Shared test fixtures. The real data lives in ../shared/data beside the checkout (never copied)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("VTX_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data (or $VTX_SHARED_DATA); fails loudly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; set VTX_SHARED_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def multi30k_small(shared_data, tmp_path_factory):
    """The first 3000 Multi30k training pairs (+ val/test) preprocessed with a 1000-piece vocabulary."""
    import gzip

    from click.testing import CliRunner

    from vtx_cli.main import main

    root = tmp_path_factory.mktemp("multi30k_small")
    for split, count in (("train", 3000), ("val", 200), ("test_2016_flickr", 200)):
        for lang in ("en", "de"):
            with gzip.open(shared_data / "multi30k" / f"{split}.{lang}.gz", "rt") as handle:
                lines = [next(handle) for _ in range(count)]
            (root / f"{split}.{lang}").write_text("".join(lines))
    result = CliRunner().invoke(main, [
        "preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", str(root / "train"), "--validpref", str(root / "val"),
        "--testpref", str(root / "test_2016_flickr"), "--destdir", str(root / "data"),
        "--vocab-size", "1000"])
    assert result.exit_code == 0, result.output
    return root


def train_tiny(data_root: Path, name: str, overrides: dict, **train_options) -> Path:
    """Train the tiny preset on `data_root/data` with the library `vtx train` call; returns the
    newest checkpoint. `train_options` are TrainConfig fields (max_steps, max_tokens, ...)."""
    from vtx import config
    from vtx.training import checkpoints, run

    save_dir = data_root / name
    defaults = dict(save_interval_minutes=0, validate_interval_steps=0, log_interval_steps=100)
    train_config = config.TrainConfig(**{**defaults, **train_options})
    run.train(data_root / "data", save_dir, "tiny", overrides, train_config, log=lambda line: None)
    return checkpoints.list_checkpoints(save_dir)[-1]


@pytest.fixture(scope="session")
def trained_checkpoint(multi30k_small):
    """A tiny model (max_positions 64) trained 150 steps by the library `vtx train` calls."""
    return train_tiny(multi30k_small, "run", {"max_positions": 64}, max_steps=150,
                      max_tokens=1024, warmup_steps=60)
