"""Memory of one beam search against `vtx.inference.decoding.search_bytes`, its estimate.

`vtx translate` and `vtx parse` size their batches by that estimate and refuse a beam whose one
sentence would need more than half of the memory available; an estimate below what the search
takes lets a wide beam run the machine out of memory instead. For each (vocabulary, beam, batch)
a fresh process builds the tiny preset with that vocabulary (random weights: no hypothesis ends
before the length limit, the most memory a search can take) and searches one batch of random
sources; the figure is the growth of its peak resident memory (ru_maxrss) over the search,
tracing included, next to the estimate for the batch. A ratio measured / estimated above 1 is an
estimate too low.

Usage: python benchmarks/search_memory.py [--vocab 1000,8000] [--beam 4,64,512,4096]
       [--batch 1,8] [--source-length 16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def measure(vocab: int, beam: int, batch: int, source_length: int) -> dict:
    """Peak RSS growth (bytes) of one search in this process, and the estimate for the batch."""
    import numpy as np
    import tensorflow as tf

    from vtx.config import preset
    from vtx.inference.decoding import DecodeOptions, search_bytes
    from vtx.inference.model_search import search_for
    from vtx.models import transformer

    config = preset("tiny", vocab_size=vocab)
    model = transformer.build(config)
    options = DecodeOptions(beam=beam)
    search = search_for(model, options)
    rng = np.random.default_rng(0)
    source = tf.constant(rng.integers(4, vocab, (batch, source_length)), tf.int32)
    before = _rss()
    search(source).tokens.numpy()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"measured": peak - before,
            "estimated": batch * search_bytes(options, config, source_length)}


def _rss() -> int:
    """Resident bytes now (and the peak is at least that: ru_maxrss only grows)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", default="1000,8000")
    parser.add_argument("--beam", default="4,64,512,4096")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--source-length", type=int, default=16)
    parser.add_argument("--one", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one, args.source_length)))
        return
    print(f"{_cpu()}, {os.cpu_count()} CPUs; tiny preset, random weights, sources of "
          f"{args.source_length} pieces")
    print(f"{'vocab':>6} {'beam':>6} {'batch':>5} {'measured MiB':>13} {'estimated MiB':>14} "
          f"{'ratio':>6}")
    for vocab in map(int, args.vocab.split(",")):
        for beam in map(int, args.beam.split(",")):
            for batch in map(int, args.batch.split(",")):
                run = subprocess.run([sys.executable, __file__, "--source-length",
                                      str(args.source_length), "--one", str(vocab), str(beam),
                                      str(batch)], capture_output=True, text=True, check=True)
                figures = json.loads(run.stdout.strip().splitlines()[-1])
                measured, estimated = figures["measured"], figures["estimated"]
                print(f"{vocab:>6} {beam:>6} {batch:>5} {measured / 2**20:>13.1f} "
                      f"{estimated / 2**20:>14.1f} {measured / estimated:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
