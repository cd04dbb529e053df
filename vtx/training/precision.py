"""The training precision chosen by the hardware (`--precision auto`, the command line's default).

Each worker chooses by `vtx.precision.choose_precision` (its rules and their figures are said
there), timing bfloat16 at the model's feed-forward shape where its CPU's flags do not settle it;
several workers then train in bfloat16 only where all of them chose it.
"""

from __future__ import annotations

import functools
from typing import Callable

# Looked up here at each call, so that a test can replace one of them in this module.
from vtx.precision import (AUTO, BF16_CPU_FLAGS, ISAS_WITHOUT_BF16,  # noqa: F401
                           MIN_MEASURED_SPEEDUP, TIMED_ROWS, choose_precision, cpu_flags,
                           gpu_compute_capabilities, matmul_speedup, max_cpu_isa)


def resolve_precision(requested: str, feed_forward: tuple[int, int] | None = None,
                      resumed: tuple[str, str] | None = None,
                      gather: Callable[[float], list[float]] | None = None,
                      jit_compile: bool = True) -> tuple[str, str]:
    """`choose_precision` for this machine's GPUs (or, with none, its CPU).

    Args:
        feed_forward: (d_model, d_ff) of the model, whose product `auto` times where the CPU's
            flags do not settle it (None: not timed, bfloat16 there).
        resumed: see `choose_precision`.
        gather: with several workers, a collective that takes one number from each worker and
            returns every worker's, in worker order (each worker calls it once): the workers,
            whose CPUs or GPUs may differ and whose timings do, then train in bfloat16 only
            where every one of them chose it (`agree`).
        jit_compile: see `choose_precision`.
    """
    if requested != AUTO:
        return requested, "as requested"
    measure = (functools.partial(matmul_speedup, TIMED_ROWS, *feed_forward)
               if feed_forward else None)
    precision, reason = choose_precision(requested, gpu_compute_capabilities(), cpu_flags(),
                                         max_cpu_isa(), measure, resumed, jit_compile)
    return agree(precision, reason, gather) if gather else (precision, reason)


def agree(precision: str, reason: str,
          gather: Callable[[float], list[float]]) -> tuple[str, str]:
    """One precision for all workers from each one's `auto` choice (float32 or mixed_bfloat16):
    bfloat16 only where every worker chose it, float32 otherwise. Replicas then compute alike, as
    the checkpoint records the run, and bfloat16 never runs on a worker that timed it slower (a
    synchronous update waits for its slowest worker). `gather` as in `resolve_precision`."""
    votes = gather(1.0 if precision == "mixed_bfloat16" else 0.0)
    workers, chose = len(votes), sum(1 for vote in votes if vote > 0.5)
    if chose in (0, workers):
        return precision, f"{reason}; all {workers} workers chose {precision}"
    others = (f"{chose} of {workers} workers chose bfloat16 and {workers - chose} float32, "
              f"and workers train alike")
    if precision == "mixed_bfloat16":
        return "float32", f"{reason}, but {others}"
    return "float32", f"{reason}; {others}"
