"""Shared test fixtures. The real data lives in ../shared/data beside the checkout (never copied)."""

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Before any test imports TensorFlow: the environment vtx sets for it (vtx/__init__.py).
import vtx  # noqa: E402, F401

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("VTX_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data (or $VTX_SHARED_DATA); fails loudly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; set VTX_SHARED_DATA")
    return SHARED_DATA


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` that `build(folder)` fills, built once per test run: the xdist workers
    of a run share it (the first to ask builds it under a lock, the others wait for it), so
    that a session fixture of a minute is not paid again by each worker that runs its tests.

    A build that failed is retried by the next to ask, in a fresh folder.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    folder, done = root / name, root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def multi30k_small(shared_data, tmp_path_factory):
    """The first 3000 Multi30k training pairs (+ val/test) preprocessed with a 1000-piece vocabulary."""
    return built_once(tmp_path_factory, "multi30k_small",
                      lambda root: write_multi30k_small(shared_data, root))


def write_multi30k_small(shared_data: Path, root: Path) -> None:
    """`multi30k_small`'s text files and data directory (root/data), written into `root`."""
    import gzip

    from click.testing import CliRunner

    from vtx_cli.main import main

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


TRANSLATION_MODEL = REPO_ROOT / "tests" / "fixtures" / "multi30k_tiny.npz"


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory) -> Path:
    """A tiny EN->DE model trained once on all of Multi30k (tests/fixtures/make_translation_model.sh),
    the same file on every machine: its translations vary with the input, unlike a model trained
    for a few hundred updates inside the suite, whose outputs depend on the CPU's rounding.

    Copied as `run/checkpoint_<step>.npz` of a fresh folder, with max_positions 64 (sinusoidal
    positions have no weights, so the limit is free to lower) so that overlong lines are cheap.
    """
    from vtx import checkpoints

    checkpoint = checkpoints.load(TRANSLATION_MODEL)
    checkpoint.meta["model_config"]["max_positions"] = 64
    path = checkpoints.checkpoint_path(tmp_path_factory.mktemp("trained") / "run",
                                       checkpoint.meta["step"])
    path.parent.mkdir()
    checkpoints.save(path, checkpoint)
    return path


# A model small enough to write by hand (464 parameters), for checkpoints of made-up weights.
TOY_MODEL = {"vocab_size": 8, "num_layers": 1, "d_model": 4, "d_ff": 8, "num_heads": 1}


def toy_weights(arrays: list, model_config: dict = TOY_MODEL) -> list:
    """`arrays`, then float32 zeros making up the parameters `model_config` has: the weights
    of a checkpoint its own configuration describes, as averaging and translating check."""
    from vtx.config import ModelConfig

    missing = ModelConfig.from_dict(model_config).parameter_count - sum(
        a.size for a in arrays if a.dtype.kind == "f")
    assert missing >= 0, f"more weights than {model_config} has"
    return list(arrays) + [np.zeros(missing, np.float32)]


def ended_pid() -> int:
    """The id of a process that has ended (and was this process's child: not reused meanwhile
    by anything a test could mistake for running, short of a wrap-around)."""
    import subprocess
    import sys
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)


def as_traced_update(function):
    """`function`, a stand-in for a Trainer's `_update` (one that raises TensorFlow's error),
    given the `get_concrete_function` by which the trainer traces its update before the first
    call and then calls what it returns (here: nothing to trace, `function` itself)."""
    function.get_concrete_function = lambda *args: function
    return function


@pytest.fixture(scope="session")
def random_parser_checkpoint(shared_data, tmp_path_factory) -> Path:
    """A random-weight parser (tests/inference/parser_checkpoint.py) on 20 sample treebank files:
    `vtx parse` refuses a translation model's checkpoint."""
    from tests.inference.parser_checkpoint import write_random_parser

    files = sorted((shared_data / "ptb_sample").glob("wsj_*.mrg"))[:20]
    return write_random_parser(tmp_path_factory.mktemp("parser"), files)
