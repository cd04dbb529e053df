"""Whether `vtx translate`, `vtx parse` and `vtx score` XLA-compile their computation: `--jit` or
`--no-jit` as given, else (`auto`) on where TensorFlow sees a GPU and off on a CPU.

On a CPU a search under XLA is slower than without: its fixed shapes run every sentence of a
batch to the batch's last step (`benchmarks/translate_speed.py` with and without `--jit`,
docs/benchmarks.md). On a GPU
XLA fuses each step's many small operations, which otherwise run as a kernel each; training
there runs several times faster with it (`benchmarks/gpu_train.py`), decoding is not measured.
The lexically constrained search runs its steps from the host, so `auto` leaves it uncompiled.

The GPUs are TensorFlow's own list, not `nvidia-smi`'s: the computation runs where TensorFlow
places it (a CPU-only build, or CUDA_VISIBLE_DEVICES="", sees none).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence


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
    """The names of the GPUs TensorFlow sees (e.g. "NVIDIA H200"), in its order."""
    import tensorflow as tf

    return [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]


def resolve_jit(requested: bool | None, host_steps: bool = False) -> JitChoice:
    """`choose_jit` for the GPUs TensorFlow sees here (`visible_gpus()`)."""
    return choose_jit(requested, visible_gpus(), host_steps)
