"""The precision a model computes in, chosen by the hardware: training's (`--precision auto` of
`vtx train`, `vtx.training.precision`) and decoding's (`--precision auto|float32|bfloat16` and
`--quantize none|int8` of translate, score, parse, serve and export).

bfloat16 pays only where the hardware computes it faster than float32. A CPU without avx512_bf16
emulates it and runs slower in it; one with AMX runs faster; one with avx512_bf16 but no AMX
differs from chip to chip (oneDNN's bfloat16 products beat float32's on some and lose on others),
so there one matrix product of the model's feed-forward shape is timed in each precision
(`matmul_speedup`, a fraction of a second) and bfloat16 taken only where it ran clearly faster.
GPUs have bfloat16 tensor cores from compute capability 8.0, which pay with XLA only: without
it each cast and element-wise operation is a kernel of its own. The figures behind each rule, in
docs/benchmarks.md: `benchmarks/train_throughput.py` (both precisions on each CPU kind),
`benchmarks/matmul_precision.py` (the timed product), `benchmarks/gpu_train.py` (GPUs) and
`benchmarks/translate_speed.py` (decoding in each precision and in int8).

This module imports nothing of vtx's, so that training and inference both build on it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Callable

AUTO = "auto"
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 flags of /proc/cpuinfo
BF16_GPU_CAPABILITY = (8, 0)
# Without XLA a GPU's bfloat16 casts and element-wise operations, unfused, cost more than its
# matrix products save (`benchmarks/gpu_train.py --no-jit`, docs/benchmarks.md).
GPU_WITHOUT_XLA = "bfloat16's unfused casts cost more than its matrix products save"
# bfloat16 is taken on a CPU with avx512_bf16 but no AMX only when its matrix product ran at least
# this much faster than float32's: a margin for the timing's noise, well under the speed-up of the
# chips where bfloat16 trains faster and well over the ratio of those where it trains slower
# (`benchmarks/matmul_precision.py` next to `benchmarks/train_throughput.py`, docs/benchmarks.md).
MIN_MEASURED_SPEEDUP = 1.1
# Rows of that timing's matrix product (the quick start's tokens a batch).
TIMED_ROWS = 2048
# oneDNN's instruction sets below its first with bfloat16 dot products (AVX512_CORE_BF16): a
# user's ONEDNN_MAX_CPU_ISA among these keeps TensorFlow's matrix products off avx512_bf16 and
# AMX, where bfloat16 is emulated and trains slower than float32 (`benchmarks/train_throughput.py`
# under such a cap, docs/benchmarks.md).
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


def matmul_speedup(rows: int, inner: int, outer: int,
                   repeats: int = 5) -> tuple[float, float, float]:
    """How much faster this machine's CPU multiplies (rows x inner) by (inner x outer) in bfloat16
    than in float32: (float32 seconds / bfloat16 seconds, float32 seconds, bfloat16 seconds), each
    the fastest of `repeats` runs after one untimed, the two precisions taking turns."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        operands = {}
        for dtype in (tf.float32, tf.bfloat16):
            a = tf.random.stateless_uniform((rows, inner), seed=(1, 2), minval=-1.0)
            b = tf.random.stateless_uniform((inner, outer), seed=(3, 4), minval=-1.0)
            operands[dtype] = (tf.cast(a, dtype), tf.cast(b, dtype))
        fastest = {dtype: float("inf") for dtype in operands}
        for run in range(repeats + 1):
            for dtype, (a, b) in operands.items():
                start = time.perf_counter()
                tf.matmul(a, b)[0, 0].numpy()
                if run:
                    fastest[dtype] = min(fastest[dtype], time.perf_counter() - start)
    f32, bf16 = fastest[tf.float32], fastest[tf.bfloat16]
    return f32 / bf16, f32, bf16


def choose_precision(requested: str, gpu_capabilities: list[tuple[int, int]],
                     flags: set[str], isa_cap: tuple[str, str] | None = None,
                     measure: Callable[[], tuple[float, float, float]] | None = None,
                     resumed: tuple[str, str] | None = None,
                     jit_compile: bool = True) -> tuple[str, str]:
    """The precision to train in, and why.

    Args:
        requested: "auto", or a precision name, which is kept as it is.
        gpu_capabilities: of the GPUs training runs on (none: the CPU).
        flags: the CPU's feature flags (`cpu_flags()`).
        isa_cap: oneDNN's instruction-set cap (`max_cpu_isa()`): one of ISAS_WITHOUT_BF16
            takes bfloat16 off a CPU that has it.
        measure: on a CPU with avx512_bf16 and no AMX, times bfloat16 against float32
            (`matmul_speedup` at the model's shape); None takes bfloat16 there unmeasured.
        resumed: (precision, checkpoint) of the run being resumed: where `auto` would time
            bfloat16, the run keeps that precision instead, so that it resumes exactly (a timing
            near the threshold could otherwise switch it).
        jit_compile: whether the update is XLA-compiled: on a GPU bfloat16 pays only with XLA
            (without, its casts run as kernels of their own).

    Returns:
        (a Keras dtype policy name, the reason in a few words).
    """
    if requested != AUTO:
        return requested, "as requested"
    if gpu_capabilities:
        lowest = min(gpu_capabilities)
        if lowest >= BF16_GPU_CAPABILITY and not jit_compile:
            return "float32", (f"GPU compute capability {lowest[0]}.{lowest[1]} has bfloat16, "
                               f"but without XLA (--no-jit) {GPU_WITHOUT_XLA}; --jit for "
                               f"bfloat16")
        if lowest >= BF16_GPU_CAPABILITY:
            return "mixed_bfloat16", f"GPU compute capability {lowest[0]}.{lowest[1]} has bfloat16"
        return "float32", f"GPU compute capability {lowest[0]}.{lowest[1]} has no bfloat16 units"
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if native and isa_cap and isa_cap[1] in ISAS_WITHOUT_BF16:
        return "float32", (f"the CPU has {native[0]}, but {isa_cap[0]}={isa_cap[1]} keeps "
                           f"oneDNN off it")
    if "amx_bf16" in flags:
        return "mixed_bfloat16", "the CPU has amx_bf16"
    if native and resumed and resumed[0] in ("float32", "mixed_bfloat16"):
        return resumed[0], (f"the CPU has {native[0]} but no AMX; kept from {resumed[1]}, which "
                            f"this run resumes: bfloat16 is timed against float32 on a new run")
    if native and measure is None:
        return "mixed_bfloat16", f"the CPU has {native[0]} (not timed against float32)"
    if native:
        speedup, f32, bf16 = measure()
        timed = (f"a bfloat16 matrix product ran {speedup:.2f}x float32's here ({bf16 * 1e3:.1f} "
                 f"ms against {f32 * 1e3:.1f} ms)")
        if speedup >= MIN_MEASURED_SPEEDUP:
            return "mixed_bfloat16", f"the CPU has {native[0]} and {timed}"
        return "float32", (f"the CPU has {native[0]} but no AMX, and {timed}; "
                           f"--precision mixed_bfloat16 takes bfloat16 anyway")
    return "float32", f"the CPU has neither {' nor '.join(BF16_CPU_FLAGS)}"


# Decoding's --precision: a name a user types -> the Keras dtype policy the model is built in.
# Under mixed_bfloat16 the weights stay float32 and the layers compute in bfloat16; the search's
# log-probabilities, scores and length penalty are float32 whatever the policy
# (`vtx.inference.beam_search`).
DECODING_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
DECODING_PRECISIONS = (AUTO, *DECODING_POLICIES)
# Decoding's --quantize: none, or int8 weights in the layers where Keras's int8 path applies
# (`vtx.inference.loading.quantized`).
QUANTIZATIONS = ("none", "int8")
# The product `auto` times on a CPU with avx512_bf16 and no AMX, decoding having no one model
# shape: the quick start's feed-forward (d_model 512, d_ff 2048).
DECODING_TIMED_SHAPE = (512, 2048)


@dataclasses.dataclass(frozen=True)
class DecodingPrecision:
    """What a decoding command builds its models in, and why (the command's log line)."""

    policy: str = "float32"  # a Keras dtype policy: float32 or mixed_bfloat16
    quantize: str = "none"  # none or int8 (`QUANTIZATIONS`)
    reason: str = "the default"  # why `policy`, in a few words

    def __post_init__(self):
        if self.policy not in DECODING_POLICIES.values():
            raise ValueError(f"precision must be one of {', '.join(DECODING_POLICIES)}, got "
                             f"{self.policy!r}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError(f"quantize must be one of {', '.join(QUANTIZATIONS)}, got "
                             f"{self.quantize!r}")

    @property
    def name(self) -> str:
        """The --precision name of `policy` (float32 or bfloat16)."""
        return next(name for name, policy in DECODING_POLICIES.items() if policy == self.policy)

    def log_line(self) -> str:
        """The decoding command's first log line, e.g. `precision: float32 (auto: ...);
        quantize: none`."""
        return f"precision: {self.name} ({self.reason}); quantize: {self.quantize}"


def choose_decoding_precision(requested: str, quantize: str,
                              gpu_capabilities: list[tuple[int, int]], flags: set[str],
                              isa_cap: tuple[str, str] | None = None,
                              measure: Callable[[], tuple[float, float, float]] | None = None,
                              jit_compile: bool = True) -> DecodingPrecision:
    """Decoding's precision: `auto` chooses as training does (`choose_precision`); bfloat16
    asked for on a machine that has no bfloat16 units still decodes, slower, and says so.

    Args:
        requested: auto, float32 or bfloat16 (`DECODING_PRECISIONS`).
        quantize: none or int8.
        gpu_capabilities, flags, isa_cap, measure, jit_compile: as `choose_precision`'s.

    Raises:
        ValueError: an unknown `requested` or `quantize`, named.
    """
    if requested not in DECODING_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(DECODING_PRECISIONS)}, got "
                         f"{requested!r}")
    if requested != AUTO:
        reason = f"--precision {requested}"
        if requested == "bfloat16" and not gpu_capabilities and \
                not any(flag in flags for flag in BF16_CPU_FLAGS):
            reason += (f"; the CPU has neither {' nor '.join(BF16_CPU_FLAGS)}, so bfloat16 is "
                       f"emulated, slower than float32")
        return DecodingPrecision(DECODING_POLICIES[requested], quantize, reason)
    policy, why = choose_precision(AUTO, gpu_capabilities, flags, isa_cap, measure,
                                   jit_compile=jit_compile)
    why = why.replace("--precision mixed_bfloat16", "--precision bfloat16")
    return DecodingPrecision(policy, quantize, f"auto: {why}")


def resolve_decoding_precision(requested: str, quantize: str = "none",
                               jit_compile: bool = False) -> DecodingPrecision:
    """`choose_decoding_precision` for this machine's GPUs (or, with none, its CPU); where its
    CPU's flags do not settle bfloat16, a product of `DECODING_TIMED_SHAPE` is timed."""
    measure = functools.partial(matmul_speedup, TIMED_ROWS, *DECODING_TIMED_SHAPE)
    asked_float32 = requested == "float32"
    gpus = [] if asked_float32 else gpu_compute_capabilities()
    flags = set() if asked_float32 else cpu_flags()
    return choose_decoding_precision(requested, quantize, gpus, flags, max_cpu_isa(), measure,
                                     jit_compile)
