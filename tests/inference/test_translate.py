import numpy as np
import pytest

from vtx.inference import decoding, translate
from vtx.inference.decoding import DecodeOptions


@pytest.fixture(scope="module")
def translator(trained_checkpoint):
    warnings = []
    result = translate.load_translator(trained_checkpoint, DecodeOptions(max_tokens=256),
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


def test_batched_results_equal_one_at_a_time_and_keep_input_order(translator):
    batched = [h[0].text if h else "" for h in translator.translate(SENTENCES)]
    single = [translator.translate([s])[0] for s in SENTENCES]
    assert batched == [h[0].text if h else "" for h in single]
    assert batched[4] == "" and all(batched[i] for i in (0, 1, 2, 3, 5))


def test_same_input_twice_gives_the_same_output(translator):
    first = translator.translate(SENTENCES)
    assert translator.translate(SENTENCES) == first


def test_overlong_line_is_truncated_with_a_warning(translator):
    translator.warnings.clear()
    hypotheses = translator.translate(["a " * 200], first_line_number=7)
    assert hypotheses[0]
    assert any(w.startswith("line 7:") and "truncated" in w for w in translator.warnings)


def test_invalid_utf8_is_replaced_and_reported_by_line():
    warnings = []
    lines = list(translate.read_lines([b"ok\n", b"bad \xff byte\n"], warnings.append))
    assert lines == ["ok", "bad \ufffd byte"]
    assert warnings == ["line 2: invalid UTF-8 replaced with U+FFFD"]


def test_nbest_hypotheses_are_sorted_by_score(trained_checkpoint):
    translator = translate.load_translator(trained_checkpoint, DecodeOptions(beam=4, nbest=3))
    (hypotheses,) = translator.translate(["A man is riding a bike."])
    assert len(hypotheses) == 3
    scores = [h.score for h in hypotheses]
    assert scores == sorted(scores, reverse=True)


def test_options_refuse_nbest_over_beam():
    with pytest.raises(ValueError, match="nbest 5, beam 4"):
        DecodeOptions(beam=4, nbest=5)


def test_batches_of_any_shape_reuse_one_traced_search(trained_checkpoint):
    translator = translate.load_translator(trained_checkpoint, DecodeOptions(max_tokens=64))
    translator.translate(SENTENCES)  # several padded (rows, length) shapes
    translator.translate(["A dog."])
    assert translator._search.experimental_get_tracing_count() == 1
