import threading
import time

import pytest

from vtx.training.stream import BatchStream, PrefetchedStream


def labelled_epochs(epoch, skip):
    """Three batches per epoch, each naming (epoch, index)."""
    return [(epoch, index) for index in range(3)][skip:]


def test_stream_crosses_epochs_and_counts_its_position():
    stream = BatchStream(labelled_epochs)
    assert [stream.next() for _ in range(7)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2),
                                                 (2, 0)]
    assert stream.position == (2, 1)


def test_stream_resumed_at_a_position_continues_the_same_sequence():
    resumed = BatchStream(labelled_epochs, epoch=1, offset=2)
    assert [resumed.next() for _ in range(3)] == [(1, 2), (2, 0), (2, 1)]
    assert resumed.position == (2, 2)


class SlowToTearDown:
    """An epoch's batches whose teardown blocks until the test lets it go (as a tf.data iterator
    that ran beside training can, for tens of seconds)."""

    let_go = threading.Event()
    torn_down_on_main_thread: list[bool] = []

    def __init__(self, batches):
        self.batches = iter(batches)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.batches)

    def __del__(self):
        self.torn_down_on_main_thread.append(threading.current_thread() is threading.main_thread())
        self.let_go.wait(timeout=60)


def test_the_next_epoch_starts_without_waiting_for_the_last_one_to_be_torn_down():
    stream = BatchStream(lambda epoch, skip: SlowToTearDown(labelled_epochs(epoch, skip)))
    assert [stream.next() for _ in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    SlowToTearDown.let_go.set()  # only now: on the main thread next() would have waited 60 s
    deadline = time.monotonic() + 30
    while not SlowToTearDown.torn_down_on_main_thread and time.monotonic() < deadline:
        time.sleep(0.01)
    assert SlowToTearDown.torn_down_on_main_thread == [False]


def test_closing_tears_the_epoch_down_off_the_caller_and_resumes_at_the_same_batch():
    """`fit` closes its stream at the end of training: its live iterator must not block the
    caller, and a stream used again goes on where it was."""
    SlowToTearDown.let_go.clear()
    SlowToTearDown.torn_down_on_main_thread.clear()
    stream = BatchStream(lambda epoch, skip: SlowToTearDown(labelled_epochs(epoch, skip)))
    assert [stream.next() for _ in range(2)] == [(0, 0), (0, 1)]
    stream.close()  # on the main thread this would have waited 60 s
    stream.close()  # nothing left to close
    assert stream.next() == (0, 2) and stream.position == (0, 3)
    SlowToTearDown.let_go.set()
    deadline = time.monotonic() + 30
    while not SlowToTearDown.torn_down_on_main_thread and time.monotonic() < deadline:
        time.sleep(0.01)
    assert SlowToTearDown.torn_down_on_main_thread == [False]


def placed(batch, index):
    return batch, index


def test_prefetched_batches_are_the_streams_in_order_each_placed_by_its_index():
    stream = PrefetchedStream(BatchStream(labelled_epochs), placed, depth=2)
    try:
        assert [stream.next() for _ in range(5)] == [((0, 0), 0), ((0, 1), 1), ((0, 2), 2),
                                                     ((1, 0), 3), ((1, 1), 4)]
        assert stream.position == (1, 2)  # of the batches handed out, not of those read ahead
    finally:
        stream.close()


def test_a_closed_prefetched_stream_drops_what_it_read_ahead_and_goes_on_at_its_position():
    """`fit` saves the position of the batches trained on; what the thread read beyond them is
    read again by the run that resumes there, so a closed stream must rewind to it."""
    read = []

    def epochs(epoch, skip):
        for batch in labelled_epochs(epoch, skip):
            read.append(batch)
            yield batch

    fifth_placed = threading.Event()

    def place(batch, index):
        if index == 4:  # read (the inner stream moved past it), and then placed
            fifth_placed.set()
        return placed(batch, index)

    inner = BatchStream(epochs)
    stream = PrefetchedStream(inner, place, depth=3)
    assert stream.next() == ((0, 0), 0)
    # 3 queued and the fifth waiting to be: the thread reads no sixth while the queue is full.
    assert fifth_placed.wait(timeout=60)
    assert len(read) == 5 and inner.position == (0, 0)  # the thread reads a copy of it
    stream.close()
    assert stream.position == inner.position == (0, 1)
    assert [stream.next() for _ in range(3)] == [((0, 1), 1), ((0, 2), 2), ((1, 0), 3)]
    stream.close()
    assert BatchStream(labelled_epochs, *stream.position).next() == (1, 1)


def test_an_error_reading_ahead_is_raised_by_next_after_the_batches_before_it():
    def epochs(epoch, skip):
        yield (epoch, 0)
        raise ValueError("shard 3 is damaged")

    stream = PrefetchedStream(BatchStream(epochs), placed, depth=2)
    assert stream.next() == ((0, 0), 0)
    with pytest.raises(ValueError, match="shard 3 is damaged"):
        stream.next()
    assert stream.position == (0, 1)
    stream.close()  # the thread is over: nothing left to stop


def prefetch_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "vtx-prefetch"]


def test_closing_a_prefetched_stream_stops_its_thread():
    stream = PrefetchedStream(BatchStream(labelled_epochs), placed, depth=1)
    stream.next()
    stream.close()
    for thread in prefetch_threads():  # close waits a bounded time only: not counted on here
        thread.join(timeout=60)
    assert not prefetch_threads()


@pytest.mark.parametrize("busy", ["building an epoch", "placing a batch"])
def test_closing_does_not_wait_for_a_busy_read_ahead_which_then_changes_nothing(busy):
    """Building an epoch's iterator takes seconds on a WMT-size corpus, and `fit` closes its
    stream with its SIGINT handler still installed: close waited for it (here 60 s). The thread
    left to end alone must not move the stream that close set back to `position`."""
    let_go, waiting = threading.Event(), threading.Event()
    still_waiting = []

    def hold():
        waiting.set()
        still_waiting.append(True)
        let_go.wait(timeout=60)
        still_waiting.append(False)

    def epochs(epoch, skip):
        if busy == "building an epoch" and epoch == 1 and not let_go.is_set():
            hold()
        return labelled_epochs(epoch, skip)

    def place(batch, index):
        if busy == "placing a batch" and index == 3 and not let_go.is_set():
            hold()
        return placed(batch, index)

    inner = BatchStream(epochs)
    stream = PrefetchedStream(inner, place, depth=3)
    assert stream.next() == ((0, 0), 0)
    assert waiting.wait(timeout=60)  # 3 batches read ahead, the fourth under way
    stream.close()
    assert still_waiting == [True]  # close returned while the thread was busy
    let_go.set()
    for thread in prefetch_threads():
        thread.join(timeout=60)
    assert not prefetch_threads() and stream.position == inner.position == (0, 1)
    assert [stream.next() for _ in range(3)] == [((0, 1), 1), ((0, 2), 2), ((1, 0), 3)]
    stream.close()
