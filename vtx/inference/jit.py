"""Whether `vtx translate`, `vtx parse` and `vtx score` XLA-compile their computation: `--jit` or
`--no-jit` as given, else (`auto`) on where TensorFlow sees a GPU and off on a CPU.

On a CPU a search under XLA is slower than without: its fixed shapes run every sentence of a
batch to the batch's last step (`benchmarks/translate_speed.py` with and without `--jit`,
docs/benchmarks.md). On a GPU XLA fuses each step's many small operations, which otherwise
run as a kernel each and leave the GPU waiting for the host (docs/decoding.md gives the figures).
The lexically constrained search runs its steps from the host, so `auto` leaves it uncompiled.

The GPUs are TensorFlow's own list, not `nvidia-smi`'s: the computation runs where TensorFlow
places it (a CPU-only build, or CUDA_VISIBLE_DEVICES="", sees none).

On a GPU the compiled programs are kept on disk (TensorFlow's persistent XLA cache, as `vtx
train` keeps its own: `vtx.compile_cache`), so that the next command on the same model
and shapes loads them instead of compiling again: in `$VTX_XLA_CACHE`, else
`$XDG_CACHE_HOME/vtx/xla` (`~/.cache/vtx/xla`), a folder for each GPU model and TensorFlow
version; a cache TF_XLA_FLAGS already names is kept.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

from vtx import compile_cache


@dataclasses.dataclass(frozen=True)
class JitChoice:
    """XLA or not, and why."""

    compile: bool  # XLA-compile (`DecodeOptions.jit_compile`)
    reason: str  # "--jit", "--no-jit", or "auto: " and what decided

    def log_line(self, subject: str) -> str:
        """The command's first log line, e.g. `search: XLA off (auto: no GPU; ...)`."""
        return f"{subject}: XLA {'on' if self.compile else 'off'} ({self.reason})"


def choose_jit(requested: bool | None, gpus: Sequence[str],
               host_steps: bool = False) -> JitChoice:
    """`--jit`'s choice.

    Args:
        requested: True (`--jit`), False (`--no-jit`), or None (`auto`).
        gpus: the names of the GPUs TensorFlow sees (`visible_gpus()`); the first is used.
        host_steps: the search runs its steps from the host (`--constraints`), so XLA has no
            loop to compile.

    Returns:
        The choice and its reason.
    """
    if requested is not None:
        return JitChoice(requested, "--jit" if requested else "--no-jit")
    if host_steps:
        return JitChoice(False, "auto: --constraints searches from the host")
    if gpus:
        return JitChoice(True, f"auto: a GPU, {gpus[0]}")
    return JitChoice(False, "auto: no GPU; XLA decodes slower on a CPU")


def visible_gpus() -> list[str]:
    """The names of the GPUs TensorFlow sees (their device names), in its order."""
    import tensorflow as tf

    return [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]


def xla_cache_directory(gpu: str, tensorflow_version: str,
                        environ: Mapping[str, str] = os.environ) -> Path:
    """The folder decoding keeps its XLA programs in on the GPU named `gpu`: one for each GPU
    model and TensorFlow version (a program compiled for one runs on no other), under
    `$VTX_XLA_CACHE`, else `$XDG_CACHE_HOME/vtx/xla`, else `~/.cache/vtx/xla`."""
    root = environ.get("VTX_XLA_CACHE") or Path(
        environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vtx" / "xla"
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", gpu).strip("_") or "gpu"
    return Path(root) / f"{name}-tf{tensorflow_version}"


def resolve_jit(requested: bool | None, host_steps: bool = False) -> JitChoice:
    """`choose_jit` for the GPUs TensorFlow sees here (`visible_gpus()`); with XLA on a GPU, the
    persistent XLA cache enabled (`xla_cache_directory`, unless TF_XLA_FLAGS names one) and said
    in the reason. Call it before anything is compiled."""
    gpus = visible_gpus()
    choice = choose_jit(requested, gpus, host_steps)
    if not (choice.compile and gpus):
        return choice
    directory = compile_cache.current_directory()
    if directory is None:
        import tensorflow as tf

        directory = compile_cache.enable(xla_cache_directory(gpus[0], tf.__version__))
    return dataclasses.replace(choice, reason=f"{choice.reason}; compiled programs kept in "
                                              f"{directory}")
