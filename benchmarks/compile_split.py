"""Where the XLA compile of one batch shape's update goes (issue 12: all compilation <= 3 minutes).

`vtx train --jit` compiles the whole update (forward, backward, Adam) once per batch shape: ~90 s
a shape for base on an H100, measured as one figure. This splits it, per shape of `--shapes`
(ROWSxLENGTH, one process, in order, as `Trainer.compile_shapes` meets them one at a time):

* trace: TensorFlow tracing the update in Python (holds the GIL: shapes compiled side by side by
  `--compile-workers` wait for each other here). `Trainer` traces one general program (unknown
  dimensions) before the first shape and every shape reuses it (0 s each; the general trace's
  seconds are printed first). `--exact-first` traces as TensorFlow's `reduce_retracing` does
  alone, as `Trainer` did before 2026-11-27: the first shape an exact trace, the second a general
  one that every later shape reuses;
* first call: TF-to-HLO lowering, XLA's compile (its passes, code generation, on a GPU the
  autotuner and ptxas) and one run of the update;
* second call: one run of the update; first - second = what a shape costs before it trains;
* with `--hlo`, afterwards: the lowering alone (`experimental_get_compiler_ir`) and the size of
  the program XLA receives (HLO instructions), of which the dropout's random numbers are a share
  (`--dropout 0` to compare), and its conditionals.

`--skip branch` compiles the update as vtx did before 2026-11-27 (5851400): a non-finite update
skipped by a conditional instead of by selection. On XLA:CPU the selection made base's compile
~3x slower until its flag was computed once (2026-11-29; docs/benchmarks.md); on a GPU the
conditional costs a host wait an update instead.

    python benchmarks/compile_split.py --arch base --shapes 64x32,128x16,32x64 --hlo
    python benchmarks/compile_split.py --arch tiny --shapes 16x8 --device cpu --hlo   # anywhere
    python benchmarks/compile_split.py --arch base --shapes 64x32 --skip branch   # vs selection
    python benchmarks/compile_split.py --arch base --shapes 8x8,16x8 --device cpu --replicas 2

`--replicas N`: N replicas (MirroredStrategy) on the one `--device` split into N logical ones
(as `host_time.py`'s). Then the update is not one XLA program: each replica's gradients are one,
its Adam step another (compiled once for every shape, so at the first shape's first call), each
compiled for each device.

Figures, not a test: run it with nothing else on the machine, and name the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import time

from host_time import skip_by_branch, split_device
from train_throughput import model_config_for


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'64x32,128x16' -> [(64, 32), (128, 16)]; a clear error for anything else."""
    shapes = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)x(\d+)\s*", item)
        if not match or 0 in (int(match[1]), int(match[2])):
            raise argparse.ArgumentTypeError(f"--shapes: '{item}' is not ROWSxLENGTH (e.g. 64x32)")
        shapes.append((int(match[1]), int(match[2])))
    return shapes


def hlo_instructions(text: str) -> int:
    """The instructions of an HLO module's text (`%name = type opcode(...)` lines)."""
    return len(re.findall(r"^\s*(?:ROOT\s+)?%?[\w.-]+ = ", text, re.MULTILINE))


def hlo_conditionals(text: str) -> int:
    """The `conditional` instructions of an HLO module's text (XLA's branches)."""
    return len(re.findall(r" conditional\(", text))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="base")
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes("64x32,128x16,32x64"))
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--dropout", type=float, default=None,
                        help="override the preset's P_drop (0: no random numbers in the program)")
    parser.add_argument("--hlo", action="store_true",
                        help="also time the lowering alone and count the HLO instructions")
    parser.add_argument("--skip", choices=("selection", "branch"), default="selection",
                        help="how the update skips a non-finite step: by selection (vtx's way "
                             "under XLA) or by a conditional (its way before 2026-11-27)")
    parser.add_argument("--exact-first", action="store_true",
                        help="no general trace first: the first shape gets an exact trace (as "
                             "TensorFlow's reduce_retracing alone; vtx before 2026-11-27)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="replicas, on logical devices of the one --device")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="each logical GPU's memory with --device gpu --replicas N > 1")
    args = parser.parse_args(argv)
    for name in ("replicas", "memory_mb"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.hlo and args.replicas > 1:
        parser.error("--hlo needs --replicas 1: with several replicas the update is not one "
                     "XLA program")

    import numpy as np
    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.training.trainer import Trainer

    model_config = model_config_for(args.arch)
    if args.dropout is not None:
        model_config = dataclasses.replace(model_config, dropout=args.dropout)
    train_config = TrainConfig(precision=args.precision, jit_compile=True,
                               validate_interval_steps=0, save_interval_minutes=0)
    devices, sums = split_device("compile_split.py", args.device, args.replicas, args.memory_mb)
    print(f"{args.arch} (P_drop {model_config.dropout}), {args.precision}, XLA on "
          f"{', '.join(devices)}, a non-finite update skipped by {args.skip}", flush=True)
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = Trainer(model_config, train_config, save_dir, log=lambda _: None,
                          strategy=tf.distribute.MirroredStrategy(devices, sums))
        if args.skip == "branch":  # read as the update is traced (below)
            skip_by_branch(trainer)
        off = tf.constant(False)  # Adam off: the all-pad pass of Trainer.compile_shapes
        if not args.exact_first:
            started = time.perf_counter()
            trainer._trace_for_any_shape(trainer.all_pad_batches((8, 8, 8)))
            print(f"general trace (every shape runs through it): "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
        for rows, length in args.shapes:
            batches = trainer.all_pad_batches((rows, length, length))
            clock = [time.perf_counter()]
            trainer._update.get_concrete_function(batches, off)
            clock.append(time.perf_counter())
            for _ in range(2):
                trainer._update(batches, off).numpy()
                clock.append(time.perf_counter())
            trace, first, second = np.diff(clock)
            line = (f"{rows}x{length}: trace {trace:.1f} s, first call {first:.1f} s, second "
                    f"{second:.2f} s; before training {trace + first - second:.1f} s")
            if args.hlo:
                started = time.perf_counter()
                text = trainer._update.experimental_get_compiler_ir(batches, off)(stage="hlo")
                line += (f"; lowering alone {time.perf_counter() - started:.1f} s, "
                         f"{hlo_instructions(text):,} HLO instructions, "
                         f"{hlo_conditionals(text)} conditional(s)")
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
