"""`vtx.stop`: a signal ends the wait for a long TensorFlow call at once."""

import os
import signal
import threading

import pytest
import tensorflow as tf

from vtx import stop


class Stopped(Exception):
    pass


@pytest.fixture
def watched_sigterm():
    """SIGTERM raising `Stopped`, as the command line's handler raises SystemExit."""
    def handler(signum, frame):
        raise Stopped

    previous = signal.signal(signal.SIGTERM, handler)
    stop.watch(handler)
    yield
    stop.watch(None)
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_ends_the_wait_for_a_tensorflow_call_that_does_not_return(watched_sigterm):
    """A TensorFlow op blocked in C++ (as a wide beam's search of minutes) held the signal's
    handler until it returned: a dequeue from an empty queue returns only when fed."""
    queue = tf.queue.FIFOQueue(1, tf.int32)
    fed = threading.Event()

    def feed():  # the op's end, so that the call returns even where the wait is not cut short
        fed.set()
        queue.enqueue(7)

    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    feeder = threading.Timer(30, feed)
    feeder.start()
    try:
        with pytest.raises(Stopped):
            stop.interruptible(queue.dequeue)
        assert not fed.is_set()  # ended by the signal, not by the op's return
        assert stop.abandoned()
    finally:
        feeder.cancel()
        if not fed.is_set():
            queue.enqueue(7)
    returned = threading.Event()
    for _ in range(1200):  # the worker's call returns once fed
        if not stop.abandoned():
            break
        returned.wait(0.05)
    assert not stop.abandoned()


def test_a_call_returns_its_value_and_raises_its_error(watched_sigterm):
    assert int(stop.interruptible(tf.add, 2, 3)) == 5
    with pytest.raises(tf.errors.InvalidArgumentError):
        stop.interruptible(tf.debugging.assert_positive, tf.constant([-1]))
    assert not stop.abandoned()


def test_without_the_command_lines_handler_a_call_runs_on_the_callers_thread():
    """A library user's process (or `vtx train`, with its own handler): the caller's
    thread-local scopes hold."""
    caller = threading.get_ident()
    assert stop.interruptible(threading.get_ident) == caller
