import dataclasses
import io

import numpy as np
import pytest

from vtx.errors import ArgumentError
from vtx.inference import decoding, translate
from vtx.inference.decoding import DecodeOptions, SamplingOptions
from vtx.inference.files import (check_reference_length, damaged_gzip_named, read_lines,
                                 read_references)
from vtx.inference.loading import checkpoint_vocabulary, load_model
from vtx.inference.translator import Translator, load_translator


@pytest.fixture(scope="module")
def translator(trained_checkpoint):
    warnings = []
    result = load_translator(trained_checkpoint, DecodeOptions(max_tokens=256),
                             warnings.append)
    result.warnings = warnings
    return result


SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A girl.",
             "A group of people are standing in front of a large building with many windows.",
             "", "A woman is cooking."]


def test_padded_batches_cover_every_sentence_once_with_few_shapes():
    rng = np.random.default_rng(0)
    encoded = [list(range(4, 4 + n)) for n in rng.integers(1, 60, 200)]
    seen, shapes = [], set()
    for rows, array in decoding.padded_batches(encoded, max_tokens=512):
        shapes.add(array.shape)
        assert array.shape[0] * array.shape[1] <= 512 or array.shape[0] == 1
        for row, index in enumerate(rows):
            assert array[row, :len(encoded[index])].tolist() == encoded[index]
            assert (array[row, len(encoded[index]):] == 0).all()
        assert (array[len(rows):] == 0).all()
        seen.extend(rows)
    assert sorted(seen) == list(range(200))
    assert len(shapes) <= 20


def test_the_shapes_of_3000_lines_of_random_lengths_are_of_the_documented_set():
    rng = np.random.default_rng(2)
    encoded = [list(range(4, 4 + n)) for n in rng.integers(1, 257, 3000)]
    seen = {array.shape for _, array in decoding.padded_batches(encoded, max_tokens=16384)}
    documented = decoding.padded_shapes(16384, 256)
    assert seen <= documented
    # per length bucket: its full batches and its short last one, padded to a power of two
    assert len({width for _, width in seen}) == 32 and len(seen) <= 2 * 32


def test_batches_without_padding_rows_hold_only_sentences():
    rng = np.random.default_rng(1)
    encoded = [list(range(4, 4 + n)) for n in rng.integers(1, 60, 200)]
    padded = list(decoding.padded_batches(encoded, max_tokens=512))
    tight = list(decoding.padded_batches(encoded, max_tokens=512, pad_rows=False))
    assert [rows for rows, _ in tight] == [rows for rows, _ in padded]
    assert all(array.shape[0] == len(rows) for rows, array in tight)
    assert any(array.shape[0] > len(rows) for rows, array in padded)


def test_batched_results_equal_one_at_a_time_and_keep_input_order(translator):
    batched = [h[0].text if h else "" for h in translator.translate(SENTENCES)]
    single = [translator.translate([s])[0] for s in SENTENCES]
    assert batched == [h[0].text if h else "" for h in single]
    assert batched[4] == "" and all(batched[i] for i in (0, 1, 2, 3, 5))


def test_a_line_of_no_pieces_gets_no_translation(translator):
    # A zero-width space, a byte-order mark or a control character alone: not blank to Python,
    # no piece to SentencePiece; searched from padding only, the model made a sentence up.
    lines = ["\u200b", "A girl.", "\ufeff", "\x01\x02", "\u200b\ufeff"]
    assert [translator.vocab.encode(line) for line in lines[::2]] == [[], [], []]
    results = translator.translate(lines)
    assert [bool(hypotheses) for hypotheses in results] == [False, True, False, False, False]
    assert results[1] == translator.translate(["A girl."])[0]


def test_same_input_twice_gives_the_same_output(translator):
    first = translator.translate(SENTENCES)
    assert translator.translate(SENTENCES) == first


def test_overlong_line_is_truncated_with_a_warning(translator):
    translator.warnings.clear()
    hypotheses = translator.translate(["a " * 200], first_line_number=7)
    assert hypotheses[0]
    assert any(w.startswith("line 7:") and "truncated" in w for w in translator.warnings)


def test_a_line_that_is_not_utf8_is_refused_naming_it():
    """It was decoded with U+FFFD and searched (a gzip file not named .gz: nonsense, exit 0)."""
    from vtx.errors import DataError

    lines = read_lines([b"ok\r\n", b"bad \xff byte\n"], "in.txt")
    assert next(lines) == "ok"
    with pytest.raises(DataError, match=r"^in.txt:2: invalid UTF-8 \(bytes b'\\xff' at column "
                                        r"5\)$"):
        next(lines)


def test_a_reference_is_cut_into_lines_as_the_input_is(tmp_path):
    """A lone carriage return, a form feed or U+2028 inside a line leaves it one line in both
    (bytes.splitlines cut the reference at a lone \\r: a line count that did not match)."""
    text = "a\rb\nc\x0cd\ne\u2028f\r\n\nlast".encode()
    path = tmp_path / "ref.de"
    path.write_bytes(text)
    read = list(read_lines(io.BytesIO(text), "in"))
    assert read_references(path) == read == ["a\rb", "c\x0cd", "e\u2028f", "", "last"]


def _damaged_gzip(kind: str) -> bytes:
    """Gzip data of 300 lines, damaged as `kind` says."""
    import gzip
    import zlib

    data = gzip.compress("".join(f"line {i} of a small text\n" for i in range(300)).encode())
    if kind == "truncated":  # EOFError
        return data[:len(data) // 2]
    if kind == "bad header":  # gzip.BadGzipFile: an unknown compression method
        return data[:2] + b"\x07" + data[3:]
    for position in range(20, len(data) - 8):  # inside a block: the first damage zlib reports
        damaged = data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1:]
        try:
            gzip.decompress(damaged)
        except zlib.error:
            return damaged
        except (OSError, EOFError):
            continue
    raise AssertionError("no damage that zlib reports")


@pytest.mark.parametrize("kind", ["truncated", "bad header", "inside a block"])
def test_a_damaged_gzip_input_or_reference_is_a_data_error_naming_the_file(tmp_path, kind):
    import re

    from vtx.data.text import open_binary
    from vtx.errors import DataError

    path = tmp_path / "in.en.gz"
    path.write_bytes(_damaged_gzip(kind))
    named = rf"^{re.escape(str(path))}: cannot read it \(.+\)$"
    with pytest.raises(DataError, match=named):
        read_references(path)
    with pytest.raises(DataError, match=named):
        check_reference_length(path, tmp_path / "ref.de", [])
    with open_binary(path) as stream, pytest.raises(
            DataError, match=rf"^{re.escape(str(path))}: cannot read it after line \d+ \(.+\)$"):
        list(read_lines(stream, path))


def test_damaged_gzip_named_says_the_place_the_reading_had_reached():
    from vtx.errors import DataError

    place = ["at the start"]
    with pytest.raises(DataError, match=r"^in.gz: cannot read it after line 3 \(cut\)$"):
        with damaged_gzip_named("in.gz", lambda: place[0]):
            place[0] = " after line 3"
            raise EOFError("cut")
    with pytest.raises(OSError, match="^not gzip's$"):  # other errors pass unchanged
        with damaged_gzip_named("in.gz"):
            raise OSError("not gzip's")


def test_nbest_hypotheses_are_sorted_by_score(trained_checkpoint):
    translator = load_translator(trained_checkpoint, DecodeOptions(beam=4, nbest=3))
    (hypotheses,) = translator.translate(["A man is riding a bike."])
    assert len(hypotheses) == 3
    scores = [h.score for h in hypotheses]
    assert scores == sorted(scores, reverse=True)


def test_options_refuse_nbest_over_beam():
    with pytest.raises(ValueError, match="need 1 <= nbest <= beam, got 5 and 4"):
        DecodeOptions(beam=4, nbest=5)


def test_options_refuse_an_unknown_stop_rule():
    with pytest.raises(ValueError, match="stop must be one of fairseq, exact, never, got 'early'"):
        DecodeOptions(stop="early")


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_batches_of_any_shape_reuse_one_traced_search(trained_checkpoint, jit):
    # With XLA that one graph is compiled per shape (and searches as the graph does:
    # tests/inference/test_model_search.py).
    options = DecodeOptions(max_tokens=64, jit_compile=jit)
    translator = load_translator(trained_checkpoint, options)
    outputs = translator.translate(SENTENCES)  # several padded (rows, length) shapes
    translator.translate(["A dog."])
    assert translator.compiled.traces() == 1
    assert [bool(h and h[0].text) for h in outputs] == [bool(s) for s in SENTENCES]


def test_a_wide_beam_searches_fewer_sentences_at_once_and_a_too_wide_one_is_refused(
        trained_checkpoint):
    from vtx import checkpoints
    from vtx.inference.decoding import search_bytes

    checkpoint = checkpoints.load(trained_checkpoint)
    model = load_model(checkpoint)
    vocab = checkpoint_vocabulary(checkpoint, trained_checkpoint)
    options = DecodeOptions(beam=8, max_tokens=4096)
    lines = [s for s in SENTENCES if s]
    free = Translator([model], vocab, options)
    # A budget of two of the longest sentences' searches: more, smaller batches, each within it,
    # and the same translations.
    budget = 2 * search_bytes(options, model.config, 24) + 1
    tight = Translator([model], vocab, options, memory_budget=budget)
    encoded = [tight.encode(line, i) for i, line in enumerate(lines)]
    assert 16 < max(len(e) for e in encoded) <= 24
    batches = list(decoding.padded_batches(encoded, options.max_tokens, tight._max_rows))
    assert len(batches) > len(list(decoding.padded_batches(encoded, options.max_tokens)))
    for _, array in batches:
        assert array.shape[0] * search_bytes(options, model.config, array.shape[1]) <= budget
    assert [h[0].text for h in tight.translate(lines)] == [h[0].text for h in
                                                           free.translate(lines)]
    refused = Translator([model], vocab, DecodeOptions(beam=1000),
                         memory_budget=2**20)
    with pytest.raises(ArgumentError, match=r"^beam 1000: the search of one sentence of \d+ "
                                            r"pieces needs about [\d.]+ GiB, more than the 0\.0 "
                                            r"GiB .*; use a smaller beam$") as error:
        refused.translate(lines[:1])
    assert error.value.arguments == ["beam"]
    sampled = Translator([model], vocab, DecodeOptions(
        nbest=1000, sampling=SamplingOptions()), memory_budget=2**20)
    with pytest.raises(ArgumentError, match=r"^nbest 1000: .*; use a smaller nbest$"):
        sampled.translate(lines[:1])


SHORT = ["A dog.", "A girl.", "Two men.", "A cat.", "A boy runs.", "A red car.", "People.",
         "A man sings.", "Kids play.", "A blue bird.", "Snow falls.", "A woman."]


def test_out_of_device_memory_searches_halves_and_smaller_batches_after(trained_checkpoint):
    """A GPU running out of memory in a batch's search (its memory is not the host's, which
    sizes the batches): the batch is searched in halves, halved again as needed, and later
    batches are no larger than the half that fitted; the translations are those of batches of
    that size from the start. Sentences of at most 8 pieces: one padded width throughout."""
    import tensorflow as tf

    warnings = []
    translator = load_translator(trained_checkpoint, DecodeOptions(max_tokens=64),
                                 warnings.append)
    assert max(len(translator.encode(line, 1)) for line in SHORT) <= decoding.LENGTH_BUCKET
    search, searched = translator._search(constrained=False), []

    def device_of_two_rows(source):  # the device's allocator refusing more than 2 sentences
        if source.shape[0] > 2:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        searched.append(source.shape)
        return search(source)

    translator._search = lambda constrained: device_of_two_rows
    got = [h[0].text for h in translator.translate(SHORT)]
    assert searched == [(2, 8)] * 6  # 8 rows: 4 + 4, each 2 + 2; then 2 at a time
    assert warnings == [
        "out of the device's memory searching 8 sentences of up to 8 pieces at once: batches "
        "of at most 32 source positions from now on",
        "out of the device's memory searching 4 sentences of up to 8 pieces at once: batches "
        "of at most 16 source positions from now on"]
    two_at_a_time = load_translator(trained_checkpoint, DecodeOptions(max_tokens=16))
    assert got == [h[0].text for h in two_at_a_time.translate(SHORT)]

    def no_room(source):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    translator._search = lambda constrained: no_room
    with pytest.raises(ArgumentError, match=r"^beam 4: the search of one sentence of 8 pieces "
                                            r"ran out of the device's memory; use a smaller "
                                            r"beam$"):
        translator.translate(SHORT[:1])


def two_word_translator(trained_checkpoint, nbest: int) -> Translator:
    """The trained model allowed EOS and "▁Hund" only (every other logit -inf, as a constraint
    forbids tokens), at most 2 tokens per hypothesis: 3 hypotheses exist, "" and "Hund"
    finished and "Hund Hund" cut at the limit."""
    import tensorflow as tf

    from vtx import checkpoints
    from vtx.config import EOS_ID

    checkpoint = checkpoints.load(trained_checkpoint)
    model = load_model(checkpoint)
    vocab = checkpoint_vocabulary(checkpoint, trained_checkpoint)
    (word,) = vocab.encode("Hund")
    decode_step = model.decode_step

    def two_words(token_ids, state, **kwargs):
        logits, state = decode_step(token_ids, state, **kwargs)
        allowed = tf.reduce_any(tf.range(vocab.size)[:, None] == [EOS_ID, word], axis=1)
        return tf.where(allowed[None, :], logits, float("-inf")), state

    model.decode_step = two_words
    options = DecodeOptions(beam=4, nbest=nbest, max_len_a=0.0, max_len_b=2)
    return Translator([model], vocab, options)


def test_nbest_over_the_hypotheses_that_exist_returns_those_and_writes_no_hypothesis_rest(
        trained_checkpoint):
    """Asked for 4, the search has 3: the 4th slot came back as one of them extended by PAD,
    scored -inf, and was written `-inf<TAB>Hund` as if it were a translation."""
    translator = two_word_translator(trained_checkpoint, nbest=4)
    (hypotheses,) = translator.translate(["A dog."])
    assert sorted(h.text for h in hypotheses) == ["", "Hund", "Hund Hund"]
    assert all(np.isfinite(h.score) for h in hypotheses)
    written = []
    best = translate.translate_stream(translator, ["A dog.", "", "A cat."], written.append, 8)
    assert len(written) == 12  # 4 lines per input line, in input order
    for first in (0, 8):
        found = [line.split("\t") for line in written[first:first + 3]]
        assert sorted(text for _, text in found) == ["", "Hund", "Hund Hund"]
        assert all(np.isfinite(float(score)) for score, _ in found)
        assert written[first + 3] == "nan\t"  # no 4th hypothesis
    assert written[4:8] == ["nan\t"] * 4  # the empty line
    assert best == [written[0].split("\t")[1], "", written[8].split("\t")[1]]

    one = []
    assert translate.translate_stream(two_word_translator(trained_checkpoint, nbest=1),
                                      ["A dog.", "", "A cat."], one.append, 8) == one == best


def test_a_save_dir_is_listed_once_the_checkpoint_checked_is_the_one_loaded(trained_checkpoint,
                                                                            tmp_path,
                                                                            monkeypatch):
    """--checkpoint SAVE_DIR with --output: the directory was listed to check the output against
    its newest checkpoint, then again to load one; training writing a checkpoint between the
    two made the file checked and the file loaded differ."""
    import shutil

    from vtx import checkpoints

    run = tmp_path / "run"
    run.mkdir()
    checked = shutil.copy(trained_checkpoint, run / trained_checkpoint.name)
    listed = []

    def listing_then_training_saves(save_dir):
        found = list_checkpoints(save_dir)
        listed.append(found)
        if len(listed) == 1:  # training saves its next checkpoint just after this listing
            step = checkpoints.load(checked).meta["step"]
            shutil.copy(checked, checkpoints.checkpoint_path(run, step + 1))
        return found

    list_checkpoints = checkpoints.list_checkpoints
    monkeypatch.setattr(checkpoints, "list_checkpoints", listing_then_training_saves)
    (tmp_path / "input.txt").write_text("A girl.\n")
    logs = []
    translate.translate_file(run, tmp_path / "input.txt", tmp_path / "output.txt",
                             DecodeOptions(beam=1, max_tokens=256), log=logs.append)
    assert len(listed) == 1 and logs[0] == f"checkpoint: {checked}"
    assert logs[1:2] and logs[1].startswith("translated 1 line (")


def test_progress_is_told_of_each_batch_of_the_search_not_only_of_each_chunk(trained_checkpoint):
    """A chunk of --buffer-size lines (1024 by default) may take minutes on a CPU: progress
    comes as each batch of the search finishes. Here --max-tokens 16 makes batches of a few
    sentences within one chunk of 12 lines; a clock 11 s on at every reading makes each update
    a progress line."""
    from vtx.progress_lines import LineProgress

    translator = load_translator(trained_checkpoint, DecodeOptions(beam=1,
                                                                   max_tokens=16))
    lines = ["A dog runs.", "", "Two men play football in the park."] * 4
    ticks = iter(range(0, 10_000, 11))
    said = []
    progress = LineProgress(said.append, "translated", total=len(lines),
                            clock=lambda: float(next(ticks)))
    written = []
    best = translate.translate_stream(translator, lines, written.append, 12, progress)
    assert len(written) == 12 and best == written
    done = [int(line.split()[1]) for line in said[:-1]]  # "translated N of 12 lines ..."
    assert len(done) >= 3 and done == sorted(done) and done[-1] < 12
    assert said[-1].startswith("translated 12 lines (")
    assert f"({sum(len(text.split()) for text in best)} words out)" in said[-1]


SAMPLING = DecodeOptions(nbest=3, sampling=SamplingOptions(topk=20, temperature=1.2, seed=11))


def test_a_lines_samples_do_not_depend_on_its_batch_the_batch_size_or_xla(trained_checkpoint):
    wide = load_translator(trained_checkpoint, SAMPLING)
    together = wide.translate(SENTENCES)
    narrow = load_translator(trained_checkpoint,
                             dataclasses.replace(SAMPLING, max_tokens=16))
    texts = lambda results: [[h.text for h in hypotheses] for hypotheses in results]
    for number, sentence in enumerate(SENTENCES, start=1):
        alone = narrow.translate([sentence], first_line_number=number)
        assert texts(alone) == texts([together[number - 1]])
        # The same up to the rounding of a batch's matrix products.
        np.testing.assert_allclose([h.score for h in alone[0]],
                                   [h.score for h in together[number - 1]], rtol=1e-5)
    xla = load_translator(trained_checkpoint,
                          dataclasses.replace(SAMPLING, jit_compile=True))
    assert texts(xla.translate(SENTENCES[2:3], 3)) == texts(together[2:3])
    # Another line number, or another seed: other samples (over six lines, not all equal).
    moved = wide.translate(SENTENCES, first_line_number=2)
    reseeded = load_translator(trained_checkpoint, dataclasses.replace(
        SAMPLING, sampling=dataclasses.replace(SAMPLING.sampling, seed=12))).translate(SENTENCES)
    assert texts(moved) != texts(together) and texts(reseeded) != texts(together)
    assert all(len(hypotheses) == 3 for i, hypotheses in enumerate(together) if i != 4)


@pytest.mark.parametrize("options", [DecodeOptions(nbest=3, positional_scores=True),
                                     dataclasses.replace(SAMPLING, positional_scores=True)])
def test_positional_scores_sum_to_the_search_score(trained_checkpoint, options):
    from vtx.inference.beam_search import length_penalty

    translator = load_translator(trained_checkpoint, options)
    for hypotheses in translator.translate(SENTENCES):
        for hypothesis in hypotheses:
            assert len(hypothesis.positional_scores) == len(hypothesis.tokens) + hypothesis.finished
            assert hypothesis.finished  # the tiny model ends its sentences
            assert translator.vocab.decode(list(hypothesis.tokens)) == hypothesis.text
            penalty = float(length_penalty(len(hypothesis.positional_scores), 0.6))
            np.testing.assert_allclose(sum(hypothesis.positional_scores) / penalty,
                                       hypothesis.score, rtol=1e-4)
    plain = load_translator(trained_checkpoint, DecodeOptions(nbest=3))
    assert all(h.positional_scores is None for hs in plain.translate(SENTENCES) for h in hs)


def test_translators_of_any_lenpen_nbest_and_draw_share_one_trace_of_each_search(
        trained_checkpoint):
    """lenpen, nbest and sampling's seed, temperature, top-k and top-p are fed to a compiled
    search at each call: Translators sharing their compiled functions trace each search (plain,
    sampling, constrained) once, and translate as a Translator of those options alone does."""
    from vtx.inference.translator import Compiled

    first = load_translator(trained_checkpoint, DecodeOptions())
    compiled = Compiled(first.models)
    settings = [DecodeOptions(lenpen=alpha, nbest=nbest)
                for alpha, nbest in ((0.0, 1), (0.6, 3), (1.7, 2), (3.1, 4))]
    settings += [DecodeOptions(nbest=nbest, sampling=SamplingOptions(
        seed=seed, temperature=temperature, topk=topk, topp=topp))
        for seed, temperature, topk, topp, nbest in ((0, 1.0, 0, 1.0, 1), (2**40 + 3, 0.7, 5,
                                                      1.0, 3), (-9, 1.6, 0, 0.8, 5),
                                                     (4, 2.5, 3, 0.9, 2))]
    settings += [DecodeOptions(constraints=True, lenpen=alpha, nbest=2) for alpha in (0.2, 1.4)]
    lines, constraints = SENTENCES[:3], [["Hund"], [], ["Frau"]]
    texts = lambda results: [[(h.text, h.tokens, round(h.score, 4)) for h in hypotheses]
                             for hypotheses in results]
    for options in settings:
        given = constraints if options.constraints else None
        shared = Translator(first.models, first.vocab, options, compiled=compiled)
        alone = Translator(first.models, first.vocab, options)
        assert texts(shared.translate(lines, constraints=given)) == texts(
            alone.translate(lines, constraints=given)), options
    # One trace each: the beam search, the sampling search, the constrained search's encoder
    # and decoder step.
    assert compiled.traces() == 4


def test_batches_searched_on_several_threads_give_what_one_thread_gives(trained_checkpoint):
    """--search-threads: each batch its own thread, the results (hypotheses, scores, positional
    scores) and the progress told batch by batch those of one thread, in the input's order."""
    lines = [f"{subject} {verb} in the park." for subject in
             ("A dog", "Two men", "A girl in a red coat", "People", "A very old man")
             for verb in ("runs", "plays football", "is sitting on a bench")]
    outputs = {}
    for threads in (1, 3):
        options = DecodeOptions(max_tokens=32, nbest=2, positional_scores=True,
                                search_threads=threads)
        translator = load_translator(trained_checkpoint, options)
        told = []
        found = translator.translate(lines, on_batch=told.append)
        outputs[threads] = ([[(h.text, h.score, list(h.positional_scores)) for h in hyps]
                             for hyps in found], told)
    assert len(outputs[1][1]) >= 4  # several batches, told one by one
    assert outputs[3] == outputs[1]


def test_a_stop_asked_between_batches_holds_back_the_batches_not_started(trained_checkpoint):
    """Asked before each batch is handed to a thread: with 2 threads the stop asked at the
    third batch is raised, and no batch after it is searched."""
    from vtx.errors import SearchInterrupted

    translator = load_translator(trained_checkpoint, DecodeOptions(beam=1, max_tokens=16,
                                                                   search_threads=2))
    encoded = [translator.encode(f"A dog number {i} runs.", i + 1) for i in range(12)]
    asked = []

    def should_stop():
        asked.append(True)
        return len(asked) == 3

    with pytest.raises(SearchInterrupted, match="stopped after 2 batches"):
        translator.search_ids(encoded, should_stop)
    assert len(asked) == 3


def test_search_threads_below_one_are_refused_naming_the_argument():
    with pytest.raises(ArgumentError, match="search_threads must be >= 1, got 0"):
        DecodeOptions(search_threads=0)
