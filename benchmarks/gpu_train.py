"""Training throughput on a GPU: vtx's compiled update against the torch reference.

For each arch (`--archs`, default base,big) and batch (`--tokens`, default 8192,16384,32768
target tokens of B x L, L = `--length`, no padding), one child process each:

* vtx: the real `Trainer` on a one-device MirroredStrategy, `--precision` (default
  mixed_bfloat16), XLA on (`--no-jit` for off); the batch shape compiled first (`compile s`),
  `--warmup` updates, then `--steps` updates launched back to back and read at the end: target
  tokens per second of wall time. Batches are fed as `vtx train` feeds them, read and placed on
  the device ahead on a thread; `--prefetch 2,0` times them again with each batch placed on
  the training thread as its update starts: what the thread saves. `--in-flight 0,2` times them
  again as `vtx train`'s loop runs them, each read while the next is launched (at most 2 in
  flight): what reading each update costs.
* torch: `benchmarks/torch_reference.py` (the same model on torch.nn) on the same device, bf16
  autocast for mixed_bfloat16, `Adam(fused=True)` on a GPU, the same updates back to back,
  synchronised at the end. None for mixed_float16 (vtx's loss-scaled float16, for GPUs without
  bfloat16): `--no-reference`.

MFU = tok/s x 6 x parameters (encoder, decoder and the shared embedding that is also the
output projection) / `--peak-tflops` (989: the H100 SXM's dense bf16 peak); attention's own
FLOPs are left out, as the 6 x parameters estimate does.

On the GPU machine (see ../shared/gpu/README.md):
    bash .gpu/bin/setup.sh && . .gpu/bin/env.sh && python benchmarks/gpu_train.py
`--profile DIR` then traces a few more updates and prints where their time went on the device:
busy and idle time, matrix products against the rest, the longest kernels (`xplane_summary.py`).
`--packed N` gives vtx batches of the same shape packed as `vtx train --pack` packs them, N pairs
a row of L // N tokens a side (segment ids and positions: attention within each pair), where the
real pipeline's packed rate can be set against the same model's unpacked one (no torch reference:
it has no packing).
On a CPU, to check that it runs (the figures mean nothing there):
    python benchmarks/gpu_train.py --device cpu --archs tiny --tokens 512 --length 16 --steps 3
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

from train_throughput import RESULT_TAG, model_config_for, run_child, synthetic_batches


def arch_config(arch: str, args):
    """The arch's preset, with `--vocab` when given (the real pipeline's vocabulary)."""
    config = model_config_for(arch)
    return dataclasses.replace(config, vocab_size=args.vocab) if args.vocab else config


def measure_vtx(arch: str, tokens: int, args) -> dict:
    """Compile seconds, then the wall seconds of `args.steps` updates launched back to back."""
    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.training.stream import BatchStream, PrefetchedStream
    from vtx.training.trainer import Trainer

    model_config = arch_config(arch, args)
    batches = synthetic_batches(model_config.vocab_size, tokens, args.length)
    if args.packed > 1:
        batches = [packed(batch, args.packed) for batch in batches]
    train_config = TrainConfig(max_tokens=tokens, precision=args.precision,
                               jit_compile=args.jit, validate_interval_steps=0)
    device = "/gpu:0" if args.device == "gpu" else "/cpu:0"
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = Trainer(model_config, train_config, save_dir,
                          strategy=tf.distribute.MirroredStrategy([device]), log=lambda _: None)
        rows, length = batches[0]["source"].shape
        if args.packed > 1:  # compiled for packed batches, as `vtx train --pack` does
            trainer.state.packed_shapes = [(rows, length, length)]
        started = time.perf_counter()
        trainer.compiler.compile_shapes([(rows, length, length)], packed=args.packed > 1)
        compile_seconds = time.perf_counter() - started

        def feed(prefetch: int):
            stream = BatchStream(lambda epoch, skip: batches[skip % len(batches):])
            if prefetch:  # as `vtx train` feeds its updates
                return PrefetchedStream(stream, trainer.engine.place_batch, prefetch)
            return stream

        def timed_feed(prefetch: int) -> float:
            other = feed(prefetch)
            try:
                return timed_updates(trainer, other, args.steps, args.in_flight)[0]
            finally:
                other.close()

        stream = feed(args.prefetch)
        try:
            for _ in range(args.warmup):
                trainer.engine.train_update(stream)
            seconds, loss_sums = timed_updates(trainer, stream, args.steps, args.in_flight)
            read_each = {k: timed_updates(trainer, stream, args.steps, k)[0]
                         for k in args.also_in_flight}
            fed_each = {k: timed_feed(k) for k in args.also_prefetch}
            if args.profile:  # the figures first: a time limit may stop the trace
                rate = tokens // args.length * args.length * args.steps / seconds
                mfu = 100 * rate * 6 * trainer.model.count_params() / (args.peak_tflops * 1e12)
                print(f"timed: compiled in {compile_seconds:.1f} s, {rate:.0f} tok/s, MFU "
                      f"{mfu:.1f}%; tracing {args.profile_steps} more update(s)", flush=True)
            return {"seconds": seconds, "compile_seconds": compile_seconds,
                    "in_flight": read_each, "prefetch": fed_each,
                    "params": trainer.model.count_params(),
                    "last_loss_sum": loss_sums[-1],
                    "profile": profile(trainer, stream, args, f"{arch}_{tokens}")
                    if args.profile else None}
        finally:
            stream.close()


def packed(batch: dict, pairs: int) -> dict:
    """`batch` (B x L a side) as packed rows of `pairs` pairs of L // pairs positions a side,
    each pair's source and target cut from the row's tokens: the same shape and count of target
    tokens (L // pairs divides L), the model attending within each pair."""
    from vtx.data import packing

    rows, length = batch["source"].shape
    span = length // pairs
    source, target = batch["source"], batch["target_out"]
    packed_rows = [[(source[row, i * span:(i + 1) * span],
                     target[row, i * span:(i + 1) * span - 1]) for i in range(pairs)]
                   for row in range(rows)]
    return packing.pack_batch(packed_rows, (rows, length, length))


def timed_updates(trainer, stream, steps: int, in_flight: int) -> tuple[float, list[float]]:
    """Wall seconds of `steps` updates, at most `in_flight` launched and not yet read (0: all
    launched, then read; `vtx train`'s loop: 2, each update launched before the one before is
    read), and their loss sums."""
    started, launched, loss_sums = time.perf_counter(), collections.deque(), []
    for _ in range(steps):
        if in_flight and len(launched) == in_flight:
            loss_sums.append(float(trainer.engine.read_update(launched.popleft())[0]))
        launched.append(trainer.engine.start_update(stream))
    loss_sums += [float(trainer.engine.read_update(totals)[0]) for totals in launched]
    return time.perf_counter() - started, loss_sums


def prefetch_said(prefetch: int) -> str:
    """How `measure_vtx` fed the updates for `--prefetch` value `prefetch`."""
    if prefetch == 0:
        return "batches placed as each update starts"
    return f"batches placed on the device {prefetch} ahead"


def in_flight_said(in_flight: int) -> str:
    """How `timed_updates` ran the updates for `--in-flight` value `in_flight`."""
    if in_flight == 0:
        return "all launched, then read"
    return f"at most {in_flight} update{'s' if in_flight > 1 else ''} in flight"


def profile(trainer, stream, args, name: str) -> str:
    """Trace `args.profile_steps` more updates, launched as the timed ones were, into
    `args.profile`/`name`; their summary (`xplane_summary`)."""
    import tensorflow as tf

    import xplane_summary

    directory = os.path.join(args.profile, name)
    tf.profiler.experimental.start(directory)
    try:
        launched = [trainer.engine.start_update(stream) for _ in range(args.profile_steps)]
        for totals in launched:
            trainer.engine.read_update(totals)
    finally:
        tf.profiler.experimental.stop()
    return xplane_summary.summarize_directory(directory, updates=args.profile_steps)


def measure_torch(arch: str, tokens: int, args) -> dict:
    """The wall seconds of `args.steps` reference updates run back to back."""
    import torch
    import torch_reference

    device = "cuda" if args.device == "gpu" else "cpu"
    model = torch_reference.build(arch_config(arch, args).to_dict(), os.cpu_count()).to(device)
    step = torch_reference.make_step(model, label_smoothing=0.1,
                                     bfloat16=args.precision == "mixed_bfloat16",
                                     fused=device == "cuda", read_loss=False)
    batches = [{k: v.to(device) for k, v in torch_reference.to_tensors(b).items()}
               for b in synthetic_batches(model.embedding.num_embeddings, tokens, args.length)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for i in range(args.warmup):
        step(batches[i % len(batches)])
    sync()
    started = time.perf_counter()
    for i in range(args.steps):
        loss_sum = step(batches[i % len(batches)])
    sync()
    return {"seconds": time.perf_counter() - started, "compile_seconds": 0.0,
            "params": sum(p.numel() for p in model.parameters()),
            "last_loss_sum": float(loss_sum)}


def run_worker(framework: str, arch: str, tokens: int, args) -> dict | None:
    """One measurement in a child process; None (with its error output) when it fails."""
    command = [sys.executable, __file__, "--worker", framework, "--archs", arch,
               "--tokens", str(tokens), "--length", str(args.length), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--precision", args.precision,
               "--device", args.device, "--jit" if args.jit else "--no-jit",
               "--profile-steps", str(args.profile_steps), "--peak-tflops", str(args.peak_tflops),
               "--packed", str(args.packed), "--vocab", str(args.vocab or 0),
               "--prefetch", ",".join(map(str, [args.prefetch, *args.also_prefetch])),
               "--in-flight", ",".join(map(str, [args.in_flight, *args.also_in_flight])),
               "--reference" if args.reference else "--no-reference"]
    if args.profile and framework == "vtx":
        command += ["--profile", args.profile]
    return run_child(command, f"{framework} {arch} {tokens}")


def row_figures(arch: str, tokens: int, vtx: dict | None, torch: dict | None, args) -> dict:
    """A row's figures: compile seconds, tok/s and MFU of each (None: its worker failed or did
    not run), their ratio, parameters, and vtx's tok/s timed again per --in-flight and
    --prefetch value."""
    target_tokens = tokens // args.length * args.length * args.steps
    rate = lambda r: target_tokens / r["seconds"] if r else None
    mfu = lambda r: 100 * rate(r) * 6 * r["params"] / (args.peak_tflops * 1e12) if r else None
    again = lambda key: {value: target_tokens / seconds
                         for value, seconds in (vtx or {}).get(key, {}).items()}
    return {"arch": arch, "tokens": tokens,
            "compile_seconds": vtx["compile_seconds"] if vtx else None,
            "vtx_tok_s": rate(vtx), "torch_tok_s": rate(torch),
            "ratio": rate(vtx) / rate(torch) if vtx and torch else None,
            "vtx_mfu": mfu(vtx), "torch_mfu": mfu(torch),
            "params": [r["params"] if r else None for r in (vtx, torch)],
            "in_flight": again("in_flight"), "prefetch": again("prefetch")}


def format_row(figures: dict) -> str:
    """arch, tokens, compile s, tok/s of each, the ratio, MFU of each, parameters."""
    cell = lambda key, spec: format(figures[key], spec) if figures[key] is not None else "-"
    return (f"{figures['arch']:10} {figures['tokens']:6d} {cell('compile_seconds', '9.1f'):>9} "
            f"{cell('vtx_tok_s', '10.0f'):>10} {cell('torch_tok_s', '10.0f'):>10} "
            f"{cell('ratio', '6.2f'):>6}x {cell('vtx_mfu', '6.1f'):>6}% "
            f"{cell('torch_mfu', '6.1f'):>6}% "
            f"{'/'.join('-' if p is None else str(p) for p in figures['params'])}")


def main(args) -> None:
    print(f"device: {args.device} ({gpu_name() if args.device == 'gpu' else 'CPU'}); "
          f"precision {args.precision}, vtx XLA {'on' if args.jit else 'off'}; B x {args.length} "
          f"tokens a side{f', vocabulary {args.vocab}' if args.vocab else ''}"
          f"{f', packed {args.packed} pairs a row' if args.packed > 1 else ''}; "
          f"{prefetch_said(args.prefetch)}; "
          f"{args.warmup} warm-up + {args.steps} timed updates back to back; "
          f"MFU against {args.peak_tflops:g} TFLOP/s")
    print(f"{'arch':10} {'tokens':>6} {'compile s':>9} {'vtx tok/s':>10} {'torch tok/s':>10} "
          f"{'ratio':>7} {'vtx MFU':>7} {'torch MFU':>7} params vtx/torch")
    rows = []
    for arch in args.archs.split(","):
        for tokens in (int(t) for t in args.tokens.split(",")):
            vtx = run_worker("vtx", arch, tokens, args)
            torch = run_worker("torch", arch, tokens, args) if args.reference else None
            rows.append(row_figures(arch, tokens, vtx, torch, args))
            print(format_row(rows[-1]), flush=True)
            for key, said in (("in_flight", in_flight_said), ("prefetch", prefetch_said)):
                for value, rate in rows[-1][key].items():
                    print(f"  vtx, {said(int(value))}: {rate:.0f} tok/s, "
                          f"{100 * rate / rows[-1]['vtx_tok_s']:.1f}% of the row's", flush=True)
            if vtx and vtx.get("profile"):
                print(vtx["profile"], flush=True)
    print(RESULT_TAG + json.dumps({"rows": rows}), flush=True)


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip() or "no GPU listed"
    except FileNotFoundError:
        return "no nvidia-smi"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", default="base,big")
    parser.add_argument("--tokens", default="8192,16384,32768", help="target tokens per batch")
    parser.add_argument("--length", type=int, default=64, help="L, source and target length")
    parser.add_argument("--steps", type=int, default=30, help="timed updates")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates after compiling")
    parser.add_argument("--precision", default="mixed_bfloat16",
                        choices=("float32", "mixed_bfloat16", "mixed_float16"))
    parser.add_argument("--jit", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the torch reference")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--profile", metavar="DIR",
                        help="after timing, trace vtx's updates into DIR/<arch>_<tokens> with "
                             "TensorFlow's profiler and print where their time went")
    parser.add_argument("--profile-steps", type=int, default=3, help="updates traced")
    parser.add_argument("--vocab", type=int, default=0,
                        help="vocabulary size (default: the arch's preset; the real pipeline's "
                             "Multi30k: 8000)")
    parser.add_argument("--in-flight", default="0", metavar="K[,K...]",
                        help="at most K updates launched and not yet read (0: all launched, then "
                             "read; vtx train's loop: 2); more values: timed again after, each")
    parser.add_argument("--prefetch", default="2", metavar="K[,K...]",
                        help="vtx's batches read and placed on the device K ahead on a thread, "
                             "as `vtx train` feeds them (0: each placed on the training thread "
                             "as its update starts); more values: timed again after, each "
                             "(with the first --in-flight)")
    parser.add_argument("--packed", type=int, default=1, metavar="N",
                        help="vtx's rows packed with N pairs of L // N tokens a side")
    parser.add_argument("--worker", choices=("vtx", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.length < 2 or any(int(t) < args.length for t in args.tokens.split(",")):
        parser.error(f"every --tokens ({args.tokens}) must be >= --length ({args.length}) >= 2")
    for name in ("in_flight", "prefetch"):  # K[,K...]: the first, then each timed again
        flag, given = "--" + name.replace("_", "-"), getattr(args, name)
        try:
            first, *also = [int(k) for k in given.split(",")]
        except ValueError:
            parser.error(f"{flag} {given}: whole numbers, comma-separated")
        if min([first, *also]) < 0:
            parser.error(f"{flag} {given}: no value below 0")
        setattr(args, name, first)
        setattr(args, "also_" + name, also)
    if args.vocab and args.vocab < 8:
        parser.error(f"--vocab {args.vocab}: at least 8 (4 special ids and words)")
    if args.packed < 1 or args.length % args.packed or args.length // args.packed < 2:
        parser.error(f"--packed {args.packed} must divide --length {args.length} into pairs of "
                     f">= 2 tokens")
    if args.packed > 1 and args.reference:
        parser.error("--packed goes with --no-reference (the torch reference does not pack)")
    if args.precision == "mixed_float16" and args.reference:
        parser.error("--precision mixed_float16 goes with --no-reference (the torch reference "
                     "has no float16 loss scaling)")
    if args.profile_steps < 1:
        parser.error(f"--profile-steps must be >= 1, got {args.profile_steps}")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.worker:
        measure = measure_vtx if arguments.worker == "vtx" else measure_torch
        print(RESULT_TAG + json.dumps(measure(arguments.archs, int(arguments.tokens), arguments)),
              flush=True)
    else:
        main(arguments)
