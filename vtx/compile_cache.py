"""TensorFlow's persistent XLA cache: compiled update programs kept on disk, so that a resumed
`vtx train --jit` starts updating at once instead of compiling every batch shape again (each
shape's compile takes minutes for a large model on a GPU: `benchmarks/gpu_train.py`, its
`compile s` column, docs/benchmarks.md).

TensorFlow reads the cache directory from `TF_XLA_FLAGS` when XLA first compiles, so `enable`
must run before any XLA compilation (`vtx train` calls it before importing TensorFlow). The cache
is specific to the machine: XLA:CPU programs are compiled for the host's instruction set, so a
cache is only used by default on a GPU machine and lives in the run's save dir.

This module imports no TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

FLAG = "--tf_xla_persistent_cache_directory"
DEFAULT_NAME = "xla_cache"


def listed_gpus() -> list[str]:
    """The GPUs `nvidia-smi -L` lists (its lines), found without importing TensorFlow."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in listed.splitlines() if line.startswith("GPU ")]


def default_directory(save_dir: str | Path) -> Path | None:
    """SAVE_DIR/xla_cache on a machine with a GPU, else None (no cache)."""
    return Path(save_dir) / DEFAULT_NAME if listed_gpus() else None


def jit_by_default(devices: list[str] | None) -> bool:
    """`vtx train`'s XLA default: on where nvidia-smi lists a GPU (there XLA trains several times
    faster: `benchmarks/gpu_train.py` with and without `--no-jit`, docs/benchmarks.md), unless
    `devices` names devices and none is a GPU; off on a CPU, where XLA does not help."""
    if devices and not any("gpu" in device.lower() for device in devices):
        return False
    return bool(listed_gpus())


def current_directory() -> Path | None:
    """The persistent XLA cache directory TF_XLA_FLAGS names now, if any."""
    for flag in os.environ.get("TF_XLA_FLAGS", "").split():
        if flag.startswith(FLAG + "="):
            return Path(flag.partition("=")[2])
    return None


def enable(directory: str | Path) -> Path:
    """Point TensorFlow's persistent XLA cache at `directory`, keeping the other TF_XLA_FLAGS;
    call it before XLA compiles anything. TensorFlow creates the directory when it first writes
    a program (so a run refused before training writes nothing into its save dir)."""
    directory = Path(directory).resolve()
    kept = [flag for flag in os.environ.get("TF_XLA_FLAGS", "").split()
            if not flag.startswith(FLAG + "=")]
    os.environ["TF_XLA_FLAGS"] = " ".join(kept + [f"{FLAG}={directory}"])
    return directory
