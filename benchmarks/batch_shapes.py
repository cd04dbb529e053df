"""What `vtx train --max-shapes N` costs in padding (issue 12); prints a table, trains nothing.

    .venv/bin/python benchmarks/batch_shapes.py DATA_DIR [DATA_DIR ...] [--max-tokens 8192]

For each preprocessed data directory and N = 1, 2, 3, 4, 6, 8, 12, 16: the padded lengths `vtx
train` would choose over train + valid with XLA (multiples of 8, `--jit`) and without (any
value), and the share of the training batches' positions, source and target, that hold a real
token (`pipeline.position_fill`: rows x each side's length per batch, a bucket's short last
batch filled with pad rows); "per pair" is the choice made before the batches' positions were
counted (`optimal_boundaries`: fewest pad tokens per pair, blind to the short last batches).
With XLA every shape is one compiled program: fewer shapes start training sooner and pad more;
without XLA one traced program runs every shape, so N changes only the padding. Last, the
same share for `--pack` (`vtx.data.packing`: several pairs a row, one or two shapes, chosen by
the FLOPs of the quick start's model with the data's vocabulary).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vtx import config  # noqa: E402
from vtx.data import packing, pipeline  # noqa: E402

COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)
# The model whose FLOPs choose the packing (`packing.choose_shapes`): the quick start's.
QUICKSTART = dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4)


def fill(data_dir: str, splits: tuple[str, ...], max_tokens: int | None, jit: bool,
         max_shapes: int, fill_tokens: int) -> tuple[list[int], float]:
    """The lengths chosen (max_tokens None: per pair) and the share of real tokens in the
    positions of the training batches of `fill_tokens`."""
    policy = pipeline.shape_policy(jit, max_shapes)
    lengths = pipeline.bucket_boundaries_for(data_dir, splits, **policy, max_tokens=max_tokens)
    sides = pipeline.side_lengths_for(data_dir, splits, lengths, policy["step"])
    return lengths, pipeline.position_fill(data_dir, "train", fill_tokens, lengths, sides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dirs", nargs="+")
    parser.add_argument("--max-tokens", type=int, default=8192)
    args = parser.parse_args()
    for data_dir in args.data_dirs:
        meta = pipeline.load_meta(data_dir)
        splits = ("train", "valid") if "valid" in meta.get("splits", {}) else ("train",)
        pairs = meta["splits"]["train"]["sentences"]
        print(f"\n{data_dir}: {pairs} training pairs, --max-tokens {args.max_tokens}")
        print("| max shapes | lengths with --jit | fill, --jit | per pair, --jit "
              "| fill, no XLA | per pair, no XLA |")
        print("|---|---|---|---|---|---|")
        for count in COUNTS:
            row = []
            for jit in (True, False):
                lengths, best = fill(data_dir, splits, args.max_tokens, jit, count,
                                     args.max_tokens)
                _, per_pair = fill(data_dir, splits, None, jit, count, args.max_tokens)
                row += [f"{best:.3f}", f"{per_pair:.3f}"]
                if jit:
                    row.insert(0, f"{' '.join(map(str, lengths))} ({len(lengths)})")
            print(f"| {count} | " + " | ".join(row) + " |")
        for jit in (True, False):  # `--pack`: one or two shapes, several pairs a row
            step = pipeline.shape_policy(jit)["step"]
            lengths, _ = fill(data_dir, splits, args.max_tokens, jit, 0, args.max_tokens)
            sides = pipeline.side_lengths_for(data_dir, splits, lengths, step)
            buckets = pipeline.epoch_batch_counts(data_dir, "train", args.max_tokens, lengths,
                                                  sides)
            model = config.preset("base", vocab_size=pipeline.vocab_size(data_dir), **QUICKSTART)
            shapes, cost = packing.choose_shapes(data_dir, args.max_tokens, step, model, buckets,
                                                 all_positions_projected=jit, seed=1)
            print(f"packed (--pack), {'--jit' if jit else 'no XLA'}: "
                  f"{' + '.join('x'.join(map(str, shape)) for shape in shapes)}, fill "
                  f"{packing.packed_fill(data_dir, shapes, seed=1):.3f}; the quick start "
                  f"model's FLOPs an epoch {cost:.3f} of the buckets' (default lengths)")


if __name__ == "__main__":
    main()
