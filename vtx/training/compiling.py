"""Compiling the update for every batch shape of a run before its first update, several shapes at
once on one device (`compile_workers`), each by an all-pad pass with Adam off.

`ShapeCompiler` does it; the update it runs is the engine's (`engine.py`), the persistent XLA
cache that keeps the programs `compile_cache.py`'s.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

import numpy as np
import tensorflow as tf

from vtx.config import PAD_ID
from vtx.data.batching import format_shape
from vtx.data.packing import PACKED_KEYS
from vtx.errors import TrainingError, disk_full, out_of_device_memory, tf_message
from vtx import compile_cache
from vtx.training.distribute import Topology, peer_failure
from vtx.training.engine import UpdateEngine


class ShapeCompiler:
    """Compiles the engine's update for a run's batch shapes (`compile_shapes`) with all-pad
    batches (`all_pad_batches`).

    Args:
        engine: the update to compile.
        topology: the workers (several agree after each shape whether to stop).
        log: receives a line a shape.
        clock: seconds from an arbitrary origin, for the lines' durations.
        stop_signal: the stop signal received so far, or None (the loop's handler sets it).
    """

    def __init__(self, engine: UpdateEngine, topology: Topology, log: Callable[[str], None],
                 clock: Callable[[], float], stop_signal: Callable[[], int | None]):
        self.engine, self.config = engine, engine.config
        self.topology, self.collectives = topology, engine.collectives
        self.log, self.clock, self.stop_signal = log, clock, stop_signal
        self.compile_failed = threading.Event()  # a shape's pass failed: queued ones start none

    def compile_shapes(self, shapes: list[tuple[int, int, int]], packed: bool = False) -> None:
        """Compile the update for every (rows, source length, target length) batch shape now,
        one progress line each: an all-pad batch of that shape runs through the whole update
        with Adam switched off (it adds nothing to the accumulators, which are cleared after).
        The runs advance every dropout layer's seed (a non-trainable model variable), so the
        model's non-trainable variables are put back after: a run, and a resumed one, draw the
        same dropout masks as without compiling first.

        `packed`: the run trains on packed rows (`vtx.data.packing`), whose batches hold segment
        ids and positions too.

        XLA compiles a program on one CPU core, so on one replica several shapes are compiled at
        once (`compile_workers`); their all-pad runs then share the device's memory, and a shape
        whose run did not fit beside the others is run again alone (its program is compiled
        by then). Several replicas compile one shape at a time: each shape's pass ends in
        collectives, which concurrent passes could enter in different orders.

        A stop signal (`fit`'s handler) ends the compiling when the shapes under way are done:
        the shapes not started by then are left (several workers agree after each shape). So does
        a pass that fails other than out of memory, whose error is then raised.
        """
        workers = compile_workers(self.config.compile_workers, len(shapes),
                                  self.engine.strategy.num_replicas_in_sync)
        if shapes:  # before the passes, which may run at once (the first would trace alone)
            self.engine.trace_for_any_shape(self.all_pad_batches(shapes[0], packed))
        started, done, crowded = self.clock(), 0, []
        seeds = self.engine.random_state()

        def report(shape, seconds, note=""):
            nonlocal done
            done += 1
            self.log(f"compiled the update for batch shape {done}/{len(shapes)} "
                     f"({format_shape(shape)}){note} in {seconds:.1f} s")

        if workers == 1:
            for shape in shapes:
                report(shape, self._compile_pass(shape, packed))
                if self.collectives.any_worker(self.stop_signal() is not None):
                    break
        else:
            self.log(f"compiling the update for {len(shapes)} batch shapes, {workers} at a time")

            failed = self.compile_failed
            failed.clear()

            def compile_unless_stopped(shape) -> float | None:  # one worker: none to agree with
                if self.stop_signal() is not None or failed.is_set():
                    return None
                try:
                    return self._compile_pass(shape, packed, alone=False)
                except tf.errors.OpError as error:
                    if out_of_device_memory(error):
                        raise _Crowded() from error
                    failed.set()  # the queued shapes start no pass: the error surfaces now
                    raise self._compile_error(shape, error) from error
                except BaseException:
                    failed.set()
                    raise

            with ThreadPoolExecutor(workers) as pool:
                passes = {pool.submit(compile_unless_stopped, shape): shape for shape in shapes}
                for finished in as_completed(passes):
                    try:
                        seconds = finished.result()
                    except _Crowded:
                        crowded.append(passes[finished])
                        continue
                    if seconds is not None:
                        report(passes[finished], seconds)
            for shape in crowded:  # compiled, but its run did not fit beside the others
                if self.stop_signal() is None:
                    report(shape, self._compile_pass(shape, packed), ", run again alone (out "
                           "of memory beside the others)")
        self.engine.reset()
        self.engine.restore_random_state(seeds)
        signum = self.stop_signal()
        by = f"signal {signum}" if signum else "a signal to another worker"
        left = f": stopped by {by}, {len(shapes) - done} of {len(shapes)} left" if (
            done < len(shapes)) else ""
        self.log(f"compiled {done} batch shapes in {self.clock() - started:.1f} s "
                 f"({workers} at a time){left}")

    def all_pad_batches(self, shape: tuple[int, int, int], packed: bool = False):
        """Batches of (rows, source length, target length) holding only padding, one per local
        replica (packed rows' when `packed`): they weigh nothing, so running the update on them
        compiles it and changes nothing (with Adam off)."""
        batch = _all_pad_batch(shape, packed)
        return self.collectives.per_replica([self.engine.place_batch(batch, replica) for replica
                                             in range(self.topology.local_replicas)])

    def _compile_pass(self, shape: tuple[int, int, int], packed: bool,
                      alone: bool = True) -> float:
        """One all-pad update of `shape` with Adam off; its seconds.

        Raises:
            TrainingError: when the pass ran `alone`, a TensorFlow error said in vtx's terms
                (`_compile_error`); beside other passes TensorFlow's own, for the caller to
                judge (out of memory: run it again alone).
        """
        started = self.clock()
        batches = self.all_pad_batches(shape, packed)
        try:
            self.engine.run_without_adam(batches)
        except tf.errors.OpError as error:
            if not alone or peer_failure(error, self.topology.num_workers):
                raise  # to run it again alone; another worker gone: fit says so
            raise self._compile_error(shape, error) from error
        return self.clock() - started

    def _compile_error(self, shape: tuple[int, int, int],
                       error: tf.errors.OpError) -> TrainingError:
        """A compile pass's TensorFlow `error` as the user can act on it: out of the device's
        memory (what to lower), a full disk under the persistent XLA cache, or XLA failing on
        this shape (the cache, then --no-jit)."""
        if out_of_device_memory(error):
            return self.engine.out_of_memory([_all_pad_batch(shape, False)])
        cache = compile_cache.current_directory()
        what = (f"compiling the update for batch shape {format_shape(shape)} failed "
                f"({type(error).__name__}: {tf_message(error, lines=1)})")
        if disk_full(error):
            return TrainingError(f"{what}: the disk is full; free space"
                                 f"{f' under the XLA cache {cache}' if cache else ''}, or point "
                                 f"--xla-cache-dir elsewhere")
        remedy = (f"if the XLA cache {cache} was written by another machine or TensorFlow, or is "
                  f"damaged, remove it (or give another --xla-cache-dir); " if cache else "")
        return TrainingError(f"{what}; {remedy}--no-jit trains without XLA")


class _Crowded(Exception):
    """A compile pass ran out of device memory beside the others: run it again alone."""


def _all_pad_batch(shape: tuple[int, int, int], packed: bool) -> dict:
    """One batch of (rows, source length, target length) holding only padding; with the packed
    batches' segment ids and positions (0 on padding) when `packed`."""
    rows, source, target = shape
    target_pad = np.full((rows, target), PAD_ID, np.int32)
    batch = {"source": np.full((rows, source), PAD_ID, np.int32),
             "target_in": target_pad, "target_out": target_pad}
    if packed:
        batch.update({key: np.zeros((rows, source if key.startswith("source") else target),
                                    np.int32) for key in PACKED_KEYS})
    return batch


def compile_workers(requested: int, shapes: int, replicas: int,
                    cpus: int | None = None) -> int:
    """How many batch shapes `Trainer.compile_shapes` compiles at once: `requested` when > 0,
    else half the CPU cores (the other half feed the compilers and the device), at least 1;
    never more than there are shapes, and 1 with several replicas (see compile_shapes)."""
    if replicas > 1 or shapes <= 1:
        return 1
    if requested <= 0:
        requested = max(1, (cpus or os.cpu_count() or 1) // 2)
    return min(requested, shapes)
