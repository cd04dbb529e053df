import json

import pytest

from tests.export.conftest import greedy_margins, invoke, vtx_translate
from vtx.inference.decoding import DecodeOptions

ctranslate2 = pytest.importorskip("ctranslate2")
MAX_POSITIONS = 64  # the suite's translation model's (tests/conftest.py)


@pytest.fixture(scope="module")
def exported(trained_checkpoint, tmp_path_factory):
    """(ctranslate2.Translator, SentencePieceProcessor, model directory) from `vtx export`."""
    import sentencepiece

    from vtx.export.ct2 import SENTENCEPIECE_FILE

    output = tmp_path_factory.mktemp("ct2") / "model"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "ctranslate2",
           "--output", output)
    translator = ctranslate2.Translator(str(output), device="cpu", intra_threads=1)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(output / SENTENCEPIECE_FILE))
    return translator, processor, output


@pytest.mark.slow
def test_vocabulary_ids_line_up_with_vtx_special_ids(exported):
    vocabulary = json.loads((exported[2] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]  # PAD 0, UNK 1, BOS 2, EOS 3
    config = json.loads((exported[2] / "config.json").read_text(encoding="utf-8"))
    assert (config["bos_token"], config["eos_token"], config["decoder_start_token"]) == (
        "<s>", "</s>", "<s>")


@pytest.mark.slow
def test_ctranslate2_greedy_equals_vtx_translate_beam_1(exported, trained_checkpoint,
                                                        test_sentences, tmp_path):
    from vtx.export.ct2 import translate_lines

    margins = greedy_margins(trained_checkpoint, test_sentences)
    # Only lines whose every greedy choice wins by 1e-3 or more (about all of them, measured):
    # rounding cannot decide their outputs. The empty line takes its own path.
    lines = [line for line, margin in zip(test_sentences, margins) if margin >= 1e-3] + [""]
    assert len(lines) >= 190
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--beam", "1")
    assert len(set(expected)) >= 150, "the model should give varied translations"
    assert translate_lines(exported[0], exported[1], lines, DecodeOptions(beam=1),
                           max_positions=MAX_POSITIONS) == expected


@pytest.mark.slow
def test_ctranslate2_stops_at_the_length_limit_like_vtx(exported, trained_checkpoint,
                                                        test_sentences, tmp_path):
    from vtx.export.ct2 import translate_lines

    margins = greedy_margins(trained_checkpoint, test_sentences[:50])
    lines = [line for line, margin in zip(test_sentences, margins) if margin >= 1e-3]
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--beam", "1",
                             "--max-len-a", "0.25", "--max-len-b", "2")
    assert translate_lines(exported[0], exported[1], lines,
                           DecodeOptions(beam=1, max_len_a=0.25, max_len_b=2),
                           max_positions=MAX_POSITIONS) == expected
