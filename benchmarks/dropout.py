"""Dropout's mask from 16 random bits an element (vtx's `Dropout`) against Keras's 32-bit one.

    .venv/bin/python benchmarks/dropout.py [--arch quickstart] [--tokens 2048] [--length 32]
        [--precision float32] [--jit] [--device cpu|gpu] [--rounds 6] [--updates 15]

Two `Trainer`s of the same model in one process, one whose `vtx.layers.dropout.Dropout` layers
run Keras's `Dropout.call` instead (the mask before this change), each warmed up by 3 updates,
then `--rounds` rounds of `--updates` timed updates each after one untimed (the tiny model's
first update after the other trainer's ran 20x slower), the two taking turns (the order flips every
round), on the same synthetic batches (`train_throughput.synthetic_batches`). Prints each round's
median wall and process CPU milliseconds an update and vtx's over Keras's; on a 2-core CPU the
CPU time is the steadier figure. Timings: run with nothing else on the machine and name the CPU
(`lscpu`) or GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vtx  # noqa: E402, F401  (before TensorFlow: it sets TensorFlow's environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="quickstart",
                        help="a preset or a train_throughput.py shape (quickstart)")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--jit", action="store_true", help="XLA, as on a GPU")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--updates", type=int, default=15)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf
    from train_throughput import model_config_for, synthetic_batches

    from vtx.config import TrainConfig
    from vtx.layers import dropout
    from vtx.training.stream import BatchStream
    from vtx.training.trainer import Trainer

    model_config = model_config_for(args.arch)
    batches = synthetic_batches(model_config.vocab_size, args.tokens, args.length)
    train_config = TrainConfig(max_tokens=args.tokens, precision=args.precision,
                               jit_compile=args.jit, validate_interval_steps=0)
    strategy = tf.distribute.MirroredStrategy([f"/{args.device}:0"])
    vtx_call = dropout.Dropout.call

    def keras_call(layer, inputs, training=False):
        return keras.layers.Dropout.call(layer, inputs, training=training)

    print(f"{args.arch}, P_drop {model_config.dropout}, {args.tokens // args.length} x "
          f"{args.length}, {args.precision}, {'XLA' if args.jit else 'no XLA'}, {args.device}")
    trainers = {}
    for name, call in (("keras", keras_call), ("vtx", vtx_call)):
        dropout.Dropout.call = call  # traced now: each trainer keeps the mask it was traced with
        trainer = Trainer(model_config, train_config, tempfile.mkdtemp(), strategy=strategy,
                          log=lambda line: None)
        stream = BatchStream(lambda epoch, skip: batches[skip % len(batches):])
        start = time.perf_counter()
        for _ in range(3):
            float(trainer.train_update(stream)[0])
        print(f"{name:6} first 3 updates (tracing{', compiling' if args.jit else ''}): "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        trainers[name] = (trainer, stream)
    dropout.Dropout.call = vtx_call

    medians = {name: [] for name in trainers}
    for round_ in range(args.rounds):
        order = list(trainers.items())
        for name, (trainer, stream) in order if round_ % 2 == 0 else order[::-1]:
            float(trainer.train_update(stream)[0])  # untimed: the first after the other's
            wall, cpu = [], []
            for _ in range(args.updates):
                wall_start, cpu_start = time.perf_counter(), time.process_time()
                float(trainer.train_update(stream)[0])
                wall.append(time.perf_counter() - wall_start)
                cpu.append(time.process_time() - cpu_start)
            medians[name].append((np.median(wall) * 1e3, np.median(cpu) * 1e3))
        (keras_wall, keras_cpu), (vtx_wall, vtx_cpu) = medians["keras"][-1], medians["vtx"][-1]
        print(f"round {round_ + 1}: keras {keras_wall:7.1f} ms wall {keras_cpu:7.1f} ms cpu | "
              f"vtx {vtx_wall:7.1f} ms wall {vtx_cpu:7.1f} ms cpu | vtx/keras wall "
              f"{vtx_wall / keras_wall:.3f} cpu {vtx_cpu / keras_cpu:.3f}", flush=True)
    ratios = [(v[0] / k[0], v[1] / k[1]) for k, v in zip(medians["keras"], medians["vtx"])]
    print(f"mean vtx/keras over {args.rounds} rounds: wall {np.mean([r[0] for r in ratios]):.3f}, "
          f"cpu {np.mean([r[1] for r in ratios]):.3f}")


if __name__ == "__main__":
    main()
