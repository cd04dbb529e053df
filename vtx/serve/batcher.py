"""Dynamic batching: the lines of concurrent requests searched together on one thread, in turns.

Jobs wait in a queue. The search's thread takes the oldest job and every other waiting job of the
same search settings once they hold `max_tokens` source pieces or the oldest has waited `wait_s`
(`--batch-wait-ms`): that is a turn. A turn holds at most `max_tokens` source pieces, and as many
hypotheses of them (pieces times beam, or samples) as `max_tokens` pieces at the server's
default beam, so a job larger than that is searched over several turns, and between two of its
turns every job queued behind it has its own: no request holds the search for longer than a
turn, whatever it asks.
A turn's lines are sorted by length into vtx's padded batches (`decoding.padded_batches`) and
searched one after the other, each job told its hypotheses as soon as its last line is searched.
`searchers` threads take turns at once (`--search-threads`): while one waits on a search's
operations, the other's turn has the cores its host work leaves idle.
Turns are shared among clients (a request's key, or its address: `vtx.serve.access`), not
among requests, by start-time fair queueing over the cost of `vtx.serve.requests`: each client's
searches end at a tag on a virtual clock (its last tag, or the clock where that is past, plus
what its lines cost), and the next turn is led by the oldest job of the client of the least tag,
the clock moving to it. A client that cost much owes it when it comes back, however long the
queue was empty; one that was away gets no credit for it. A client whose turn is being searched,
or ended less than ANTICIPATE_S ago, is waited for (that long at most) before a turn is led by a
client whose tag is past its by more than AHEAD_COSTS of its last requests: clients that send
their next request as soon as the last is answered are away for a moment after every answer,
and a search thread free in that moment would otherwise hand it to whoever else waits. So a
client whose requests cost much, or who sends many, takes no more of the search than any other
while others want it, and all of it while none does.
Each line keeps its index in its own request as its line id, so that a request's hypotheses are
those `vtx translate` gives for its lines alone, whatever shares the batch (sampling's per-line
seeds included; scores agree to the rounding of a batch's matrix products). A job whose client
went away, or whose deadline passed, is dropped between batches; a stop searches what is queued
until its drain ends, then tells the rest that the server stopped.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import threading
import time
from typing import Callable

from vtx.inference.decoding import DecodeOptions, padded_batches
from vtx.inference.translator import Hypothesis, Translator
from vtx.serve.metrics import Metrics
from vtx.serve.requests import Job, RequestError

Done = Callable[[list[list[Hypothesis]] | BaseException], None]

# How long a client is waited for after its turn ends (module docstring): its next request's
# way through the server's loop and checks, under load, on loopback or a local network.
ANTICIPATE_S = 0.1
# How far ahead a client's tag must be, in its rival's last turn's costs, for a turn it would
# lead to wait for the rival: clients of like requests (1 to 5 lines, say) pass each other by
# less.
AHEAD_COSTS = 16


class Translators:
    """A Translator per search settings met, the `size` most recently used kept; all share the
    models, their vocabulary and their traced searches (`translator.Compiled`, which keeps its
    own most recently used): settings that differ only in what a search takes at each call
    (lenpen, nbest, sampling's seed, temperature, top-k, top-p) trace nothing new."""

    def __init__(self, first: Translator, size: int = 8):
        self.first, self.size = first, size
        self._lock = threading.Lock()  # the search threads ask at once
        self._made: collections.OrderedDict[DecodeOptions, Translator] = \
            collections.OrderedDict({first.options: first})

    def get(self, options: DecodeOptions) -> Translator:
        with self._lock:
            if options in self._made:
                self._made.move_to_end(options)
                return self._made[options]
            translator = Translator(self.first.models, self.first.vocab, options,
                                    self.first.warn, self.first.memory_budget,
                                    self.first.compiled)
            self._made[options] = translator
            if len(self._made) > self.size:
                self._made.popitem(last=False)
            return translator

    def traces(self) -> int:
        """Traces of the searches (and scorer, aligners) made so far."""
        return self.first.compiled.traces()


@dataclasses.dataclass(eq=False)
class Pending:
    """A job in the queue, whom to tell of its hypotheses (or of its error), and how far its
    lines have been taken into turns."""

    job: Job
    done: Done
    arrived: float  # time.monotonic(); 0 once a turn took some of its lines
    client: str = ""  # whose turns it takes: its key, or its address
    taken: int = 0  # its lines [0, taken) are searched or being searched
    results: list = dataclasses.field(default_factory=list)
    dropped: bool = False  # its client went away or its deadline passed: tell it nothing
    told: bool = False  # told its hypotheses or its error (once, whichever thread ends it)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.job.lines)

    @property
    def waiting(self) -> int:
        return len(self.job.lines) - self.taken


@dataclasses.dataclass(eq=False)
class Turn:
    """The lines [start, stop) of each of some jobs, searched together."""

    parts: list[tuple[Pending, int, int]]

    def lines(self) -> list[tuple[Pending, int]]:
        return [(pending, index) for pending, start, stop in self.parts
                for index in range(start, stop)]


class Batcher:
    """The queue of jobs and the threads that search them (`start`, `submit`, `close`).

    Args:
        translators: the search of each job's settings.
        max_tokens: source pieces searched in one turn at most (a line larger alone is searched
            alone, in the Translator's own batches).
        wait_s: how long the oldest job waits for others before its search starts.
        max_queue: lines that may wait; a job that would exceed it is refused (503).
        max_queue_cost: the cost that may wait (`vtx.serve.requests`); likewise.
        turn_rows: the hypotheses a line searches at once (beam, or samples) times its source
            pieces, over a turn's lines, at most (at least one line); None: no such bound.
        searchers: threads that search turns at once.
    """

    def __init__(self, translators: Translators, max_tokens: int, wait_s: float,
                 max_queue: int, metrics: Metrics | None = None,
                 max_queue_cost: int | None = None, turn_rows: int | None = None,
                 searchers: int = 1):
        self.translators, self.max_tokens, self.wait_s = translators, max_tokens, wait_s
        self.max_queue, self.metrics = max_queue, metrics or Metrics()
        self.max_queue_cost, self.turn_rows = max_queue_cost, turn_rows
        self.metrics.search_traces = translators.traces
        self._pending: list[Pending] = []
        # Each client's tag: where its searches so far end on the virtual clock `_clock` (the
        # start of the latest turn's leader); only tags past the clock are kept.
        self._tags: dict[str, int] = {}
        self._clock = 0
        # The clients of the turns being searched (how many each) and of those ended less than
        # ANTICIPATE_S ago: when the last ended (inf while one runs), the cost of its last part.
        self._running: collections.Counter[str] = collections.Counter()
        self._recent: dict[str, tuple[float, int]] = {}
        self._frozen_traces = translators.traces()
        self._changed = threading.Condition()
        self._closing = False
        self._drain_until = float("inf")  # time.monotonic() past which a stop drops the queue
        if searchers < 1:
            raise ValueError(f"searchers must be >= 1, got {searchers}")
        self._threads = [threading.Thread(target=self._run, name=f"vtx-serve-search-{index}",
                                          daemon=True) for index in range(searchers)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def queued_lines(self) -> int:
        with self._changed:
            return sum(p.waiting for p in self._pending)

    def _queued_cost(self) -> int:
        return sum(sum(p.job.line_costs[p.taken:]) for p in self._pending)

    def submit(self, job: Job, done: Done, client: str = "") -> Pending:
        """Queue `job` of `client` (its key or address: whose share of the turns it takes);
        `done` is called on the search's thread with its hypotheses per line.

        Raises:
            RequestError: 503 (with Retry-After) when the queue is full or the server stops.
        """
        with self._changed:
            if self._closing:
                raise RequestError("the server is stopping", 503, {"Retry-After": "1"})
            queued = sum(p.waiting for p in self._pending)
            if queued + len(job.lines) > self.max_queue:
                raise RequestError(f"the queue is full: {queued} lines wait, at most "
                                   f"{self.max_queue} (--max-queue); retry later", 503,
                                   {"Retry-After": "1"})
            cost = self._queued_cost()
            if self.max_queue_cost is not None and cost + job.cost > self.max_queue_cost:
                raise RequestError(f"the queue is full: searches of cost {cost} wait, at most "
                                   f"{self.max_queue_cost} (--max-queue-cost); retry later",
                                   503, {"Retry-After": "1"})
            pending = Pending(job, done, time.monotonic(), client)
            self._pending.append(pending)
            self._changed.notify()
        return pending

    def cancel(self, pending: Pending) -> None:
        """Drop `pending` (its client went away, or its deadline passed): its lines not yet
        searched take no room in the queue nor in a batch, and it is told nothing."""
        with self._changed:
            pending.dropped = True
            if pending in self._pending:
                self._pending.remove(pending)
                self._changed.notify()

    def close(self, drain_s: float = float("inf")) -> None:
        """Stop taking jobs; the thread searches those queued for `drain_s` seconds more, then
        tells the rest that the server stopped (503) and ends."""
        with self._changed:
            self._closing = True
            self._drain_until = time.monotonic() + drain_s
            self._changed.notify_all()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the search threads to end, `timeout` seconds at most in all."""
        end = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if end is None else max(0.0, end - time.monotonic()))

    def _run(self) -> None:
        while (turn := self._take()) is not None:
            try:
                self._search(turn)
            finally:
                self._ended(turn)
            if (traces := self.translators.traces()) != self._frozen_traces:
                # A new trace's hundred thousand objects live as long as the server: kept out
                # of the cycle collector's full collections, each of which would walk them
                # holding the interpreter's lock (`app.serve` does so for the models).
                self._frozen_traces = traces
                gc.freeze()

    def _ended(self, turn: Turn) -> None:
        """Note that `turn`'s search ended: its clients are waited for a moment."""
        now = time.monotonic()
        with self._changed:
            for client in {pending.client for pending, _, _ in turn.parts}:
                self._running[client] -= 1
                if self._running[client] <= 0:
                    del self._running[client]
                    self._recent[client] = (now, self._recent.get(client, (now, 0))[1])
            self._changed.notify_all()

    def _take(self) -> Turn | None:
        """The next turn (None: closed, and nothing left or the drain over), waiting for the
        oldest job's batch to fill or its wait to end."""
        with self._changed:
            while True:
                if self._closing and time.monotonic() >= self._drain_until:
                    self._stop_queued()
                    return None
                if not self._pending:
                    if self._closing:
                        return None
                    self._changed.wait()
                    continue
                head = min(self._pending, key=lambda p: self._tag(p.client))
                rival_s = 0.0 if self._closing else self._anticipation(head)
                if rival_s > 0:
                    self._changed.wait(None if rival_s == float("inf") else rival_s)
                    continue
                self._advance(head)
                same = [p for p in self._pending if p.job.options == head.job.options]
                # A job a turn has served waits no more (its `arrived` is 0).
                left = min(p.arrived for p in same) + self.wait_s - time.monotonic()
                if (self._closing or left <= 0
                        or sum(sum(p.job.line_tokens[p.taken:]) for p in same)
                        >= self.max_tokens):
                    break
                self._changed.wait(left)
            # The leader first, then the jobs of the clients served least (in queue order).
            turn = self._fill(sorted(same, key=lambda p: (p is not head, self._tag(p.client))))
            taken = [pending for pending, _, _ in turn.parts]
            costs: collections.Counter[str] = collections.Counter()
            for pending, start, stop in turn.parts:
                costs[pending.client] += sum(pending.job.line_costs[start:stop])
            for client, cost in costs.items():
                self._tags[client] = self._tag(client) + cost
                self._running[client] += 1
                self._recent[client] = (float("inf"), cost)
            # Round robin: jobs with lines left go behind those this turn did not serve.
            self._pending = ([p for p in self._pending if p not in taken]
                             + [p for p in taken if p.waiting])
            return turn

    def _tag(self, client: str) -> int:
        """Where `client`'s next search starts on the virtual clock (the lock held)."""
        return max(self._tags.get(client, 0), self._clock)

    def _anticipation(self, head: Pending) -> float:
        """Seconds to wait for a client before `head` (the oldest job of the least tag among
        those waiting) leads a turn (module docstring): 0 for none, inf until a turn ends or
        a job comes (the lock held). Forgets the clients waited for long enough."""
        now, ahead = time.monotonic(), self._tag(head.client)
        waiting = {pending.client for pending in self._pending}
        wait = 0.0
        for client, (ended, cost) in list(self._recent.items()):
            left = ended + ANTICIPATE_S - now
            if left <= 0:
                del self._recent[client]
            elif client not in waiting and self._tag(client) + AHEAD_COSTS * cost < ahead:
                wait = left if wait == 0 else min(wait, left)
        return wait

    def _advance(self, head: Pending) -> None:
        """Move the clock to the tag of `head`'s client, which leads the next turn (the lock
        held); the tags it reaches are forgotten (their clients would start at the clock
        anyway)."""
        self._clock = self._tag(head.client)
        self._tags = {client: tag for client, tag in self._tags.items() if tag > self._clock}

    def _fill(self, jobs: list[Pending]) -> Turn:
        """A turn of the waiting lines of `jobs` (of one search's settings), oldest first,
        within the turn's pieces and hypotheses (at least one line)."""
        parts, tokens, stop = [], 0, 0
        rows = jobs[0].job.options.rows_per_sentence
        limit = self.max_tokens if self.turn_rows is None else min(
            self.max_tokens, max(1, self.turn_rows // rows))
        for pending in jobs:
            start = stop = pending.taken
            while stop < len(pending.job.lines):
                more = tokens + pending.job.line_tokens[stop]
                if tokens and more > limit:
                    break
                tokens, stop = more, stop + 1
            if stop > start or not pending.job.lines:
                parts.append((pending, start, stop))
                pending.taken, pending.arrived = stop, 0.0
            if stop < len(pending.job.lines):
                break
        return Turn(parts)

    def _stop_queued(self) -> None:
        """Tell every queued job that the server stopped before searching it (the lock held)."""
        for pending in self._pending:
            if not pending.told:
                pending.dropped = pending.told = True
                pending.done(RequestError("the server stopped before searching this request "
                                          "(its drain ended); retry", 503,
                                          {"Retry-After": "1"}))
        self._pending = []

    def _search(self, turn: Turn) -> None:
        """Search the lines of `turn` in `vtx translate`'s padded batches, one after the other,
        and tell each job its hypotheses once its last line is searched; when a search fails,
        each job's part is searched alone, so that only the one at fault gets the error."""
        options = turn.parts[0][0].job.options
        lines = turn.lines()
        told = set()
        # Each job's lines of this turn not yet searched: told once none is left.
        left = {id(pending): stop - start for pending, start, stop in turn.parts}
        try:
            translator = self.translators.get(options)
            for pending, _, _ in turn.parts:  # jobs of no line in this turn
                if not left[id(pending)]:
                    told.add(id(pending))
                    self._tell_if_done(pending)
            encoded = [p.job.ids[i] if p.job.ids is not None
                       else translator.vocab.encode_source(p.job.lines[i]) for p, i in lines]
            for rows, _ in padded_batches(encoded, options.max_tokens, pad_rows=False):
                kept = [row for row in rows if not lines[row][0].dropped]
                group = [lines[row] for row in kept]
                searched = self._translate(translator, group,
                                           [encoded[row] for row in kept]) if group else []
                for (pending, index), hypotheses in zip(group, searched):
                    pending.results[index] = hypotheses
                for pending, _ in (lines[row] for row in rows):
                    left[id(pending)] -= 1
                    if not left[id(pending)]:
                        told.add(id(pending))
                        self._tell_if_done(pending)
        except Exception as error:
            untold = [part for part in turn.parts if id(part[0]) not in told]
            if len(turn.parts) > 1:
                for part in untold:
                    self._search(Turn([part]))
            else:
                for pending, _, _ in untold:
                    self._fail(pending, error)

    def _tell_if_done(self, pending: Pending) -> None:
        """Tell `pending` its hypotheses once every line has them (its lines may be searched by
        several threads: the last to end tells it)."""
        with self._changed:
            if pending.dropped or pending.told or any(r is None for r in pending.results):
                return
            pending.told = True
        pending.done(pending.results)

    def _fail(self, pending: Pending, error: BaseException) -> None:
        with self._changed:
            if pending in self._pending:
                self._pending.remove(pending)
            if pending.dropped or pending.told:
                return
            pending.dropped = pending.told = True
        pending.done(error)

    def _translate(self, translator: Translator, group: list[tuple[Pending, int]],
                   encoded: list[list[int]]) -> list[list[Hypothesis]]:
        """The hypotheses of the lines of `group` ((job, line index) pairs, `encoded` their
        pieces), each line's id its index in its job."""
        options = translator.options
        texts = [pending.job.lines[index] for pending, index in group]
        started = time.monotonic()
        results = translator.translate(
            texts, prefixes=[pending.job.prefixes[index] for pending, index in group]
            if options.prefix else None,
            constraints=[pending.job.constraints[index] for pending, index in group]
            if options.constraints else None,
            line_ids=[index for _, index in group], encoded=encoded)
        self.metrics.observe_batch(len(texts), sum(map(len, encoded)),
                                   sum(len(h[0].tokens) for h in results if h),
                                   time.monotonic() - started)
        return results
