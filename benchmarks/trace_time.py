"""What tracing costs at a run's start, with and without AutoGraph.

Every `vtx train` traces its update (and its validation), every `vtx translate` and validation by
BLEU or F1 its search, once per process, before the first batch. vtx traces them without AutoGraph
(`tf.function(..., autograph=False)`): its graph code holds no Python control flow on tensors
(the searches call `tf.while_loop` themselves), and AutoGraph parses and rewrites the source of
each traced function and of every function it calls before tracing it. This times both ways side
by side: each trace in a fresh process (AutoGraph caches what it converted within a process, and a
run pays its first conversion), the two kinds alternated:

- update: the update's trace for batches of any shape (`Trainer._trace_for_any_shape`), against
  the same function traced with AutoGraph (TensorFlow's default, vtx's before);
- search: the beam search's trace for any batch (`make_search_fn`, beam 4), likewise.

    python benchmarks/trace_time.py --arch quickstart --runs 5
    python benchmarks/trace_time.py --arch base --runs 3

Figures, not a test: run it with nothing else on the machine, and name the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from train_throughput import model_config_for

KINDS = ("update", "search")


def child(arch: str, autograph: bool) -> dict:
    """Seconds to trace each of KINDS in this process, with or without AutoGraph."""
    import tensorflow as tf

    from vtx.config import TrainConfig
    from vtx.inference.model_search import make_search_fn
    from vtx.training import trainer as trainer_module

    seconds = {}
    with tempfile.TemporaryDirectory() as save_dir:  # Trainer needs one; nothing is saved
        trainer = trainer_module.Trainer(
            model_config_for(arch), TrainConfig(validate_interval_steps=0,
                                                save_interval_minutes=0, precision="float32"),
            save_dir, strategy=tf.distribute.MirroredStrategy(["/cpu:0"]), log=lambda _: None)
        batches = trainer.all_pad_batches((8, 16, 16))
        started = time.perf_counter()
        if autograph:
            spec = tf.nest.map_structure(trainer_module._any_shape, batches)
            tf.function(trainer._update_impl, reduce_retracing=True).get_concrete_function(
                spec, tf.TensorSpec([], tf.bool))
        else:  # the Trainer's own trace
            trainer._trace_for_any_shape(batches)
        seconds["update"] = time.perf_counter() - started

        search = make_search_fn(trainer.model, beam_size=4)
        started = time.perf_counter()
        if autograph:
            search = tf.function(search.python_function, input_signature=search.input_signature)
        search.get_concrete_function()
        seconds["search"] = time.perf_counter() - started
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="quickstart", help="a preset or a train_throughput "
                        "shape name (default: quickstart)")
    parser.add_argument("--runs", type=int, default=5, help="processes of each kind")
    parser.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.arch, args.child == "on")))
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(f"{args.arch}, float32 on /cpu:0: seconds to trace, each in a fresh process, "
          f"AutoGraph on and off alternated ({args.runs} runs each)", flush=True)
    seconds = {"on": [], "off": []}
    for run in range(args.runs):
        for mode in ("on", "off"):
            result = subprocess.run([sys.executable, __file__, "--arch", args.arch,
                                     "--child", mode], capture_output=True, text=True)
            if result.returncode:
                sys.exit(f"the {mode} run failed:\n{result.stderr[-3000:]}")
            seconds[mode].append(json.loads(result.stdout.splitlines()[-1]))
            times = ", ".join(f"{kind} {seconds[mode][-1][kind]:.2f} s" for kind in KINDS)
            print(f"run {run + 1}, AutoGraph {mode}: {times}", flush=True)
    for kind in KINDS:
        medians = {mode: statistics.median(run[kind] for run in seconds[mode])
                   for mode in seconds}
        print(f"{kind}: median {medians['on']:.2f} s with AutoGraph, {medians['off']:.2f} s "
              f"without; on / off: {medians['on'] / medians['off']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
