"""Eight replicas on one GPU: vtx's Trainer under MirroredStrategy on 8 logical GPUs cut from one
physical GPU, against 1 replica and against 1 replica x 8 micro-batches (`--update-freq 8`).

A process a run: in each the device (`--device`, GPU 0 or the CPU) is split into `--replicas`
logical devices before TensorFlow initialises it, each GPU one with `--memory-mib` of its memory
(default: nvidia-smi's total, less a tenth, shared out). Three runs of the real `Trainer`, each on
`--steps` + `--warmup` updates of the same synthetic batches (B x L target tokens a batch, L =
`--length`, no padding), read in the same order from the same initial weights (the first run's,
copied), XLA on (`--no-jit` for off), `--precision` (default mixed_bfloat16), dropout 0 (each
replica would draw its own masks):

* 8 replicas: one batch a replica an update, on the 8 logical devices;
* 1 replica: one batch an update, on the first logical device (the GPU's compute to itself);
* 1 replica x 8 micro-batches: the same 8 batches an update as the 8 replicas, accumulated;
* with `--floor` (the default in bfloat16 and float16): 1 replica x 8 micro-batches again, each
  update's batches in the reverse order: the same sums in another order, so its weights differ
  from the forward run's by round-off alone (the floor).

Each run compiles its batch shape first, then times `--steps` updates as `vtx train`'s loop runs
them (at most 2 in flight): target tokens per second. Then the weights of the 8 replicas and of 1
replica x 8 micro-batches, which trained on the same batches (engine.py: the same model), are
compared: the largest difference of a weight, against the sum of the learning rates of the
updates (no weight moves by more than about that: Adam's step is at most ~lr an element). They
agree within `TOLERANCE[precision]` of it, or, where the floor was run, within `FLOOR_FACTOR`
times the floor: round-off, amplified over the updates (bfloat16 rounds the matrix products'
inputs; a gradient near 0 becomes an Adam step of either sign), moves weights by as much in
either comparison, while a real difference in what is summed (a replica's share lost, doubled
or mis-weighed) moves every weight by a share of each step. Else the script exits 1. Adam's epsilon is 1e-5 instead of the paper's
1e-9: at 1e-9 a weight whose true gradient is 0 (an attention key bias, which the softmax
ignores) moves a whole learning-rate step on round-off, which differs with the order of the sums
of 8 replicas and 8 micro-batches (tests/training/driver.py does the same).

On the GPU machine (../shared/gpu/README.md), `benchmarks/gpu_session.sh`'s part replicas8:
    python benchmarks/gpu_replicas.py --archs base --vocab 8000 --tokens 8192
On a CPU, to check it (the weights must agree; the rates mean nothing there):
    python benchmarks/gpu_replicas.py --device cpu --archs tiny --tokens 64 --length 8 \
        --steps 3 --warmup 1 --precision float32
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from gpu_train import gpu_name, timed_updates
from train_throughput import RESULT_TAG, model_config_for, synthetic_batches

# The largest weight difference allowed between 8 replicas and 1 replica x 8 micro-batches, as a
# share of the sum of the updates' learning rates. Both sum each update's gradients in float32,
# in other orders and other XLA programs: in float32 the round-off stays far below a step
# (docs/benchmarks.md: the CPU check ends with the same weights). bfloat16 rounds the matrix
# products' inputs, so two programs that fuse the same batch's work differently may give
# gradients a little apart, and Adam turns a gradient near 0 into a step whose sign may differ:
# its bound is a tenth of the steps, to be confirmed by the part's first run on a GPU.
TOLERANCE = {"float32": 1e-3, "mixed_bfloat16": 0.1, "mixed_float16": 0.1}
# How far beyond the floor (1 x 8 micro-batches, forward against reversed) the replicas' gap may
# go: two orders of the same sums give gaps of one size, a real difference many times more.
FLOOR_FACTOR = 3.0


def split_device(kind: str, replicas: int, memory_mib: int | None) -> list[str]:
    """Cut the first physical device of `kind` ("gpu" or "cpu") into `replicas` logical ones,
    each GPU one with `memory_mib` of memory; their names. Must run before TensorFlow
    initialises the device (before any tensor or strategy is made).

    Raises:
        RuntimeError: TensorFlow sees no such device, or has initialised it already.
    """
    import tensorflow as tf

    physical = tf.config.list_physical_devices(kind.upper())
    if not physical:
        raise RuntimeError(f"TensorFlow sees no {kind.upper()} here")
    limit = {"memory_limit": memory_mib} if kind == "gpu" else {}
    tf.config.set_logical_device_configuration(
        physical[0], [tf.config.LogicalDeviceConfiguration(**limit) for _ in range(replicas)])
    return [device.name for device in tf.config.list_logical_devices(kind.upper())]


def default_memory_mib(replicas: int) -> int:
    """Each logical GPU's share of GPU 0's memory (nvidia-smi's memory.total), a tenth kept
    back for TensorFlow's and CUDA's own use.

    Raises:
        RuntimeError: nvidia-smi is missing or does not answer (give --memory-mib).
    """
    try:
        total = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                                "nounits", "--id=0"], capture_output=True, text=True).stdout
        return int(int(total.strip()) * 0.9) // replicas
    except (FileNotFoundError, ValueError) as error:
        raise RuntimeError(f"GPU 0's memory is unknown ({error}): give --memory-mib") from error


def cross_device_ops(name: str):
    """The sum across replicas. NCCL's all-reduce needs distinct physical GPUs (TensorFlow's own
    choice, `select_cross_device_ops`, refuses it on logical GPUs and reduces to one device):
    `one-device` sums the replicas' buffers on the first device and copies the sum back to the
    others; `hierarchical` sums each half on one device, then the two halves (built for the
    DGX-1's links). On one GPU both are copies within its memory."""
    import tensorflow as tf

    if name == "hierarchical":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=1)
    return tf.distribute.ReductionToOneDevice()


def model_config(args):
    """`--archs`'s preset with `--vocab` and `--layers` when given, dropout 0."""
    return dataclasses.replace(model_config_for(args.archs), dropout=0.0, **{
        key: value for key, value in (("vocab_size", args.vocab), ("num_layers", args.layers))
        if value})


@dataclasses.dataclass
class Run:
    """One of the three runs: what it trained and how fast."""

    label: str
    devices: list[str]  # its replicas
    update_freq: int  # micro-batches an update
    reverse: bool = False  # each update's batches in the reverse order
    seconds: float = 0.0  # of the timed updates
    first_loss: float = 0.0  # the first update's loss per target token
    weights: list[np.ndarray] | None = None  # after its last update
    failed: str = ""  # how its process ended, where it did not finish

    @property
    def batches_per_update(self) -> int:
        """Batches trained on by one update, all replicas and micro-batches."""
        return len(self.devices) * self.update_freq


def make_trainer(run: Run, args, save_dir: str):
    """A Trainer of `model_config(args)` on MirroredStrategy over `run.devices`."""
    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.training.trainer import Trainer

    train_config = TrainConfig(max_tokens=args.tokens, update_freq=run.update_freq,
                               precision=args.precision, jit_compile=args.jit,
                               adam_epsilon=1e-5, warmup_steps=args.warmup_steps,
                               validate_interval_steps=0)
    ops = cross_device_ops(args.all_reduce) if len(run.devices) > 1 else None
    strategy = tf.distribute.MirroredStrategy(run.devices, cross_device_ops=ops)
    return Trainer(model_config(args), train_config, save_dir, strategy=strategy,
                   log=lambda line: print(f"  [{run.label}] {line}", flush=True))


def train(run: Run, trainer, batches: list[dict], args) -> None:
    """Compile the batches' shape, then `args.warmup` updates, then `args.steps` timed ones, all
    reading `batches` in order from the first; sets `run`'s figures and weights."""
    from vtx.training.stream import BatchStream, PrefetchedStream

    if run.reverse:  # every update reads all of them: the same sums, in the reverse order
        batches = batches[::-1]
    rows, length = batches[0]["source"].shape
    trainer.compiler.compile_shapes([(rows, length, length)])
    stream = PrefetchedStream(BatchStream(lambda epoch, skip: batches[skip % len(batches):]),
                              trainer.engine.place_batch, 2)
    try:
        first = trainer.engine.train_update(stream)
        run.first_loss = first[0] / first[2]
        for _ in range(args.warmup - 1):
            trainer.engine.train_update(stream)
        run.seconds = timed_updates(trainer, stream, args.steps, in_flight=2)[0]
    finally:
        stream.close()
    run.weights = trainer.model.get_weights()


def run_all(runs: list[Run], args) -> list[np.ndarray]:
    """Train each of `runs` in turn, each in a process of its own (this script with `--run`),
    from the first's initial weights; those weights. A process a run: every run has the device
    to itself, and a run that TensorFlow aborts (as its GPU allocator did, a BFC check, making
    1 replica x 8 micro-batches under XLA on an H200) costs the others nothing: it is left
    without weights (`Run.failed` says how it ended)."""
    with tempfile.TemporaryDirectory() as work:
        for index in range(len(runs)):
            command = [sys.executable, __file__, *args.argv, "--run", str(index), "--work", work]
            done = subprocess.run(command)
            retry = allocator_retry(done.returncode, args.device, os.environ)
            if retry is not None:
                print(f"  [{runs[index].label}] killed by signal {-done.returncode}; again with "
                      f"TF_GPU_ALLOCATOR={retry['TF_GPU_ALLOCATOR']}", flush=True)
                runs[index].label += f" ({retry['TF_GPU_ALLOCATOR']})"
                done = subprocess.run(command, env=retry)
            if done.returncode:
                runs[index].failed = (f"exited {done.returncode}" if done.returncode > 0 else
                                      f"killed by signal {-done.returncode}")
                print(f"  [{runs[index].label}] {runs[index].failed}", flush=True)
                if index == 0:  # the others start from its weights
                    raise SystemExit(f"gpu_replicas: {runs[0].label} {runs[0].failed}")
                continue
            with np.load(f"{work}/run_{index}.npz") as saved:
                runs[index].seconds = float(saved["seconds"])
                runs[index].first_loss = float(saved["first_loss"])
                runs[index].weights = [saved[f"w{i}"] for i in range(len(saved.files) - 2)]
        with np.load(f"{work}/initial.npz") as saved:
            return [saved[f"w{i}"] for i in range(len(saved.files))]


def allocator_retry(returncode: int, device: str, environ) -> dict | None:
    """The environment to run an aborted GPU run again in, or None: a run that TensorFlow killed
    (a negative return code: a signal, as the BFC allocator's failed check raises SIGABRT) on a
    GPU whose allocator was left to TensorFlow is run once more on CUDA's own allocator
    (`cuda_malloc_async`), which has no BFC bins to check; the label says which ran."""
    if returncode >= 0 or device != "gpu" or "TF_GPU_ALLOCATOR" in environ:
        return None
    return {**environ, "TF_GPU_ALLOCATOR": "cuda_malloc_async"}


def run_one(run: Run, index: int, batches: list[dict], args) -> None:
    """`--run INDEX`: train `run` (the first run from its own initial weights, saved; the others
    from those) and save its figures and weights in `--work`."""
    initial = f"{args.work}/initial.npz"
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = make_trainer(run, args, save_dir)
        if index == 0:
            np.savez(initial, **{f"w{i}": w for i, w in enumerate(trainer.model.get_weights())})
        else:
            with np.load(initial) as saved:
                trainer.model.set_weights([saved[f"w{i}"] for i in range(len(saved.files))])
        started = time.perf_counter()
        train(run, trainer, batches, args)
        print(f"  [{run.label}] trained in {time.perf_counter() - started:.1f} s", flush=True)
    np.savez(f"{args.work}/run_{index}.npz", seconds=run.seconds, first_loss=run.first_loss,
             **{f"w{i}": w for i, w in enumerate(run.weights)})


def gap(weights: list[np.ndarray], others: list[np.ndarray]) -> float:
    """The largest absolute difference between two models' weights."""
    return max(float(np.max(np.abs(x - y))) for x, y in zip(weights, others))


def learning_rate_sum(args) -> float:
    """The sum of the learning rates of the updates each run made (`paper_learning_rate`)."""
    from vtx.training.schedule import paper_learning_rate

    return sum(float(paper_learning_rate(step, model_config(args).d_model, args.warmup_steps))
               for step in range(1, args.warmup + args.steps + 1))


def rate(run: Run, args) -> float:
    """Target tokens per second of `run`'s timed updates."""
    tokens = run.batches_per_update * (args.tokens // args.length * args.length)
    return tokens * args.steps / run.seconds


def report(runs: list[Run], initial: list[np.ndarray], args) -> bool:
    """Print the tok/s lines and the weights' check, then the figures as one `RESULT_TAG` JSON
    line (`summary`); whether the weights agree."""
    figures = summary(runs, initial, args)
    replicas = runs[0]
    for run, said in zip(runs, figures["runs"]):
        if run.failed:
            print(f"{run.label:28} {run.failed}", flush=True)
            continue
        against = ("" if run is replicas else f"; {replicas.label} / {run.label} = "
                   f"{figures['runs'][0]['tok_s'] / said['tok_s']:.2f}")
        print(f"{run.label:28} {said['tok_s']:10.0f} tok/s{against}", flush=True)
    accumulated, one = runs[2], runs[1]
    if accumulated.failed:
        print(f"weights: not compared: {accumulated.label} {accumulated.failed}", flush=True)
    else:
        print(f"first update's loss: {replicas.first_loss:.6f} ({replicas.label}), "
              f"{accumulated.first_loss:.6f} ({accumulated.label})")
        found, scale, floor = figures["gap"], figures["lr_sum"], figures["floor"]
        floor_said = "" if floor is None else (
            f"; the floor (round-off): max |{accumulated.label} - {runs[3].label}| = "
            f"{floor:.3g}, the gap {found / floor if floor else float('inf'):.2f}x it "
            f"(at most {FLOOR_FACTOR:g}x)")
        other = figures["other_batches_gap"]
        print(f"weights after {args.warmup + args.steps} updates: moved up to "
              f"{figures['moved']:.3g} from the initial ones; max |{replicas.label} - "
              f"{one.label}| (other batches) = {one.failed if other is None else f'{other:.3g}'}")
        print(f"weights: max |{replicas.label} - {accumulated.label}| = {found:.3g}, "
              f"{found / scale:.2g} of the learning rates' sum {scale:.3g} (tolerance "
              f"{figures['tolerance']:g} in {args.precision}){floor_said}: "
              f"{'agree' if figures['agree'] else 'DISAGREE'}", flush=True)
    print(RESULT_TAG + json.dumps(figures), flush=True)
    return figures["agree"]


def summary(runs: list[Run], initial: list[np.ndarray], args) -> dict:
    """The figures of the runs: each run's label, tok/s and how it failed (null: it finished);
    the first update's loss of the replicas and of 1 x N; how far the replicas' weights moved
    from the initial ones; their largest gap to 1 replica on other batches (the check's
    sensitivity), to 1 x N (`gap`), and 1 x N's to itself reversed (`floor`, the round-off);
    the learning rates' sum, the tolerance, and whether they agree. Gaps of a run that failed
    are null, and a failed 1 x N never agrees."""
    replicas, one, accumulated = runs[:3]
    figures = {"runs": [{"label": run.label, "tok_s": None if run.failed else rate(run, args),
                         "failed": run.failed or None} for run in runs],
               "first_loss": None, "moved": None, "other_batches_gap": None, "gap": None,
               "floor": None, "floor_factor": FLOOR_FACTOR, "lr_sum": learning_rate_sum(args),
               "tolerance": TOLERANCE[args.precision], "precision": args.precision,
               "agree": False}
    if accumulated.failed:
        return figures
    found = gap(replicas.weights, accumulated.weights)
    figures.update(first_loss=[float(replicas.first_loss), float(accumulated.first_loss)],
                   moved=gap(replicas.weights, initial), gap=found,
                   other_batches_gap=None if one.failed else gap(replicas.weights, one.weights),
                   agree=found <= figures["tolerance"] * figures["lr_sum"])
    if len(runs) == 4 and not runs[3].failed:
        figures["floor"] = gap(accumulated.weights, runs[3].weights)
        figures["agree"] = figures["agree"] or found <= FLOOR_FACTOR * figures["floor"]
    return figures


def make_runs(devices: list[str], args) -> list[Run]:
    """The runs, in order, on `devices` (the logical devices' names)."""
    runs = [Run(f"{len(devices)} replicas", devices, 1), Run("1 replica", devices[:1], 1),
            Run(f"1 replica x {len(devices)} micro-batches", devices[:1], len(devices))]
    if args.floor:
        runs.append(Run(f"1 replica x {len(devices)} reversed", devices[:1], len(devices),
                        reverse=True))
    return runs


def main(args) -> int:
    memory = (args.memory_mib or default_memory_mib(args.replicas)) if args.device == "gpu" \
        else None
    if args.run is not None:  # one run, in this process: the device split here
        if args.xla_cache_dir:  # before TensorFlow compiles: it reads the flag once
            from vtx import compile_cache

            compile_cache.enable(args.xla_cache_dir)
        devices = split_device(args.device, args.replicas, memory)
        batches = synthetic_batches(model_config(args).vocab_size, args.tokens, args.length,
                                    count=len(devices))
        run_one(make_runs(devices, args)[args.run], args.run, batches, args)
        return 0
    # This process only reports: it leaves the device to the runs' processes.
    named = gpu_name() if args.device == "gpu" else "CPU"
    print(f"device: {args.device} ({named}) split into {args.replicas} logical devices"
          f"{f' of {memory} MiB' if memory else ''}; {args.archs}"
          f"{f', {args.layers} layers' if args.layers else ''}"
          f"{f', vocabulary {args.vocab}' if args.vocab else ''}, {args.precision}, XLA "
          f"{'on' if args.jit else 'off'}, all-reduce {args.all_reduce}; {args.tokens} target "
          f"tokens a batch (B x {args.length}); {args.warmup} warm-up + {args.steps} timed "
          f"updates, at most 2 in flight", flush=True)
    runs = make_runs([f"device {index}" for index in range(args.replicas)], args)
    initial = run_all(runs, args)
    return 0 if report(runs, initial, args) else 1


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", default="base", help="the model: one preset (gpu_train.py's "
                                                        "flag, one value)")
    parser.add_argument("--vocab", type=int, default=0, help="vocabulary size (0: the preset's)")
    parser.add_argument("--layers", type=int, default=0,
                        help="encoder and decoder layers (0: the preset's)")
    parser.add_argument("--tokens", type=int, default=8192, help="target tokens a batch (one "
                                                                 "replica's, one micro-batch)")
    parser.add_argument("--length", type=int, default=64, help="L, source and target length")
    parser.add_argument("--steps", type=int, default=30, help="timed updates")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates after compiling")
    parser.add_argument("--warmup-steps", type=int, default=100,
                        help="the learning-rate schedule's warm-up (vtx train's --warmup-steps)")
    parser.add_argument("--precision", default="mixed_bfloat16", choices=tuple(TOLERANCE))
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--xla-cache-dir", metavar="DIR",
                        help="with --jit: TensorFlow's persistent XLA cache (vtx train's flag)")
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=None,
                        help="run 1 replica x N micro-batches again in the reverse order: the "
                             "round-off's floor (default: on in bfloat16 and float16)")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--replicas", type=int, default=8, help="logical devices")
    parser.add_argument("--memory-mib", type=int, default=0,
                        help="each logical GPU's memory (0: GPU 0's, less a tenth, shared out)")
    parser.add_argument("--all-reduce", choices=("one-device", "hierarchical"),
                        default="one-device", help="the sum across replicas (cross_device_ops)")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one run, in its process
    parser.add_argument("--work", help=argparse.SUPPRESS)  # where it saves what it trained
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if "," in args.archs:
        parser.error(f"--archs {args.archs}: one model")
    if args.length < 2 or args.tokens < args.length:
        parser.error(f"--tokens ({args.tokens}) must be >= --length ({args.length}) >= 2")
    if args.xla_cache_dir and not args.jit:
        parser.error("--xla-cache-dir goes with --jit")
    if args.replicas < 2 or args.steps < 1 or args.warmup < 1:
        parser.error("--replicas must be >= 2, --steps and --warmup >= 1")
    if args.floor is None:
        args.floor = args.precision != "float32"
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
