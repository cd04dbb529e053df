"""An update's cost that does not scale with the arithmetic: base's layer layout and variable
count (253 trainable variables at 6 layers) at tiny widths, so that the update's time is the
per-call and per-variable work: TensorFlow's function call, the XLA program's many small
kernels (Adam is one fusion per weight and moment) and copies. On a GPU this is host time the
device waits for when it exceeds the device's own; on a CPU (XLA:CPU runs the program on the
calling thread) it is the whole update.

    python benchmarks/host_time.py --layers 6            # base's variables
    python benchmarks/host_time.py --layers 1            # 43 variables
    python benchmarks/host_time.py --layers 6 --profile /tmp/host_prof   # where the time goes
    python benchmarks/host_time.py --layers 6 --tf-function-too   # the call as before 2026-11-28
    python benchmarks/host_time.py --layers 6 --replicas 2 --skip branch   # as before 2026-11-29

`--replicas N`: the update on N replicas (MirroredStrategy) of one device split into N logical
ones (a GPU's into N of `--memory-mb` each, its sums by ReductionToOneDevice: NCCL needs distinct
GPUs). With several replicas the update is not one XLA program; `--skip branch` times it as
vtx ran there until 2026-11-29: a non-finite update skipped by a `tf.cond` around Adam
(TensorFlow's `If` reads its predicate on the host: on a GPU the host waits for the gradients
before it launches Adam), the gradients weighed and checked outside XLA, an operation a variable;
`--skip selection` (vtx's): by selection, each replica's gradients weighed into one buffer in
their XLA program, the buffers summed and checked once, each replica's Adam step one XLA program.

Prints the median milliseconds of an update (launched and read) over `--steps`, `--rounds` times;
with `--tf-function-too`, each round then times the same updates called through the
`tf.function` (which finds the traced program again at every call, as vtx did until 2026-11-28)
instead of the traced program itself, with the calling thread's CPU time of each; with
`--profile`, the events of 10 more updates by total time an update (every thread, nested events
overlap). Figures, not a test: run it with nothing else on the machine, name the machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers")
    parser.add_argument("--width", type=int, default=16, help="d_model and d_ff")
    parser.add_argument("--steps", type=int, default=100, help="updates timed a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="cpu")
    parser.add_argument("--profile", metavar="DIR", help="trace 10 more updates into DIR")
    parser.add_argument("--top", type=int, default=25, help="events listed with --profile")
    parser.add_argument("--tf-function-too", action="store_true",
                        help="each round, also the updates called through the tf.function")
    parser.add_argument("--replicas", type=int, default=1,
                        help="replicas, on logical devices of the one --device")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="each logical GPU's memory with --device gpu --replicas N > 1")
    parser.add_argument("--skip", choices=("selection", "branch"), default="selection",
                        help="how a non-finite update is skipped under XLA (see above)")
    args = parser.parse_args(argv)
    for name in ("layers", "width", "steps", "rounds", "top", "replicas", "memory_mb"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")

    import numpy as np
    import tensorflow as tf

    devices, sums = split_device("host_time.py", args.device, args.replicas, args.memory_mb)

    from vtx import config
    from vtx.training.stream import BatchStream, PrefetchedStream
    from vtx.training.trainer import Trainer

    model = config.preset("base", vocab_size=64, d_model=args.width, d_ff=args.width,
                          num_heads=2, num_layers=args.layers, dropout=0.0)
    train = config.TrainConfig(max_tokens=64, precision="float32", jit_compile=args.jit,
                               validate_interval_steps=0)
    batch = {key: np.random.default_rng(0).integers(3, 64, (8, 8)).astype(np.int32)
             for key in ("source", "target_in", "target_out")}
    with tempfile.TemporaryDirectory() as save_dir:
        trainer = Trainer(model, train, save_dir, log=lambda _: None,
                          strategy=tf.distribute.MirroredStrategy(devices, sums))
        if args.skip == "branch":  # read as the update is traced (the first update, below)
            skip_by_branch(trainer)
        stream = PrefetchedStream(BatchStream(lambda epoch, skip: [batch] * 10**6),
                                  trainer.place_batch, 2)
        try:
            for _ in range(5):
                trainer.read_update(trainer.start_update(stream))
            print(f"{len(trainer.model.trainable_variables)} trainable variables, "
                  f"{'XLA' if args.jit else 'no XLA'} on {', '.join(devices)}, a non-finite "
                  f"update skipped by {'selection' if trainer._select_skip else 'branch'}",
                  flush=True)
            program = trainer._update_program
            for _ in range(args.rounds):
                trainer._update_program = program
                wall, cpu = time_updates(trainer, stream, args.steps)
                print(f"update median {wall:.2f} ms", flush=True)
                if args.tf_function_too:
                    trainer._update_program = trainer._update
                    other_wall, other_cpu = time_updates(trainer, stream, args.steps)
                    print(f"  calling thread {cpu:.2f} ms; through the tf.function: update "
                          f"median {other_wall:.2f} ms, calling thread {other_cpu:.2f} ms "
                          f"({other_wall / wall:.2f}x, {other_cpu / cpu:.2f}x)", flush=True)
            trainer._update_program = program
            if args.profile:
                tf.profiler.experimental.start(args.profile)
                for _ in range(10):
                    trainer.read_update(trainer.start_update(stream))
                tf.profiler.experimental.stop()
                print(events_table(args.profile, 10, args.top))
        finally:
            stream.close()


def skip_by_branch(trainer) -> None:
    """Make `trainer`'s update, when traced, skip a non-finite step by a branch as vtx did under
    XLA before 2026-11-27 (one replica) and 2026-11-29 (several: each replica's gradients one XLA
    program, weighed, checked and applied outside XLA)."""
    import tensorflow as tf

    trainer._select_skip = False
    if trainer._weighted_program is not None:  # several replicas
        trainer._weighted_program = None
        trainer._gradient_fn = tf.function(trainer._replica_gradients, jit_compile=True,
                                           autograph=False)


def split_device(script: str, device: str, replicas: int, memory_mb: int):
    """(the devices of `replicas` replicas on the one `device` ("cpu" or "gpu"), the
    MirroredStrategy's cross-device sums for them): with `replicas` > 1 the device split into as
    many logical ones (a GPU's of `memory_mb` each, summed by ReductionToOneDevice: NCCL needs
    distinct GPUs). Call it before TensorFlow starts its devices."""
    import tensorflow as tf

    kind = device.upper()
    if replicas > 1:
        physical = tf.config.list_physical_devices(kind)
        if not physical:
            sys.exit(f"{script}: --device {device}: TensorFlow sees no {kind}")
        split = tf.config.LogicalDeviceConfiguration(
            memory_limit=memory_mb if kind == "GPU" else None)
        tf.config.set_logical_device_configuration(physical[0], [split] * replicas)
    sums = tf.distribute.ReductionToOneDevice() if kind == "GPU" and replicas > 1 else None
    return [f"/{device}:{i}" for i in range(replicas)], sums


def time_updates(trainer, stream, steps: int) -> tuple[float, float]:
    """Median milliseconds of `steps` updates, launched and read: wall, and the calling
    thread's CPU time."""
    wall, cpu = [], []
    for _ in range(steps):
        started, thread_started = time.perf_counter(), time.thread_time()
        trainer.read_update(trainer.start_update(stream))
        wall.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - thread_started)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def events_table(directory, updates: int, top: int) -> str:
    """Every plane's events by name (numbered suffixes dropped), ms and count an update."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import xplane_summary

    rows = xplane_summary.events_by_name(
        xplane_summary.load_space(directory), lambda plane: True, updates, top,
        rename=lambda name: re.sub(r"([._]\d+)+$", "", name))
    return xplane_summary.format_events("event (nested: times overlap)", rows, width=60)


if __name__ == "__main__":
    main()
