"""CTranslate2's own converter (`ct2-transformers-converter`'s `TransformersConverter`) run on a
MarianMT folder translates as `vtx translate` does the folder's import, token for token, greedy
and beam 4, under the same length penalty and limit.

CTranslate2 starts Marian's decoder from a zero embedding (`start_from_zero_embedding`, as
Marian does), Transformers from the embedding of `decoder_start_token_id` (the pad). The two
agree on OPUS-MT's folders, whose pad row Marian's conversion writes as zeros; the fixture's,
trained in Transformers with its output layer tied to the embeddings, is not zero. So this test
reads a copy of the fixture whose pad row is zeroed, as OPUS-MT's folders hold it."""

import json
import shutil

import pytest

from tests.export.test_transformers import multi30k_lines
from tests.imports.test_marian import LIMIT, LINES, vtx_hypotheses

ctranslate2 = pytest.importorskip("ctranslate2")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def zero_start_folder(opus_mt_folder, tmp_path_factory):
    """A copy of the fixture's folder whose pad embedding row is zeros, as in OPUS-MT's."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path_factory.mktemp("zero_start") / opus_mt_folder.name
    shutil.copytree(opus_mt_folder, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    pad = json.loads((folder / "config.json").read_text())["pad_token_id"]
    tensors["model.shared.weight"][pad] = 0.0
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def folder(zero_start_folder):
    return zero_start_folder


@pytest.fixture(scope="module")
def converted(zero_start_folder, tmp_path_factory):
    """The folder as CTranslate2 converts it, in float32 (its converter's default)."""
    from ctranslate2.converters import TransformersConverter

    output = tmp_path_factory.mktemp("ct2") / zero_start_folder.name
    TransformersConverter(str(zero_start_folder)).convert(str(output))
    return output


def ct2_pieces(converted, opus_mt_folder, lines, beam):
    """CTranslate2's best output of each line: (pieces, whether it ended before the limit).
    Its sources are MarianTokenizer's pieces, </s> included, as CTranslate2's Marian guide
    tokenizes them; its outputs hold no </s>, so an output of LIMIT pieces is one that reached
    the limit unfinished (one that finished holds at most LIMIT - 1 pieces and the </s>)."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(opus_mt_folder),
                                                             local_files_only=True)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"]) for line in lines]
    translator = ctranslate2.Translator(str(converted), device="cpu", compute_type="float32")
    results = translator.translate_batch(sources, beam_size=beam, length_penalty=1.0,
                                         max_decoding_length=LIMIT, max_batch_size=16)
    return [(result.hypotheses[0], len(result.hypotheses[0]) < LIMIT) for result in results]


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_ctranslate2s_converter_translates_the_folder_as_vtx_translates_its_import(
        imported, converted, zero_start_folder, shared_data, tmp_path, beam):
    """Where a beam's best output reached the limit unfinished, the searches differ by rule, not
    by model (as against Transformers, `test_marian`): CTranslate2 ranks its unfinished beams
    with the finished ones at the limit, vtx (as fairseq) keeps a finished one; those lines are
    left out."""
    lines = multi30k_lines(shared_data, "en", LINES)
    found = vtx_hypotheses(imported, lines, tmp_path, "--beam", beam, "--lenpen", "1.0",
                           "--lenpen-formula", "fairseq", "--stop", "fairseq")
    expected = ct2_pieces(converted, zero_start_folder, lines, beam)
    assert len({" ".join(pieces) for pieces, _ in expected}) >= 0.8 * LINES, "outputs must vary"
    compared = [(hypothesis["tokens"], pieces) for hypothesis, (pieces, finished)
                in zip(found, expected) if finished or beam == 1]
    assert len(compared) >= 0.8 * LINES
    assert [ours for ours, _ in compared] == [theirs for _, theirs in compared]
