"""Batches searched at once (`--search-threads`): TensorFlow's thread pools shared among them,
and an in-order map of jobs over that many threads.

A search step is many small operations, most too small for more than one core: while one
search waits on its host work or on an operation that leaves a core idle, another keeps the
cores busy. Each search's operations run on its share of the cores (intra-op threads), and
each search has one operation running at a time (inter-op threads), so that the searches do
not wait on each other's threads (`benchmarks/translate_speed.py --search-threads`,
`benchmarks/serve_load.py --search-threads`, docs/benchmarks.md).
"""

from __future__ import annotations

import collections
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

from vtx import stop

T = TypeVar("T")


def share_cores(searchers: int, subject: str, cores: int | None = None) -> str:
    """Give TensorFlow's thread pools to `searchers` searches at once: intra-op threads =
    `cores` (default: those this process may run on) // searchers, inter-op threads =
    searchers. Call before TensorFlow runs anything. Returns the log line saying so, `subject`
    (the command) first; where TensorFlow already ran in this process (a library user's, a
    test's), its pools stay as they are, and the line says so."""
    import tensorflow as tf

    cores = cores or len(os.sched_getaffinity(0))
    intra = max(1, cores // searchers)
    plural = "s" if searchers > 1 else ""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(searchers)
    except RuntimeError:
        return (f"{subject}: {searchers} search thread{plural}, on the thread pools "
                f"TensorFlow already has in this process")
    return f"{subject}: {searchers} search thread{plural}, each operation on {intra} of the " \
           f"{cores} cores"


def in_order(jobs: Iterable[Callable[[], T]], threads: int) -> Iterator[T]:
    """The result of each job, in the jobs' order, `threads` of them running at once (one: each
    called here, in turn). A job is taken from `jobs` only when a thread is about to be free, so
    that a check made while `jobs` yields (a stop asked for) holds back the jobs after it.

    The caller's thread waits through `stop.interruptible`: a signal's exception ends the wait,
    and the jobs still running are left to end (those not started never start). A job's
    exception is raised in its place; the jobs not started then never start.
    """
    if threads == 1:
        for job in jobs:
            yield job()
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="vtx-search")
    running: collections.deque[Future] = collections.deque()
    try:
        # One job queued past the threads, so that no thread waits while the oldest is waited on.
        for job in jobs:
            running.append(pool.submit(job))
            if len(running) > threads:
                yield stop.interruptible(running.popleft().result)
        while running:
            yield stop.interruptible(running.popleft().result)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
