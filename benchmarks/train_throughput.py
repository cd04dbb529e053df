"""Training throughput, vtx vs a PyTorch reference: target tokens/s of one update.

One update = forward + backward + Adam update of the paper's Transformer on one batch of B sentences
of L source and L target tokens (default 128 x 32 = 4096 tokens a side, no padding: every target
token counts), steady state: `--warmup-base` / `--warmup-tiny` untimed updates first (tracing,
allocation), then `--steps-base` / `--steps-tiny` timed ones. Synthetic token ids, uniform over the
vocabulary (the preset's: base 37000, tiny 1000), four batches cycled; dropout and label
smoothing as in the preset (base: P_drop 0.1, eps_ls 0.1).

* vtx: the real training machinery, `vtx.training.trainer.Trainer` on a one-CPU MirroredStrategy,
  timing `engine.train_update(stream)` (per-replica gradient function, accumulation into float32
  buffers, Adam on the paper's schedule), precision float32 or mixed_bfloat16; TF's default threads.
* reference: `benchmarks/torch_reference.py`, the same model on `torch.nn` (post-norm
  TransformerEncoder/DecoderLayer, shared scaled embedding, sinusoidal positions), label-smoothed
  cross entropy, Adam(0.9, 0.98, 1e-9) on the same schedule; `torch.set_num_threads(--threads)`;
  float32, or forward under `torch.autocast("cpu", torch.bfloat16)` for mixed_bfloat16.

Every configuration runs in its own child process, vtx then the reference for each one, so that
neither framework's thread pools or global dtype policy affect the other, and both see the same
machine load as nearly as possible. Each prints its parameter count: the two models match.

Why not fairseq: `fairseq-fixed` 0.12.3.1 (the Python 3.11 fork) is a source distribution. pip's
isolated build pulls a second, CUDA torch into the build environment; built against the installed
torch 2.13 (`--no-build-isolation`) its C++ extensions did not finish compiling within 10 minutes
on this 2-core machine. The torch.nn model is the reference instead.

The reference is not a dependency of vtx. Install it into the same environment with
    .venv/bin/python -m pip install torch==2.13.0
(this machine's pip resolves that to the local CPU wheel, torch-2.13.0+cpu; elsewhere use
`--index-url https://download.pytorch.org/whl/cpu` so no CUDA packages come along). Without torch
the script prints a note and measures vtx alone.

Usage: python benchmarks/train_throughput.py [--archs base,tiny,quickstart]
           [--precisions float32,mixed_bfloat16] [--steps-base 2] [--steps-tiny 20]
           [--warmup-base 1] [--warmup-tiny 3] [--tokens 4096] [--length 32]
           [--reference torch|none] [--jit-compile] [--ema-decay D]

`--ema-decay D` times vtx's update with the weights' moving average stepped in it (`vtx train
--ema-decay`; the reference keeps none): run once with and once without for its cost.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import vtx  # noqa: F401  (before TensorFlow: it sets TensorFlow's environment, vtx/__init__.py)

BENCHMARKS = Path(__file__).resolve().parent
RESULT_TAG = "RESULT "
FIRST_WORD_ID, BOS_ID, EOS_ID = 4, 2, 3  # vtx.config ids, repeated to keep torch workers TF-free


def synthetic_batches(vocab_size: int, tokens: int, length: int, count: int = 4,
                      seed: int = 1) -> list[dict[str, np.ndarray]]:
    """`count` batches of B = tokens // length sentences, every one `length` tokens a side.

    Returns:
        dicts of int32 `source` [B, L], `target_in` [B, L] (BOS + target), `target_out` [B, L]
        (target + EOS), with word ids uniform in [4, vocab_size).
    """
    rng = np.random.default_rng(seed)
    batch = tokens // length
    batches = []
    for _ in range(count):
        source = rng.integers(FIRST_WORD_ID, vocab_size, (batch, length), dtype=np.int32)
        target = rng.integers(FIRST_WORD_ID, vocab_size, (batch, length - 1), dtype=np.int32)
        bos = np.full((batch, 1), BOS_ID, np.int32)
        eos = np.full((batch, 1), EOS_ID, np.int32)
        batches.append({"source": source, "target_in": np.concatenate([bos, target], 1),
                        "target_out": np.concatenate([target, eos], 1)})
    return batches


def time_steps(step: Callable[[int], float], warmup: int, steps: int) -> dict:
    """Run `warmup` untimed then `steps` timed calls of `step(i)` (which must block until done).

    Returns:
        {"seconds": wall seconds of each timed call, "cpu_seconds": this process's CPU seconds
        (all threads) over the timed calls, "loss_sum": the last value `step` returned}.
    """
    value = 0.0
    for i in range(warmup):
        value = step(i)
    seconds, cpu_start = [], time.process_time()
    for i in range(warmup, warmup + steps):
        start = time.perf_counter()
        value = step(i)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds, "cpu_seconds": time.process_time() - cpu_start, "loss_sum": value}


# Shapes that are not presets: the quick start's model (recipes/quickstart.sh), base cut down.
SHAPES = {"quickstart": ("base", {"num_layers": 3, "d_model": 256, "d_ff": 1024, "num_heads": 4,
                                  "vocab_size": 8000})}


def model_config_for(arch: str):
    """A preset name, or a name of SHAPES."""
    from vtx.config import preset

    name, overrides = SHAPES.get(arch, (arch, {}))
    return preset(name, **overrides)


def measure_vtx(arch: str, precision: str, args) -> dict:
    """Time `Trainer.train_update` on a one-CPU MirroredStrategy."""
    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.training.stream import BatchStream
    from vtx.training.trainer import Trainer

    model_config = model_config_for(arch)
    batches = synthetic_batches(model_config.vocab_size, args.tokens, args.length)
    train_config = TrainConfig(max_tokens=args.tokens, precision=precision,
                               jit_compile=args.jit_compile, validate_interval_steps=0,
                               ema_decay=args.ema_decay)
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = Trainer(model_config, train_config, save_dir,
                          strategy=tf.distribute.MirroredStrategy(["/cpu:0"]), log=lambda _: None)
        # The stream restarts an epoch from `skip`: cycling the fixed batches forever.
        stream = BatchStream(lambda epoch, skip: batches[skip % len(batches):])
        timing = time_steps(lambda i: float(trainer.engine.train_update(stream)[0]),
                            *steps_for(arch, args))
        return {"params": trainer.model.count_params(), **timing}


def measure_torch(arch: str, precision: str, args) -> dict:
    """Time the torch.nn reference's update (forward, backward, Adam)."""
    import torch_reference  # imports torch; only ever inside this worker process

    model_config = preset_dict(arch)
    model = torch_reference.build(model_config, args.threads)
    step = torch_reference.make_step(model, label_smoothing=0.1,
                                     bfloat16=precision == "mixed_bfloat16")
    batches = [torch_reference.to_tensors(b) for b in
               synthetic_batches(model_config["vocab_size"], args.tokens, args.length)]
    timing = time_steps(lambda i: step(batches[i % len(batches)]), *steps_for(arch, args))
    return {"params": sum(p.numel() for p in model.parameters()), **timing}


def preset_dict(arch: str) -> dict:
    """The vtx model configuration as a dict (importing vtx.config imports no TensorFlow)."""
    return model_config_for(arch).to_dict()


def steps_for(arch: str, args) -> tuple[int, int]:
    """(warm-up updates, timed updates) for `arch`: tiny is cheap, the others are not."""
    if arch == "tiny":
        return args.warmup_tiny, args.steps_tiny
    return args.warmup_base, args.steps_base


def run_worker(framework: str, arch: str, precision: str, args) -> dict | None:
    """Run one measurement in a child process; None (with a note) when it fails."""
    command = [sys.executable, __file__, "--worker", framework, "--archs", arch,
               "--precisions", precision, "--steps-base", str(args.steps_base),
               "--steps-tiny", str(args.steps_tiny), "--warmup-base", str(args.warmup_base),
               "--warmup-tiny", str(args.warmup_tiny),
               "--tokens", str(args.tokens), "--length", str(args.length),
               "--threads", str(args.threads)] + (["--jit-compile"] if args.jit_compile else [])
    if args.ema_decay is not None:
        command += ["--ema-decay", str(args.ema_decay)]
    return run_child(command, f"{framework} {arch} {precision}")


def run_child(command: list[str], label: str) -> dict | None:
    """Run a worker command with this folder on its path; its `RESULT_TAG` line's JSON, or None
    (with the end of its error output, headed by `label`) when it printed none. The worker's
    other output lines are printed as they come, so that what it measured before being stopped
    (a device's time limit) is not lost with it."""
    paths = [str(BENCHMARKS)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow",
           "PYTHONPATH": os.pathsep.join(paths)}
    result = None
    with tempfile.TemporaryFile("w+") as errors:  # a file: a full stderr pipe would block it
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                              env=env) as child:
            for line in child.stdout:
                if line.startswith(RESULT_TAG):
                    result = json.loads(line[len(RESULT_TAG):])
                else:
                    print(f"  {label}: {line.rstrip()}", flush=True)
        if result is None:
            errors.seek(0)
            print(f"  {label} failed (exit {child.returncode}):\n{errors.read()[-3000:]}",
                  file=sys.stderr)
    return result


def tokens_per_second(result: dict | None, args) -> float | None:
    if result is None:
        return None
    tokens_per_update = args.tokens // args.length * args.length  # B x L target tokens
    return tokens_per_update * len(result["seconds"]) / sum(result["seconds"])


def format_row(arch: str, precision: str, vtx: dict | None, reference: dict | None, args) -> str:
    """One table row: tokens/s of each, the ratio, wall and CPU seconds per step, parameters."""
    ours, theirs = tokens_per_second(vtx, args), tokens_per_second(reference, args)
    cell = lambda value: f"{value:9.0f}" if value else f"{'-':>9}"
    ratio = f"{ours / theirs:6.2f}x" if ours and theirs else f"{'-':>7}"
    per_step = lambda r: (f"{min(r['seconds']):.2f}-{max(r['seconds']):.2f} "
                          f"{r['cpu_seconds'] / len(r['seconds']):.2f}" if r else "-")
    params = "/".join(str(r["params"]) if r else "-" for r in (vtx, reference))
    steps = len((vtx or reference or {"seconds": []})["seconds"])
    return (f"{arch:5} {precision:15} {cell(ours)} {cell(theirs)} {ratio} {steps:5d}  "
            f"{per_step(vtx):>17}  {per_step(reference):>17}  {params}")


def main(args) -> None:
    reference = args.reference
    if reference == "torch" and importlib.util.find_spec("torch") is None:
        print("note: torch is not installed, so the reference is skipped; install it with "
              "`.venv/bin/python -m pip install torch==2.13.0` (see this script's docstring)")
        reference = "none"
    if reference == "torch":
        import torch  # only to name the version; the measurement runs in a child process

        print(f"reference: torch {torch.__version__} nn.Transformer layers, "
              f"{args.threads} threads; bf16 = torch.autocast('cpu', bfloat16)")
    print(f"machine: {_cpu_model()}")
    print(f"batch: {args.tokens // args.length} x {args.length} tokens a side; warm-up updates: "
          f"base {args.warmup_base}, tiny {args.warmup_tiny}; jit_compile={args.jit_compile}; "
          f"vtx ema_decay={args.ema_decay}; "
          f"cpus={os.cpu_count()}; load average before: {_load()}")
    print("tok/s: target tokens per second of wall time over the timed updates; s/step: fastest-"
          "slowest wall seconds of one update, then the process's CPU seconds per update")
    print(f"{'arch':5} {'precision':15} {'vtx tok/s':>9} {'ref tok/s':>9} {'vtx/ref':>7} "
          f"{'steps':>5}  {'vtx s/step cpu':>17}  {'ref s/step cpu':>17}  params vtx/ref")
    for arch in args.archs.split(","):
        for precision in args.precisions.split(","):
            vtx = run_worker("vtx", arch, precision, args)
            theirs = run_worker("torch", arch, precision, args) if reference == "torch" else None
            print(format_row(arch, precision, vtx, theirs, args), flush=True)
    print(f"load average after: {_load()}")


def _cpu_model() -> str:
    """The CPU model and whether it has native bfloat16 (the figures depend on both)."""
    from vtx.training.precision import BF16_CPU_FLAGS, cpu_flags, max_cpu_isa

    names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", errors="replace")
             if line.startswith("model name")] or ["unknown CPU"]
    native = [flag for flag in BF16_CPU_FLAGS if flag in cpu_flags()]
    cap = max_cpu_isa()
    return (f"{names[0]}, {os.cpu_count()} cpus, "
            f"{'bf16: ' + ', '.join(native) if native else 'no native bf16'}"
            f"{f'; {cap[0]}={cap[1]}' if cap else ''}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", default="base,tiny")
    parser.add_argument("--precisions", default="float32,mixed_bfloat16")
    parser.add_argument("--steps-base", type=int, default=2, help="timed updates, non-tiny presets")
    parser.add_argument("--steps-tiny", type=int, default=20, help="timed updates, tiny")
    parser.add_argument("--warmup-base", type=int, default=1, help="untimed updates first")
    parser.add_argument("--warmup-tiny", type=int, default=3, help="untimed updates first")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens a side per batch")
    parser.add_argument("--length", type=int, default=32, help="L, source and target length")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--reference", choices=("torch", "none"), default="torch")
    parser.add_argument("--jit-compile", action="store_true", help="XLA on vtx's gradient function")
    parser.add_argument("--ema-decay", type=float, default=None,
                        help="vtx keeps the weights' EMA of this decay (vtx train --ema-decay)")
    parser.add_argument("--worker", choices=("vtx", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tokens < args.length or args.length < 2:
        parser.error(f"--tokens ({args.tokens}) must be >= --length ({args.length}) >= 2")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.worker:
        measure = measure_vtx if arguments.worker == "vtx" else measure_torch
        result = measure(arguments.archs, arguments.precisions, arguments)
        print(RESULT_TAG + json.dumps(result), flush=True)
    else:
        main(arguments)
