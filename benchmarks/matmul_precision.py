"""bfloat16 against float32 matrix products on this CPU: what `--precision auto` times.

    .venv/bin/python benchmarks/matmul_precision.py [--rows 2048] [--repeats 20]

`vtx train --precision auto` on a CPU with avx512_bf16 but no AMX times one matrix product of
the model's feed-forward shape in both precisions (`vtx.training.precision.matmul_speedup`) and
takes bfloat16 only where it ran at least MIN_MEASURED_SPEEDUP times float32's. This prints that
timing for the feed-forward and output-projection shapes of the quick start, base and big, each
the fastest of `--repeats` products, and what `auto` decides from the first (the quick start's);
then the same as one `RESULT ` JSON line. Whether bfloat16 then trains faster is `benchmarks/train_throughput.py`'s to measure.
Timings: run with nothing else on the machine and name the CPU (`lscpu`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vtx  # noqa: E402, F401  (before TensorFlow: it sets TensorFlow's environment)

# (name, inner, outer): d_model x d_ff (feed-forward in), d_ff x d_model (out), d_model x vocab.
SHAPES = [("quickstart ffn in", 256, 1024), ("quickstart ffn out", 1024, 256),
          ("quickstart vocab 8000", 256, 8000), ("base ffn in", 512, 2048),
          ("base vocab 37000", 512, 37000), ("big ffn in", 1024, 4096)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2048, help="tokens (rows) of each product")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    from vtx.training.precision import (MIN_MEASURED_SPEEDUP, choose_precision, cpu_flags,
                                         matmul_speedup, max_cpu_isa)

    flags = cpu_flags()
    native = sorted(flag for flag in flags if "bf16" in flag or flag.startswith("amx"))
    print(f"CPU flags for bfloat16: {' '.join(native) or 'none'}")
    print(f"{'shape':24} {'rows x inner x outer':>22} {'float32 ms':>11} {'bf16 ms':>9} "
          f"{'bf16/f32 speed':>15} {'f32 GFLOP/s':>12}")
    first, shapes = None, []
    for name, inner, outer in SHAPES:
        speedup, f32, bf16 = matmul_speedup(args.rows, inner, outer, repeats=args.repeats)
        first = first or (speedup, f32, bf16)
        gflops = 2 * args.rows * inner * outer / f32 / 1e9
        print(f"{name:24} {f'{args.rows} x {inner} x {outer}':>22} {f32 * 1e3:11.2f} "
              f"{bf16 * 1e3:9.2f} {speedup:14.2f}x {gflops:12.0f}")
        shapes.append({"shape": name, "rows": args.rows, "inner": inner, "outer": outer,
                       "float32_s": f32, "bfloat16_s": bf16, "speedup": speedup})
    precision, reason = choose_precision("auto", [], flags, max_cpu_isa(), lambda: first)
    print(f"auto on this CPU (threshold {MIN_MEASURED_SPEEDUP}x, the quick start's timing above): "
          f"{precision} ({reason})")
    print("RESULT " + json.dumps({"cpu_flags": native, "shapes": shapes,
                                  "auto": {"precision": precision, "reason": reason}}))


if __name__ == "__main__":
    main()
