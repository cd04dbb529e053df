"""What tracing the update once for any shape costs per update (the price of exact resumes).

`Trainer` traces its update for batches of any shape before the first (`_trace_for_any_shape`),
so that a resumed run, meeting its shapes in another order, runs every batch through the same
program as the run it continues (TensorFlow alone gives the first shape a process meets an exact
program and later ones a general one; the two sum in other orders). This times an update of the
general program against one of an exact program (TensorFlow's trace of that one shape), side by
side in one process: two Trainers, warmed up, then timed runs in turn, the same all-pad batch of
`--shape` through the whole update with Adam off (as `Trainer.compile_shapes` runs it).

    python benchmarks/general_trace.py --arch base --shape 64x32 --device cpu          # no XLA
    python benchmarks/general_trace.py --arch base --shape 64x32 --device cpu --jit
    python benchmarks/general_trace.py --arch big --shape 256x64 --precision mixed_bfloat16 --jit

Figures, not a test: run it with nothing else on the machine, and name the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time

from compile_split import parse_shapes
from train_throughput import model_config_for


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="base")
    parser.add_argument("--shape", type=parse_shapes, default=parse_shapes("64x32"),
                        help="ROWSxLENGTH of the batch (source and target)")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--jit", action="store_true", help="XLA (as vtx train --jit)")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="P_drop (default 0: no random numbers, the program alone)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates of each first")
    parser.add_argument("--runs", type=int, default=12, help="timed updates of each")
    args = parser.parse_args(argv)
    if len(args.shape) != 1 or args.warmup < 1 or args.runs < 1:
        parser.error("one --shape; --warmup and --runs at least 1")

    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.training.trainer import Trainer

    rows, length = args.shape[0]
    model_config = dataclasses.replace(model_config_for(args.arch), dropout=args.dropout)
    train_config = TrainConfig(precision=args.precision, jit_compile=args.jit,
                               validate_interval_steps=0, save_interval_minutes=0)
    device = "/gpu:0" if args.device == "gpu" else "/cpu:0"
    print(f"{args.arch} (P_drop {args.dropout}), {args.precision}, "
          f"{'XLA' if args.jit else 'no XLA'} on {device}, batch {rows}x{length}", flush=True)
    off = tf.constant(False)  # Adam off: the all-pad pass of Trainer.compile_shapes
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        runs = {}
        for kind in ("general", "exact"):
            trainer = Trainer(model_config, train_config, save_dir,
                              strategy=tf.distribute.MirroredStrategy([device]),
                              log=lambda _: None)
            batches = trainer.all_pad_batches((rows, length, length))
            if kind == "general":
                trainer._trace_for_any_shape(batches)
            for _ in range(args.warmup):
                trainer._update(batches, off).numpy()
            runs[kind] = (trainer, batches, [])
        for _ in range(args.runs):
            for trainer, batches, seconds in runs.values():
                started = time.perf_counter()
                trainer._update(batches, off).numpy()
                seconds.append(time.perf_counter() - started)
    medians = {kind: statistics.median(seconds) for kind, (_, _, seconds) in runs.items()}
    for kind, (_, _, seconds) in runs.items():
        print(f"{kind} program: median {medians[kind]:.3f} s, min {min(seconds):.3f} s "
              f"({args.runs} updates)", flush=True)
    print(f"general / exact: {medians['general'] / medians['exact']:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
