"""How fast the host makes training batches (issue 12): what a GPU's updates wait on between them.

    .venv/bin/python benchmarks/host_batches.py DATA_DIR [--max-tokens 8192] [--jit]
        [--rounds 3] [--batches 300]

`vtx train` makes its batches on a thread of its own (`--prefetch`, default 2; on the training
thread before 9572b3a), while the device runs the updates; batches made slower than the
device's updates make the device wait. This times, on one epoch's first `--batches` training
batches of DATA_DIR (`--rounds` rounds, alternated, in one process), the batches `vtx train`
makes:
  - buckets: `pipeline.train_batches(...).as_numpy_iterator()` (tf.data, prefetched on its own
    threads, so this measures what the reading thread waits for);
  - packed: `packing.packed_batches` (packed into rows and built on the reading thread, with
    array operations over each batch's tokens and one `os.pread` per run of close pairs; before
    1c103c7 they were built pair by pair, docs/benchmarks.md has both).
Each line gives batches/s and the real target tokens/s the host can feed, to set against the
device's update rate (an H100 trained base at 8192 tokens at 250,233 tok/s, docs/benchmarks.md).
Choose shapes as `vtx train` does (`--jit`: multiples of 8, the packing for XLA).
Timings: run with nothing else on the machine and name the CPU (`lscpu`).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vtx  # noqa: E402, F401  (before TensorFlow: it sets TensorFlow's environment)

QUICKSTART = dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dir")
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()

    from vtx import config
    from vtx.config import PAD_ID
    from vtx.data import packing, pipeline

    data = args.data_dir
    splits = ("train", "valid") if "valid" in pipeline.load_meta(data)["splits"] else ("train",)
    policy = pipeline.shape_policy(args.jit)
    boundaries = pipeline.bucket_boundaries_for(data, splits, **policy,
                                                max_tokens=args.max_tokens)
    sides = pipeline.side_lengths_for(data, splits, boundaries, policy["step"])
    model = config.preset("base", vocab_size=pipeline.vocab_size(data), **QUICKSTART)
    started = time.perf_counter()
    shapes, _ = packing.choose_shapes(
        data, args.max_tokens, policy["step"], model,
        pipeline.epoch_batch_counts(data, "train", args.max_tokens, boundaries, sides),
        all_positions_projected=args.jit, seed=1)
    chosen = time.perf_counter() - started
    print(f"{data}: --max-tokens {args.max_tokens}{' --jit' if args.jit else ''}; packed "
          f"{' + '.join('x'.join(map(str, shape)) for shape in shapes)} (chosen in "
          f"{chosen:.2f} s); {args.batches} batches a round")

    def buckets():
        return pipeline.train_batches(data, max_tokens=args.max_tokens, seed=1, epoch=0,
                                      bucket_boundaries=boundaries,
                                      side_lengths=sides).as_numpy_iterator()

    def packed():
        return packing.packed_batches(data, shapes, seed=1, epoch=0)

    for round_ in range(1, args.rounds + 1):
        for name, make in (("buckets", buckets), ("packed", packed)):
            batches = make()
            next(batches)  # an epoch's start (tf.data's threads, the first rows) is not timed
            started = time.perf_counter()
            tokens = 0
            made = 0
            for batch in itertools.islice(batches, args.batches):
                tokens += int((batch["target_out"] != PAD_ID).sum())
                made += 1
            seconds = time.perf_counter() - started
            print(f"round {round_} {name:>7}: {made / seconds:8.1f} batches/s, "
                  f"{tokens / seconds:12,.0f} real target tokens/s, "
                  f"{1000 * seconds / made:6.2f} ms a batch", flush=True)


if __name__ == "__main__":
    main()
