"""Benchmark of `vtx preprocess` and the input pipeline; prints its figures.

    .venv/bin/python benchmarks/preprocess.py [--data ../shared/data/multi30k] [--pairs 1000000]

1. sentences/s of encode+binarize (`vtx preprocess --spm-model`, both sides counted) on Multi30k
   train and on a generated corpus (Multi30k pairs resampled), --workers 1 and 2, beside the
   `spm_encode` command line (single-threaded, ids to /dev/null) on the same text in the same run.
2. peak resident memory of whole `vtx preprocess` runs (vocabulary training included) on 100k
   pairs and on `--pairs` pairs.
3. the pipeline's batches/s and tokens/s, beside a `base` training step (float32, this CPU).
Every vtx run is a fresh process; its peak RSS comes from getrusage of a wrapper process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import vtx  # noqa: F401  (before TensorFlow: it sets TensorFlow's environment, vtx/__init__.py)

REPO = Path(__file__).resolve().parents[1]
# Runs a command, then prints the peak RSS (KiB) of its largest process and the CPU seconds of all
# its processes, so every run is measured alone (RUSAGE_CHILDREN of this process would keep the
# maximum over all earlier runs).
USAGE_WRAPPER = ("import resource, subprocess, sys; "
                 "code = subprocess.run(sys.argv[1:]).returncode; "
                 "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
                 "print(u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr); "
                 "sys.exit(code)")


def vtx_preprocess(args: list[str]) -> tuple[dict, float, float]:
    """Run `vtx preprocess ARGS` in a fresh process.

    Returns:
        (meta.json, peak RSS of its largest process in MiB, CPU seconds of all its processes,
        Python start-up and imports included).
    """
    command = [sys.executable, "-c", USAGE_WRAPPER, sys.executable, "-m", "vtx_cli.main",
               "preprocess", "-s", "en", "-t", "de", "--force", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"vtx preprocess failed:\n{done.stdout}\n{done.stderr}")
    peak_kib, cpu_seconds = done.stderr.strip().splitlines()[-1].split()
    destdir = Path(args[args.index("--destdir") + 1])
    meta = json.loads((destdir / "meta.json").read_text())
    return meta, int(peak_kib) / 1024, float(cpu_seconds)


def spm_encode_seconds(spm_encode: str, model: Path, files: list[Path]) -> tuple[float, float]:
    """(wall, CPU) seconds of `spm_encode --output_format=id` over `files`, output dropped."""
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    for path in files:
        with open(path, "rb") as source:
            subprocess.run([spm_encode, f"--model={model}", "--output_format=id"], stdin=source,
                           stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started, _children_cpu_seconds() - cpu_before


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plain_copy(path: Path, folder: Path) -> Path:
    """A decompressed copy of a .gz file (spm_encode reads plain text)."""
    target = folder / path.name.removesuffix(".gz")
    with gzip.open(path, "rb") as source, open(target, "wb") as sink:
        shutil.copyfileobj(source, sink)
    return target


def generate_corpus(data: Path, folder: Path, name: str, pairs: int, seed: int = 0) -> str:
    """PREFIX of `pairs` Multi30k training pairs drawn with replacement (plain text)."""
    with gzip.open(data / "train.en.gz", "rt") as en, gzip.open(data / "train.de.gz", "rt") as de:
        lines = list(zip(en, de))
    rng = random.Random(seed)
    with open(folder / f"{name}.en", "w") as en, open(folder / f"{name}.de", "w") as de:
        for _ in range(pairs):
            source, target = lines[rng.randrange(len(lines))]
            en.write(source)
            de.write(target)
    return str(folder / name)


def throughput_rows(prefix: str, files: list[Path], model: Path, spm_encode: str | None,
                    work: Path) -> None:
    """Print vtx (workers 1, 2) and spm_encode sentences/s on the same text.

    Wall rates are what a user sees; on a shared CPU they depend on the load, so rates per CPU
    second (all processes, vtx's Python start-up included) are printed beside them.
    """
    spm_rate = spm_cpu_rate = None
    if spm_encode:
        lines = sum(1 for path in files for _ in open(path, "rb"))
        wall, cpu = spm_encode_seconds(spm_encode, model, files)
        spm_rate, spm_cpu_rate = lines / wall, lines / cpu
        print(f"  spm_encode (1 process): {spm_rate:,.0f} sentences/s wall, "
              f"{spm_cpu_rate:,.0f} per CPU second")
    for workers in (1, 2):
        meta, _, cpu = vtx_preprocess(["--trainpref", prefix, "--spm-model", str(model),
                                       "--workers", str(workers), "--destdir", str(work / "bin")])
        sentences = 2 * (meta["splits"]["train"]["sentences"]
                         + sum(meta["splits"]["train"]["filtered"].values()))
        rate, cpu_rate = sentences / meta["seconds"], sentences / cpu
        ratio = (f"; per worker {rate / workers / spm_rate:.2f}x spm_encode wall, "
                 f"{cpu_rate / spm_cpu_rate:.2f}x per CPU second") if spm_rate else ""
        print(f"  vtx --workers {workers}: {rate:,.0f} sentences/s wall ({sentences:,} in "
              f"{meta['seconds']:.2f} s), {cpu_rate:,.0f} per CPU second{ratio}")


def pipeline_rate(data_dir: Path, max_tokens: int) -> tuple[float, float, int]:
    """One epoch of train_batches: (batches/s, non-pad source+target tokens/s, batches)."""
    import numpy as np

    from vtx.data import pipeline

    started = time.perf_counter()
    batches = tokens = 0
    for batch in pipeline.train_batches(data_dir, max_tokens=max_tokens, seed=1):
        batches += 1
        tokens += int(np.count_nonzero(batch["source"]) + np.count_nonzero(batch["target_out"]))
    seconds = time.perf_counter() - started
    return batches / seconds, tokens / seconds, batches


def base_step_rate(data_dir: Path, max_tokens: int, steps: int = 3) -> tuple[float, float]:
    """A float32 `base` training step on this CPU: (steps/s, non-pad tokens/s), after one warm-up."""
    import keras
    import numpy as np
    import tensorflow as tf

    from vtx import config
    from vtx.data import pipeline
    from vtx.data.directory import DataDirectory
    from vtx.models import transformer

    vocab_size = DataDirectory.open(data_dir).vocab_size
    model = transformer.build(config.preset("base", vocab_size=vocab_size))
    optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            logits = model((batch["source"], batch["target_in"]), training=True)
            mask = tf.cast(batch["target_out"] != 0, tf.float32)
            loss = loss_fn(batch["target_out"], logits, sample_weight=mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # The largest batches (most tokens) of an epoch, so the step is at the token bound.
    batches = sorted(pipeline.train_batches(data_dir, max_tokens=max_tokens, seed=1),
                     key=lambda b: -int(np.count_nonzero(b["source"])))[:steps + 1]
    step(batches[0])  # trace and warm up
    started = time.perf_counter()
    tokens = 0
    for batch in batches[1:]:
        step(batch).numpy()
        tokens += int(np.count_nonzero(batch["source"]) + np.count_nonzero(batch["target_out"]))
    seconds = time.perf_counter() - started
    return steps / seconds, tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--pairs", type=int, default=1_000_000, help="size of the big corpus")
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    # The sentencepiece wheel ships no command-line tools; Debian's `sentencepiece` package does.
    spm_encode = (shutil.which("spm_encode", path=str(Path(sys.executable).parent))
                  or shutil.which("spm_encode"))
    print(f"cpus: {os.cpu_count()}  load average: {os.getloadavg()[0]:.1f}  spm_encode: "
          f"{spm_encode or 'not found (apt install sentencepiece)'}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        multi30k = work / "m30k"
        meta, _, _ = vtx_preprocess(["--trainpref", str(args.data / "train"), "--vocab-size", "8000",
                                  "--destdir", str(multi30k)])
        model = multi30k / "spm.model"
        print("\n1. encode+binarize throughput (vocabulary 8000, BPE; wall time, shared CPU)")
        print(f"Multi30k train ({meta['splits']['train']['sentences']:,} pairs, .gz input):")
        plain = [plain_copy(args.data / f"train.{lang}.gz", work) for lang in ("en", "de")]
        throughput_rows(str(args.data / "train"), plain, model, spm_encode, work)
        big = generate_corpus(args.data, work, "big", args.pairs)
        print(f"generated corpus ({args.pairs:,} resampled Multi30k pairs, plain input):")
        throughput_rows(big, [Path(f"{big}.en"), Path(f"{big}.de")], model, spm_encode, work)

        print("\n2. peak RSS of a whole `vtx preprocess` (vocabulary 8000 on a 200k-line sample, "
              "binarize, --workers 1)")
        small = generate_corpus(args.data, work, "small", 100_000)
        peaks = {}
        for name, prefix in (("100k", small), (f"{args.pairs // 1000}k", big)):
            _, peaks[name], _ = vtx_preprocess(["--trainpref", prefix, "--vocab-size", "8000",
                                             "--sample-lines", "200000", "--destdir",
                                             str(work / "bin")])
            print(f"  {name} pairs: {peaks[name]:.0f} MiB")
        low, high = sorted(peaks.values())
        print(f"  difference: {100 * (high - low) / low:.1f}%")

        print(f"\n3. input pipeline vs `base` training step (max_tokens {args.max_tokens})")
        batches_s, tokens_s, count = pipeline_rate(multi30k, args.max_tokens)
        print(f"  pipeline: {batches_s:,.1f} batches/s, {tokens_s:,.0f} tokens/s "
              f"(one Multi30k epoch, {count} batches)")
        steps_s, step_tokens_s = base_step_rate(multi30k, args.max_tokens)
        print(f"  base training step (float32, this CPU): {steps_s:.3f} steps/s, "
              f"{step_tokens_s:,.0f} tokens/s")
        print(f"  pipeline / training: {batches_s / steps_s:,.0f}x in batches, "
              f"{tokens_s / step_tokens_s:,.0f}x in tokens")


if __name__ == "__main__":
    main()
