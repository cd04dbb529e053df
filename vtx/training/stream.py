"""An endless, resumable stream of training batches: epoch after epoch, with its position."""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator

# How long `PrefetchedStream.close` waits for the batch under way: placing or packing one batch
# ends well within it; building an epoch's iterator (seconds on a WMT-size corpus) may not, and
# is then left to end alone, its result dropped.
CLOSE_WAIT_SECONDS = 1.0


class BatchStream:
    """Yields batches of epoch e, then of epoch e + 1, ... and knows where it is.

    Args:
        make_epoch: `(epoch, skip_batches) -> iterable of batches` for this worker's shard; the
            same arguments must give the same batches (seeded shuffling), which is what makes a
            restored position exact.
        epoch, offset: position to start from: the epoch, and batches of it already consumed.
    """

    def __init__(self, make_epoch: Callable[[int, int], Iterable], epoch: int = 0, offset: int = 0):
        self._make_epoch = make_epoch
        self.epoch, self.offset = epoch, offset
        self._iterator: Iterator | None = None

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batches of that epoch consumed)."""
        return self.epoch, self.offset

    def copy(self) -> BatchStream:
        """A stream of the same epochs from this one's position; each moves apart from the
        other."""
        return BatchStream(self._make_epoch, *self.position)

    def next(self):
        """The next batch; moves to the next epoch when one ends.

        Raises:
            RuntimeError: an epoch yields no batch at all.
        """
        for _ in range(2):
            if self._iterator is None:
                self._iterator = iter(self._make_epoch(self.epoch, self.offset))
            batch = next(self._iterator, None)
            if batch is not None:
                self.offset += 1
                return batch
            if self.offset == 0:
                raise RuntimeError(f"epoch {self.epoch} of the training data yields no batch")
            self.epoch, self.offset = self.epoch + 1, 0
            self.close()
        raise RuntimeError(f"epoch {self.epoch} of the training data yields no batch")

    def close(self) -> None:
        """Drop the current epoch's iterator on another thread (the next `next` starts a new one
        at the same position): tearing down a tf.data iterator that ran beside training can block
        for tens of seconds (the cause is inside TensorFlow), at an epoch's end and at the end of
        training, and neither the loop nor the caller of `fit` must wait for it."""
        if self._iterator is None:
            return
        holder, self._iterator = [self._iterator], None  # the iterator's only reference
        threading.Thread(target=holder.clear, name="vtx-epoch-teardown", daemon=True).start()


class PrefetchedStream:
    """A `BatchStream` read ahead on a thread of its own, up to `depth` batches ready and one
    more under way, each batch handed out as `place(batch, k)` made it (k: the batch's index
    among those handed out, from 0): the data's work (reading, packing) and the copies to the
    devices are done while the device trains, instead of on the training thread between
    updates, where an update launched with host data has it copied as part of the launch (on a
    GPU, by our reading of TensorFlow, after the work queued before it).

    It has `BatchStream`'s interface; `position` counts the batches handed out, not those read
    ahead, so a checkpoint names the next batch to train on. The thread reads a copy of the
    stream (`BatchStream.copy`) from `position`; `close` stops it, drops the batches read ahead
    and sets the stream to `position`: used again, it goes on there.
    """

    def __init__(self, stream: BatchStream, place: Callable[[object, int], object],
                 depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be positive, got {depth}")
        self._stream, self._place, self._depth = stream, place, depth
        self.position = stream.position
        self._handed = 0
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()

    def next(self):
        """The next batch, placed; an error of reading or placing it is raised here.

        Raises:
            RuntimeError: an epoch yields no batch at all (as `BatchStream.next`).
        """
        if self._thread is None:
            self._start()
        kind, value, position = self._queue.get()
        if kind == "error":
            self.close()  # the thread is over: a next call reads again from `position`
            raise value
        self.position = position
        self._handed += 1
        return value

    def _start(self) -> None:
        self._stop = threading.Event()
        self._queue = queue.Queue(self._depth)
        # Its own copy, queue and stop event: a thread still busy when `close` gave up waiting
        # for it moves no stream and fills no queue that is read again.
        self._thread = threading.Thread(target=self._read_ahead,
                                        args=(self._stream.copy(), self._stop, self._queue,
                                              self._handed),
                                        name="vtx-prefetch", daemon=True)
        self._thread.start()

    def _read_ahead(self, reader: BatchStream, stop: threading.Event, ahead: queue.Queue,
                    index: int) -> None:
        def put(item) -> bool:  # False: stopped while the queue was full
            while not stop.is_set():
                try:
                    ahead.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            while not stop.is_set():
                batch = reader.next()
                if stop.is_set():  # closed meanwhile: not placed on a device for nothing
                    return
                batch = self._place(batch, index)
                index += 1
                if not put(("batch", batch, reader.position)):
                    return
        except BaseException as error:  # noqa: BLE001 -- raised on the consumer's thread
            put(("error", error, None))
        finally:
            reader.close()  # its epoch's iterator torn down off this thread too

    def close(self) -> None:
        """Stop reading ahead, drop what was read ahead and set the stream to `position`. Waits
        `CLOSE_WAIT_SECONDS` at most for the batch under way: a thread still busy after it (an
        epoch's iterator being built) ends alone and drops what it made. The epochs' iterators
        are torn down off the caller (`BatchStream.close`)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(CLOSE_WAIT_SECONDS)
            self._thread = self._queue = None
        self._stream.epoch, self._stream.offset = self.position
        self._stream.close()
