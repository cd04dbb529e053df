"""`vtx.inference.threads`: the in-order map of jobs over threads, and the thread pools'
share."""

import threading
import time

import pytest

from vtx.inference.threads import in_order, share_cores


def test_jobs_run_at_once_and_come_back_in_their_order():
    """Three threads: the three jobs meet at a barrier (so they ran at once), and the slowest
    first still comes back first."""
    barrier = threading.Barrier(3, timeout=30)

    def job(index: int):
        def run():
            barrier.wait()
            time.sleep(0.2 - 0.1 * index)
            return index, threading.current_thread().name
        return run

    results = list(in_order((job(i) for i in range(3)), threads=3))
    assert [index for index, _ in results] == [0, 1, 2]
    assert len({name for _, name in results}) == 3
    assert all(name.startswith("vtx-search") for _, name in results)


def test_one_thread_runs_each_job_on_the_callers_thread_in_turn():
    names = list(in_order((lambda: threading.current_thread().name for _ in range(3)), 1))
    assert names == [threading.current_thread().name] * 3


def test_a_jobs_error_is_raised_in_its_place_and_later_jobs_are_not_taken():
    taken = []

    def jobs():
        for index in range(10):
            taken.append(index)
            yield (lambda: 1 / 0) if index == 1 else (lambda: "fine")

    results = in_order(jobs(), threads=2)
    assert next(results) == "fine"
    with pytest.raises(ZeroDivisionError):
        next(results)
    assert len(taken) <= 4  # at most threads + 1 past the one that failed's predecessor


def test_pools_of_a_process_where_tensorflow_ran_stay_and_the_line_says_so():
    import tensorflow as tf

    tf.constant(1.0) + 1.0  # TensorFlow runs: its pools are fixed
    # Pools other than this process's (a test before may have set the same ones: no change).
    searchers = max(tf.config.threading.get_inter_op_parallelism_threads(), 1) + 1
    line = share_cores(searchers, "vtx translate")
    assert line == (f"vtx translate: {searchers} search threads, on the thread pools "
                    f"TensorFlow already has in this process")


def test_before_tensorflow_runs_each_search_gets_its_share_of_the_cores():
    """In a fresh process: 4 cores over 2 searches, 2 intra-op threads each, 2 inter-op."""
    import subprocess
    import sys

    code = ("from vtx.inference.threads import share_cores\n"
            "print(share_cores(2, 'vtx parse', cores=4))\n"
            "import tensorflow as tf\n"
            "print(tf.config.threading.get_intra_op_parallelism_threads(),"
            " tf.config.threading.get_inter_op_parallelism_threads())\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "vtx parse: 2 search threads, each operation on 2 of the 4 cores", "2 2"]


def test_a_signal_ends_the_wait_for_the_jobs_and_those_not_started_never_start():
    """Under the command line's SIGTERM handler (here one raising `Stopped`), a signal ends
    the caller's wait at once while two jobs block in TensorFlow; the jobs queued behind them
    never start once they return."""
    import os
    import signal

    import tensorflow as tf

    from vtx import stop

    class Stopped(Exception):
        pass

    def handler(signum, frame):
        raise Stopped

    queue = tf.queue.FIFOQueue(4, tf.int32)
    started = []

    def job(index: int):
        def run():
            started.append(index)
            return int(queue.dequeue())
        return run

    previous = signal.signal(signal.SIGTERM, handler)
    stop.watch(handler)
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(Stopped):
            list(in_order((job(i) for i in range(6)), threads=2))
        assert stop.abandoned()
    finally:
        stop.watch(None)
        signal.signal(signal.SIGTERM, previous)
        for _ in range(4):
            queue.enqueue(1)
    for _ in range(1200):
        if not stop.abandoned():
            break
        time.sleep(0.05)
    assert not stop.abandoned()
    time.sleep(0.2)
    assert sorted(started) == [0, 1]
