"""The training precision chosen by the hardware (`--precision auto`, the command line's default).

bfloat16 pays only where the hardware computes it natively: measured with TF 2.21 on 2-core CPUs,
mixed_bfloat16 trains 2.4-2.8x slower than float32 on an Intel Cascade Lake (no avx512_bf16) and
faster on an AMD EPYC with avx512_bf16; GPUs have bfloat16 tensor cores from compute capability
8.0 (A100, H100). Elsewhere float32 is the faster choice.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTO = "auto"
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 flags of /proc/cpuinfo
BF16_GPU_CAPABILITY = (8, 0)
# oneDNN's instruction sets below its first with bfloat16 dot products (AVX512_CORE_BF16): a
# user's ONEDNN_MAX_CPU_ISA among these keeps TensorFlow's matrix products off avx512_bf16 and
# AMX, where bfloat16 measured 2.0x slower than float32 (AMD EPYC, docs/benchmarks.md).
ISAS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                     "AVX512_CORE_VNNI")


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The feature flags of the first processor listed in `cpuinfo` (empty when unreadable)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def gpu_compute_capabilities() -> list[tuple[int, int]]:
    """(major, minor) of every GPU TensorFlow sees."""
    import tensorflow as tf

    found = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        found.append(tuple(capability) if capability else (0, 0))
    return found


def max_cpu_isa() -> tuple[str, str] | None:
    """(variable, value) of the oneDNN instruction-set cap set in the environment, if any
    (ONEDNN_MAX_CPU_ISA, or its older name DNNL_MAX_CPU_ISA)."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        if os.environ.get(name):
            return name, os.environ[name].strip().upper()
    return None


def choose_precision(requested: str, gpu_capabilities: list[tuple[int, int]],
                     flags: set[str], isa_cap: tuple[str, str] | None = None) -> tuple[str, str]:
    """The precision to train in, and why.

    Args:
        requested: "auto", or a precision name, which is kept as it is.
        gpu_capabilities: of the GPUs training runs on (none: the CPU).
        flags: the CPU's feature flags (`cpu_flags()`).
        isa_cap: oneDNN's instruction-set cap (`max_cpu_isa()`): one of ISAS_WITHOUT_BF16
            takes bfloat16 off a CPU that has it.

    Returns:
        (a Keras dtype policy name, the reason in a few words).
    """
    if requested != AUTO:
        return requested, "as requested"
    if gpu_capabilities:
        lowest = min(gpu_capabilities)
        if lowest >= BF16_GPU_CAPABILITY:
            return "mixed_bfloat16", f"GPU compute capability {lowest[0]}.{lowest[1]} has bfloat16"
        return "float32", f"GPU compute capability {lowest[0]}.{lowest[1]} has no bfloat16 units"
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if native and isa_cap and isa_cap[1] in ISAS_WITHOUT_BF16:
        return "float32", (f"the CPU has {native[0]}, but {isa_cap[0]}={isa_cap[1]} keeps "
                           f"oneDNN off it")
    if native:
        return "mixed_bfloat16", f"the CPU has {native[0]}"
    return "float32", f"the CPU has neither {' nor '.join(BF16_CPU_FLAGS)}"


def resolve_precision(requested: str) -> tuple[str, str]:
    """`choose_precision` for this machine's GPUs (or, with none, its CPU)."""
    if requested != AUTO:
        return requested, "as requested"
    return choose_precision(requested, gpu_compute_capabilities(), cpu_flags(), max_cpu_isa())
