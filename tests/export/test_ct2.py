import json

import pytest

from tests.export.conftest import invoke, vtx_translate

ctranslate2 = pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def exported(export_checkpoint, tmp_path_factory):
    """(ctranslate2.Translator, SentencePieceProcessor, model directory) from `vtx export`."""
    import sentencepiece

    from vtx.export.ct2 import SENTENCEPIECE_FILE

    output = tmp_path_factory.mktemp("ct2") / "model"
    invoke("export", "--checkpoint", export_checkpoint, "--format", "ctranslate2",
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
def test_ctranslate2_greedy_equals_vtx_translate_beam_1(exported, export_checkpoint,
                                                        test_sentences, tmp_path):
    from vtx.export.ct2 import translate_lines

    lines = test_sentences + [""]
    expected = vtx_translate(export_checkpoint, lines, tmp_path, "--beam", "1")
    assert len(set(expected)) >= 40, "the trained model should give varied translations"
    assert translate_lines(exported[0], exported[1], lines, beam_size=1) == expected


@pytest.mark.slow
def test_ctranslate2_stops_at_the_length_limit_like_vtx(exported, export_checkpoint,
                                                        test_sentences, tmp_path):
    from vtx.export.ct2 import translate_lines

    lines = test_sentences[:50]
    expected = vtx_translate(export_checkpoint, lines, tmp_path, "--beam", "1",
                             "--max-len-a", "0.25", "--max-len-b", "2")
    assert translate_lines(exported[0], exported[1], lines, beam_size=1, max_len_a=0.25,
                           max_len_b=2) == expected
