"""Packed against bucketed training batches on real data (issue 12): target tokens/s of the update.

    .venv/bin/python benchmarks/packing.py DATA_DIR [--max-tokens 2048] [--precision float32]
        [--rounds 3] [--steps 40] [--warmup 5] [--jit]

The quick start's model (base with 3 layers, d_model 256, d_ff 1024, 4 heads, dropout 0.1, the
data's vocabulary) on one device, `Trainer.train_update` as `vtx train` runs it, on the batches
`vtx train` makes of DATA_DIR's training split: length buckets (`--max-shapes` 0) or packed
rows (`--pack`: the packing `packing.choose_shapes` picks, one or two shapes). The two alternate in rounds of `--steps` updates, each after `--warmup`
untimed ones (tracing, or with `--jit` compiling each shape), in one process, so both see the same
machine. Prints each round's real target tokens per second (pad positions not counted: what
training gains), the packed/bucketed ratio, and each batching's share of real positions.
Timings: run with nothing else on the machine and name the CPU (`lscpu`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vtx  # noqa: E402, F401  (before TensorFlow: it sets TensorFlow's environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dir")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--jit", action="store_true")
    args = parser.parse_args()

    import tensorflow as tf

    from vtx import config
    from vtx.data import packing, pipeline
    from vtx.training.stream import BatchStream
    from vtx.training.compiling import format_shape
    from vtx.training.trainer import Trainer

    data = args.data_dir
    model_config = config.preset("base", vocab_size=pipeline.vocab_size(data), num_layers=3,
                                 d_model=256, d_ff=1024, num_heads=4, dropout=0.1)
    train_config = config.TrainConfig(max_tokens=args.max_tokens, precision=args.precision,
                                      jit_compile=args.jit, validate_interval_steps=0)
    splits = ("train", "valid") if "valid" in pipeline.load_meta(data)["splits"] else ("train",)
    policy = pipeline.shape_policy(args.jit)
    boundaries = pipeline.bucket_boundaries_for(data, splits, **policy,
                                                max_tokens=args.max_tokens)
    sides = pipeline.side_lengths_for(data, splits, boundaries, policy["step"])
    packed, cost = packing.choose_shapes(
        data, args.max_tokens, policy["step"], model_config,
        pipeline.epoch_batch_counts(data, "train", args.max_tokens, boundaries, sides),
        all_positions_projected=args.jit, seed=1)
    shapes = {"bucketed": pipeline.batch_shapes(args.max_tokens, boundaries, sides),
              "packed": packed}
    print(f"{data}, --max-tokens {args.max_tokens}, {args.precision}, "
          f"{'XLA' if args.jit else 'no XLA'}")
    print(f"bucketed: {len(shapes['bucketed'])} shapes "
          f"({', '.join(format_shape(s) for s in shapes['bucketed'])}), "
          f"{pipeline.position_fill(data, 'train', args.max_tokens, boundaries, sides):.3f} "
          f"of the positions real")
    print(f"packed: {', '.join(format_shape(shape) for shape in packed)}, "
          f"{packing.packed_fill(data, packed, seed=1):.3f} of the positions real, "
          f"{cost:.3f} of the buckets' FLOPs (estimated)")

    def bucketed_epoch(epoch, skip):
        return pipeline.train_batches(data, max_tokens=args.max_tokens, seed=1, epoch=epoch,
                                      skip_batches=skip, bucket_boundaries=boundaries,
                                      side_lengths=sides).as_numpy_iterator()

    def packed_epoch(epoch, skip):
        return packing.packed_batches(data, packed, seed=1, epoch=epoch, skip_batches=skip)

    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = Trainer(model_config, train_config, save_dir,
                          strategy=tf.distribute.MirroredStrategy(["/cpu:0"]),
                          log=lambda _: None)
        streams = {"bucketed": BatchStream(bucketed_epoch), "packed": BatchStream(packed_epoch)}
        rates = {name: [] for name in streams}
        for round_ in range(args.rounds):
            for name, stream in streams.items():
                trainer.packed_shapes = packed if name == "packed" else None
                if args.jit and round_ == 0:
                    trainer.compile_shapes(shapes[name])
                for _ in range(args.warmup):
                    trainer.train_update(stream)
                started = time.perf_counter()
                launched = [trainer.start_update(stream) for _ in range(args.steps)]
                tokens = sum(trainer.read_update(totals)[2] for totals in launched)
                seconds = time.perf_counter() - started
                rates[name].append(tokens / seconds)
                print(f"round {round_ + 1} {name}: {tokens / seconds:,.0f} target tok/s "
                      f"({tokens / args.steps:,.0f} real target tokens an update, "
                      f"{1000 * seconds / args.steps:.0f} ms an update)", flush=True)
        for stream in streams.values():
            stream.close()
    ratios = [p / b for p, b in zip(rates["packed"], rates["bucketed"])]
    print("packed / bucketed by round: " + ", ".join(f"{r:.3f}" for r in ratios))


if __name__ == "__main__":
    main()
