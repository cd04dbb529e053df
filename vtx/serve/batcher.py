"""Dynamic batching: the lines of concurrent requests searched together on one thread.

Jobs wait in a queue. The search's thread takes the oldest job and every other waiting job of the
same search settings, up to `max_tokens` source pieces, once they hold that many or the oldest
has waited `wait_s` (`--batch-wait-ms`), sorts their lines by length into vtx's padded batches
(`decoding.padded_batches`) and searches these one after the other, telling each job its
hypotheses as soon as its last line is searched. Each line keeps its index in its own request as its line id, so that a
request's hypotheses are those `vtx translate` gives for its lines alone, whatever shares the
batch (sampling's per-line seeds included; scores agree to the rounding of a batch's matrix
products). A request whose client went away is dropped before its search.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Callable

from vtx.inference.decoding import DecodeOptions, padded_batches
from vtx.inference.translator import Hypothesis, Translator
from vtx.serve.metrics import Metrics
from vtx.serve.requests import Job, RequestError

Done = Callable[[list[list[Hypothesis]] | BaseException], None]


class Translators:
    """A Translator per search settings met, the `size` most recently used kept; all share the
    models, their vocabulary and their traced searches (`translator.Compiled`, which keeps its
    own most recently used): settings that differ only in what a search takes at each call
    (lenpen, nbest, sampling's seed, temperature, top-k, top-p) trace nothing new."""

    def __init__(self, first: Translator, size: int = 8):
        self.first, self.size = first, size
        self._made: collections.OrderedDict[DecodeOptions, Translator] = \
            collections.OrderedDict({first.options: first})

    def get(self, options: DecodeOptions) -> Translator:
        if options in self._made:
            self._made.move_to_end(options)
            return self._made[options]
        translator = Translator(self.first.models, self.first.vocab, options, self.first.warn,
                                self.first.memory_budget, self.first.compiled)
        self._made[options] = translator
        if len(self._made) > self.size:
            self._made.popitem(last=False)
        return translator

    def traces(self) -> int:
        """Traces of the searches (and scorer, aligners) made so far."""
        return self.first.compiled.traces()


@dataclasses.dataclass(eq=False)
class Pending:
    """A job in the queue, and whom to tell of its hypotheses (or of its error)."""

    job: Job
    done: Done
    arrived: float  # time.monotonic()


class Batcher:
    """The queue of jobs and the thread that searches them (`start`, `submit`, `close`).

    Args:
        translators: the search of each job's settings.
        max_tokens: source pieces searched together at most (a job larger alone is searched
            alone, in the Translator's own batches).
        wait_s: how long the oldest job waits for others before its search starts.
        max_queue: lines that may wait; a job that would exceed it is refused (503).
    """

    def __init__(self, translators: Translators, max_tokens: int, wait_s: float,
                 max_queue: int, metrics: Metrics | None = None):
        self.translators, self.max_tokens, self.wait_s = translators, max_tokens, wait_s
        self.max_queue, self.metrics = max_queue, metrics or Metrics()
        self.metrics.search_traces = translators.traces
        self._pending: list[Pending] = []
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="vtx-serve-search", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def queued_lines(self) -> int:
        with self._changed:
            return sum(len(p.job.lines) for p in self._pending)

    def submit(self, job: Job, done: Done) -> Pending:
        """Queue `job`; `done` is called on the search's thread with its hypotheses per line.

        Raises:
            RequestError: 503 (with Retry-After) when the queue is full or the server stops.
        """
        with self._changed:
            if self._closing:
                raise RequestError("the server is stopping", 503, {"Retry-After": "1"})
            queued = sum(len(p.job.lines) for p in self._pending)
            if queued + len(job.lines) > self.max_queue:
                raise RequestError(f"the queue is full: {queued} lines wait, at most "
                                   f"{self.max_queue} (--max-queue); retry later", 503,
                                   {"Retry-After": "1"})
            pending = Pending(job, done, time.monotonic())
            self._pending.append(pending)
            self._changed.notify()
        return pending

    def cancel(self, pending: Pending) -> None:
        """Drop `pending` from the queue if its search has not started (its client went away):
        it takes no room in the queue nor in a batch."""
        with self._changed:
            if pending in self._pending:
                self._pending.remove(pending)
                self._changed.notify()

    def close(self) -> None:
        """Stop taking jobs; the thread searches those queued at once, then ends."""
        with self._changed:
            self._closing = True
            self._changed.notify()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            self._search(batch)

    def _take(self) -> list[Pending] | None:
        """The next jobs to search together (None: closed and nothing left), waiting for the
        oldest's batch to fill or its wait to end."""
        with self._changed:
            while True:
                if not self._pending:
                    if self._closing:
                        return None
                    self._changed.wait()
                    continue
                head = self._pending[0]
                same = [p for p in self._pending if p.job.options == head.job.options]
                left = head.arrived + self.wait_s - time.monotonic()
                if (self._closing or left <= 0
                        or sum(p.job.tokens for p in same) >= self.max_tokens):
                    break
                self._changed.wait(left)
            batch, tokens = [], 0
            for pending in same:
                if batch and tokens + pending.job.tokens > self.max_tokens:
                    break
                batch.append(pending)
                tokens += pending.job.tokens
            self._pending = [p for p in self._pending if p not in batch]
            return batch

    def _search(self, batch: list[Pending]) -> None:
        """Search the lines of `batch` in `vtx translate`'s padded batches, one after the other,
        and tell each job its hypotheses once its last line is searched; when a search fails,
        each job not yet told is searched alone, so that only the one at fault gets the error."""
        options = batch[0].job.options
        # (job, index of the line in it) of every line.
        lines = [(pending, index) for pending in batch for index in range(len(pending.job.lines))]
        results = {id(pending): [None] * len(pending.job.lines) for pending in batch}
        left = {id(pending): len(pending.job.lines) for pending in batch}
        told = set()
        try:
            translator = self.translators.get(options)
            encoded = [translator.vocab.encode(p.job.lines[i]) for p, i in lines]
            for rows, _ in padded_batches(encoded, options.max_tokens, pad_rows=False):
                group = [lines[row] for row in rows]
                searched = self._translate(translator, group, sum(len(encoded[r]) for r in rows))
                for (pending, index), hypotheses in zip(group, searched):
                    results[id(pending)][index] = hypotheses
                    left[id(pending)] -= 1
                    if not left[id(pending)]:
                        pending.done(results[id(pending)])
                        told.add(id(pending))
            for pending in batch:  # jobs of no line
                if id(pending) not in told:
                    pending.done([])
                    told.add(id(pending))
        except Exception as error:
            untold = [pending for pending in batch if id(pending) not in told]
            if len(batch) > 1:
                for pending in untold:
                    self._search([pending])
            else:
                for pending in untold:
                    pending.done(error)

    def _translate(self, translator: Translator, group: list[tuple[Pending, int]],
                   source_tokens: int) -> list[list[Hypothesis]]:
        """The hypotheses of the lines of `group` ((job, line index) pairs, of `source_tokens`
        pieces), each line's id its index in its job."""
        options = translator.options
        texts = [pending.job.lines[index] for pending, index in group]
        started = time.monotonic()
        results = translator.translate(
            texts, prefixes=[pending.job.prefixes[index] for pending, index in group]
            if options.prefix else None,
            constraints=[pending.job.constraints[index] for pending, index in group]
            if options.constraints else None,
            line_ids=[index for _, index in group])
        self.metrics.observe_batch(len(texts), source_tokens,
                                   sum(len(h[0].tokens) for h in results if h),
                                   time.monotonic() - started)
        return results
