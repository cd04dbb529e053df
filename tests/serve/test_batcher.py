"""The batcher of `vtx serve` with the tests' trained model: turns, fairness and failures."""

import dataclasses
import gc
import threading
import time

import pytest

from vtx.inference.decoding import DecodeOptions
from vtx.inference.loading import load_models
from vtx.inference.translator import Translator
from vtx.serve import batcher as batcher_module
from vtx.serve.batcher import Batcher, Translators
from vtx.serve.requests import Job


@pytest.fixture(scope="module")
def translator(trained_checkpoint):
    models, vocab = load_models([trained_checkpoint], False)
    return Translator(models, vocab, DecodeOptions(beam=2, positional_scores=True))


def job(translator, lines, options=None):
    options = options or translator.options
    tokens = [len(translator.vocab.encode(line)) for line in lines]
    return Job(options, lines, tokens, [options.beam * options.length_limit(t, 256)
                                        for t in tokens])


class Told:
    """The order in which jobs are told, and what."""

    def __init__(self):
        self.order, self.results, self.lock = [], {}, threading.Lock()
        self.all_told = threading.Event()
        self.expected = 0

    def done(self, name):
        def tell(result):
            with self.lock:
                self.order.append(name)
                self.results[name] = result
                if len(self.order) == self.expected:
                    self.all_told.set()
        return tell


def run(batcher, told, jobs):
    """Queue `jobs` ((name, job) pairs) before the thread starts, then let it search them."""
    told.expected = len(jobs)
    for name, queued in jobs:
        batcher.submit(queued, told.done(name))
    batcher.start()
    assert told.all_told.wait(600)
    batcher.close()
    batcher.join()


def test_a_large_job_takes_turns_with_the_jobs_behind_it(translator):
    big = job(translator, ["A man is riding a bike through the park."] * 12)
    small = job(translator, ["A girl."])
    # A turn of 40 source pieces: the big job's 12 lines of 10 need three.
    batcher = Batcher(Translators(translator), max_tokens=40, wait_s=0, max_queue=64)
    told = Told()
    run(batcher, told, [("big", big), ("small", small)])
    assert told.order == ["small", "big"]
    alone = translator.translate(big.lines)
    assert [[h.text for h in r] for r in told.results["big"]] == \
        [[h.text for h in r] for r in alone]


def test_a_client_of_many_requests_takes_no_more_turns_than_one_of_few(translator):
    # Each of the heavy client's jobs fills a turn of 40 source pieces (3 lines of 12); queued
    # first, in turn order they would all be searched before the light clients' lines.
    heavy = [(f"heavy{i}", job(translator, ["A man is riding a bike through the park."] * 3))
             for i in range(6)]
    light = [(f"light{i}", job(translator, ["A girl."])) for i in range(3)]
    batcher = Batcher(Translators(translator), max_tokens=40, wait_s=0, max_queue=64)
    told = Told()
    told.expected = len(heavy) + len(light)
    for name, queued in heavy:
        batcher.submit(queued, told.done(name), client="address 10.0.0.1")
    for index, (name, queued) in enumerate(light):
        batcher.submit(queued, told.done(name), client=f"address 10.0.1.{index}")
    batcher.start()
    assert told.all_told.wait(600)
    batcher.close()
    batcher.join()
    # The heavy client's first turn, then one shared by the light clients' lines.
    assert set(told.order[:4]) == {"heavy0", "light0", "light1", "light2"}, told.order
    assert set(told.order[4:]) == {f"heavy{i}" for i in range(1, 6)}


def test_a_client_owes_what_it_cost_after_the_queue_was_empty(translator):
    # The heavy client's job alone takes a turn, and the queue is empty; its next job, queued
    # before a light client's, waits for it: the heavy one cost more.
    batcher = Batcher(Translators(translator), max_tokens=40, wait_s=0, max_queue=64)
    long = ["A man is riding a bike through the park."] * 3
    batcher.submit(job(translator, long), lambda _: None, client="address 10.0.0.1")
    assert [part[0].client for part in batcher._take().parts] == ["address 10.0.0.1"]
    assert batcher.queued_lines() == 0
    batcher.submit(job(translator, long), lambda _: None, client="address 10.0.0.1")
    batcher.submit(job(translator, ["A girl."]), lambda _: None, client="address 10.0.1.1")
    assert [part[0].client for part in batcher._take().parts] == ["address 10.0.1.1",
                                                                  "address 10.0.0.1"]


def test_a_client_answered_a_moment_ago_is_waited_for_before_one_far_ahead(translator,
                                                                          monkeypatch):
    # A light client whose next request comes as soon as its last is answered, beside a heavy
    # one whose tag is far ahead: a free search thread waits for the light client while its
    # turn runs and a moment after, then serves the heavy client when it does not come.
    monkeypatch.setattr(batcher_module, "ANTICIPATE_S", 1.0)
    batcher = Batcher(Translators(translator), max_tokens=400, wait_s=0, max_queue=64)
    heavy, light = "address 10.0.0.1", "address 10.0.1.1"
    # The heavy client's searches of their own settings: no turn of the light one's takes them.
    beam4 = dataclasses.replace(translator.options, beam=4)
    long = ["A man is riding a bike through the park."] * 12
    batcher.submit(job(translator, long, beam4), lambda _: None, client=heavy)
    batcher._ended(batcher._take())
    batcher.submit(job(translator, ["A girl."]), lambda _: None, client=light)
    light_turn = batcher._take()
    batcher.submit(job(translator, long, beam4), lambda _: None, client=heavy)
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(batcher._take()))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive()  # the light client's turn runs
    batcher._ended(light_turn)
    batcher.submit(job(translator, ["A girl."]), lambda _: None, client=light)
    waiting.join(30)
    assert [part[0].client for part in taken[0].parts] == [light]
    batcher._ended(taken[0])
    started = time.monotonic()
    assert [part[0].client for part in batcher._take().parts] == [heavy]
    assert time.monotonic() - started >= 0.9  # the light client did not come back


def test_a_new_trace_is_kept_out_of_the_cycle_collector(translator):
    # A search of settings not traced before (beam 3) makes a trace that lives as long as the
    # server: frozen, so that no full collection walks it again.
    gc.collect()
    frozen = gc.get_freeze_count()
    beam3 = dataclasses.replace(translator.options, beam=3)
    batcher = Batcher(Translators(translator), max_tokens=40, wait_s=0, max_queue=64)
    run(batcher, Told(), [("new", job(translator, ["A girl."], beam3))])
    assert gc.get_freeze_count() > frozen
    gc.unfreeze()


def test_a_failing_search_fails_only_the_job_at_fault(translator):
    prefixed = Translator(translator.models, translator.vocab,
                          dataclasses.replace(translator.options, prefix=True))
    batcher = Batcher(Translators(prefixed), max_tokens=1000, wait_s=0, max_queue=64)
    good = dataclasses.replace(job(prefixed, ["A girl.", "Two dogs play."]),
                               prefixes=["Ein", ""])
    # Longer than "A man."'s output may be: the search of any batch holding it refuses.
    bad = dataclasses.replace(job(prefixed, ["A man."]), prefixes=["a " * 80])
    told = Told()
    run(batcher, told, [("good", good), ("bad", bad)])
    assert isinstance(told.results["bad"], ValueError) and "80 pieces" in str(told.results["bad"])
    alone = prefixed.translate(good.lines, prefixes=good.prefixes)
    assert [[h.text for h in r] for r in told.results["good"]] == \
        [[h.text for h in r] for r in alone]


def test_several_search_threads_tell_each_job_once_what_it_gets_alone(translator):
    lines = ["A man is riding a bike through the park.", "A girl.", "Two dogs play in the snow.",
             "A woman in a red coat walks.", "Children are playing football on a field."]
    # Jobs of 1 to 9 lines: with turns of 30 pieces, the larger ones span turns that the three
    # threads search at once, and their last lines may end on any thread.
    jobs = [(f"job{index}", job(translator, [lines[(index + k) % 5]
                                              for k in range(index % 9 + 1)]))
            for index in range(12)]
    batcher = Batcher(Translators(translator), max_tokens=30, wait_s=0, max_queue=256,
                      searchers=3)
    told = Told()
    run(batcher, told, jobs)
    assert sorted(told.order) == sorted(name for name, _ in jobs)  # each told once
    alone = {line: [h.text for h in hypotheses]
             for line, hypotheses in zip(lines, translator.translate(lines))}
    for name, queued in jobs:
        assert [[h.text for h in r] for r in told.results[name]] == \
            [alone[line] for line in queued.lines], name
    searched = sum(len(queued.lines) for _, queued in jobs)
    assert f"vtx_lines_total {searched}\n" in batcher.metrics.text()


def test_a_batcher_needs_a_search_thread(translator):
    with pytest.raises(ValueError, match="searchers must be >= 1, got 0"):
        Batcher(Translators(translator), max_tokens=30, wait_s=0, max_queue=8, searchers=0)
