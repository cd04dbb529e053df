"""`PairVocabulary`: a source and a target SentencePiece model read through one id table."""

import gzip
import io

import pytest
import sentencepiece as spm

from vtx.data.pair_vocab import PairVocabulary, is_pair_vocabulary
from vtx.data.vocab import Vocabulary
from vtx.errors import DataError


def spm_model(shared_data, language: str) -> bytes:
    with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt",
                   encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(500)]
    spm.set_random_generator_seed(1)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                   vocab_size=200, model_type="unigram", minloglevel=2,
                                   num_threads=1)
    return model.getvalue()


@pytest.fixture(scope="module")
def models(shared_data):
    return spm_model(shared_data, "en"), spm_model(shared_data, "de")


def pieces_of(models) -> list[str]:
    """vtx's special pieces, a language token, then both models' pieces once each."""
    seen = ["<pad>", "<unk>", "<s>", "</s>", ">>deu<<"]
    for model in models:
        processor = spm.SentencePieceProcessor(model_proto=model)
        seen += [p for p in (processor.id_to_piece(i) for i in range(processor.get_piece_size()))
                 if p not in seen and p not in ("<unk>", "<s>", "</s>")]
    return seen


def test_sources_and_targets_are_cut_by_their_own_model_and_round_trip_as_bytes(models):
    vocab = PairVocabulary(*models, pieces_of(models), source_suffix=[3])
    source = spm.SentencePieceProcessor(model_proto=models[0])
    target = spm.SentencePieceProcessor(model_proto=models[1])
    line = "A man is riding a bike."
    assert vocab.pieces(vocab.encode_source(line)) == source.encode(line, out_type=str) + ["</s>"]
    german = "Ein Mann fährt Fahrrad."
    assert vocab.pieces(vocab.encode(german)) == target.encode(german, out_type=str)
    assert vocab.decode(vocab.encode(german)) == german
    tagged = vocab.encode_source(">>deu<< A man.")
    assert vocab.pieces(tagged[:1]) == [">>deu<<"] and tagged[1:] == vocab.encode_source("A man.")
    again = Vocabulary.from_bytes(vocab.to_bytes(), "a checkpoint")
    assert is_pair_vocabulary(vocab.to_bytes()) and isinstance(again, PairVocabulary)
    assert again.pieces(range(again.size)) == vocab.pieces(range(vocab.size))
    assert again.encode_source(line) == vocab.encode_source(line)


def test_a_piece_missing_from_the_table_is_unk_and_decodes_to_nothing(models):
    pieces = [p for p in pieces_of(models) if p != "▁Fahrrad"]
    vocab = PairVocabulary(*models, pieces)
    ids = vocab.encode("Ein Fahrrad")
    assert 1 in ids and vocab.decode(ids) == "Ein"


@pytest.mark.parametrize("change,message", [
    (lambda p: ["<unk>", "<pad>"] + p[2:], "its ids 0-3 are"),
    (lambda p: p + ["▁a", "▁a"], "the piece '▁a' has two ids"),
])
def test_a_table_vtx_cannot_read_is_refused_naming_it(models, change, message):
    with pytest.raises(DataError, match=message):
        PairVocabulary(*models, change(pieces_of(models)), name="the table")
    with pytest.raises(DataError, match="source suffix"):
        PairVocabulary(*models, pieces_of(models), source_suffix=[10**6])


def test_subword_sampling_is_refused_by_name(models):
    with pytest.raises(DataError, match="subword sampling .*--subword-alpha"):
        PairVocabulary(*models, pieces_of(models), name="x").sample_batch(["A."], 0.1, None, 1)
