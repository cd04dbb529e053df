"""The joint SentencePiece vocabulary: fixed special ids, round trip, rejection of foreign models."""

import collections
import subprocess
import sys
import unicodedata

import pytest
import sentencepiece as spm

from tests.data.conftest import head
from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.data.vocab import Vocabulary, sample, train_sentencepiece
from vtx.errors import DataError, VocabularyTooSmallError


def nmt_normalized(text: str) -> str:
    """What SentencePiece's default nmt_nfkc normalization makes of a sentence."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def lines(shared_data) -> list[str]:
    multi30k = shared_data / "multi30k"
    return head(multi30k / "train.en.gz", 1500) + head(multi30k / "train.de.gz", 1500)


def test_trained_vocabulary_has_fixed_special_ids_and_size(lines, tmp_path):
    vocab = train_sentencepiece(iter(lines), tmp_path / "spm.model", vocab_size=800)
    assert vocab.size == 800
    assert vocab.pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_encode_decode_round_trip(lines, shared_data, tmp_path):
    vocab = train_sentencepiece(iter(lines), tmp_path / "spm.model", vocab_size=800)
    # Unseen sentences with digits and NBSP: byte fallback keeps rare characters (no <unk>).
    unseen = head(shared_data / "multi30k" / "val.de.gz", 300) + ["Größe 4\u00a0m, ½ € — ok"]
    for text in unseen:
        ids = vocab.encode(text)
        assert UNK_ID not in ids
        assert vocab.decode(ids) == nmt_normalized(text)
    assert vocab.encode_batch(unseen[:5]) == [vocab.encode(text) for text in unseen[:5]]
    assert vocab.decode([BOS_ID] + vocab.encode("a dog") + [EOS_ID, PAD_ID]) == "a dog"


TRAIN_IN_A_PROCESS = """
import sys
from pathlib import Path
from vtx.data.vocab import train_sentencepiece
lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
train_sentencepiece(iter(lines), Path(sys.argv[2]), 600, sample_lines=int(sys.argv[3]),
                    seed=int(sys.argv[4]))
"""


def test_sampled_training_is_reproducible_across_processes(lines, tmp_path):
    # SentencePiece's own sample gave another model in each process whatever its seed, so
    # `vtx preprocess` of a corpus over --sample-lines never gave the same ids twice.
    text = tmp_path / "text.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def model(name: str, sample_lines: int, seed: int) -> bytes:
        subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, text, tmp_path / name,
                        str(sample_lines), str(seed)], check=True)
        return (tmp_path / name).read_bytes()

    first, second = model("a.model", 1000, 3), model("b.model", 1000, 3)
    assert first == second
    assert model("c.model", 1000, 4) != first  # the seed draws another sample
    assert model("d.model", 2000, 3) != first
    everything = model("e.model", len(lines) + 1, 3)  # no sample: every line
    assert model("f.model", len(lines) + 1, 3) == everything


def test_sample_is_the_whole_stream_when_it_fits_and_uniform_otherwise():
    assert sample(iter(["a", "b", "c"]), 3, seed=1) == ["a", "b", "c"]
    assert sample(iter(["a", "b"]), 5, seed=1) == ["a", "b"]
    assert sample([], 5, seed=1) == []
    drawn = sample(range(10**5), 1000, seed=7)
    assert len(drawn) == len(set(drawn)) == 1000
    assert drawn == sample(range(10**5), 1000, seed=7)
    assert drawn != sample(range(10**5), 1000, seed=8)
    # Every tenth of the stream gets about a tenth of the sample (each count is binomial,
    # n=1000, p=0.1: sd 9.5); the later items enter by the skips, the first 1000 by the fill.
    per_tenth = collections.Counter(item // 10**4 for item in drawn)
    assert all(60 <= per_tenth[tenth] <= 140 for tenth in range(10)), per_tenth
    with pytest.raises(ValueError, match="sample size"):
        sample(["a"], 0, seed=1)


def test_model_with_other_special_ids_is_rejected(lines, tmp_path):
    # SentencePiece's own defaults: unk 0, bos 1, eos 2, no pad.
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), vocab_size=600,
                                   model_prefix=str(tmp_path / "foreign"), minloglevel=2)
    with pytest.raises(DataError, match=r"foreign\.model has special ids .*'pad': -1"):
        Vocabulary(tmp_path / "foreign.model")


def test_unreadable_model_is_named(tmp_path):
    (tmp_path / "junk.model").write_text("not a model")
    with pytest.raises(DataError, match=r"cannot load SentencePiece model .*junk\.model"):
        Vocabulary(tmp_path / "junk.model")


def test_vocabulary_too_large_for_the_text_is_reported(lines, tmp_path):
    with pytest.raises(DataError, match="SentencePiece training failed .*vocab size 50000"):
        train_sentencepiece(iter(lines[:200]), tmp_path / "spm.model", vocab_size=50000)
    assert not (tmp_path / "spm.model").exists()


def test_vocabulary_too_small_for_the_characters_gives_the_minimum_that_trains(lines, tmp_path):
    """SentencePiece's "5 vs 316 ... --character_coverage" read as the size and the minimum."""
    with pytest.raises(VocabularyTooSmallError) as refused:
        train_sentencepiece(iter(lines[:200]), tmp_path / "spm.model", vocab_size=50)
    assert refused.value.vocab_size == 50 and refused.value.minimum > 260  # specials + bytes
    assert "character_coverage" not in str(refused.value)
    assert not (tmp_path / "spm.model").exists()
    minimum = refused.value.minimum
    assert train_sentencepiece(iter(lines[:200]), tmp_path / "spm.model", minimum).size == minimum


def test_error_raised_by_the_text_reader_surfaces_unchanged(lines, tmp_path):
    def broken():
        yield from lines[:100]
        raise DataError("x.de:101: invalid UTF-8")

    with pytest.raises(DataError, match=r"^x\.de:101: invalid UTF-8$"):
        train_sentencepiece(broken(), tmp_path / "spm.model", vocab_size=600)


def test_whole_word_symbols_stay_one_piece_at_word_starts_only(lines, tmp_path):
    brackets = ["(NP", ")NP", "(S", ")S"]
    trees = ["(S (NP XX XX )NP (NP XX )NP )S"] * 200
    vocab = train_sentencepiece(iter(lines + trees), tmp_path / "spm.model", vocab_size=800,
                                whole_words=brackets)
    tree = "(S (NP XX )NP )S"
    assert vocab.pieces(vocab.encode(tree))[:2] == ["\u2581(S", "\u2581(NP"]
    assert len(vocab.encode(tree)) == 5 and vocab.decode(vocab.encode(tree)) == tree
    # Inside a word the symbol is not matched: "a(NP" is not cut into "a" + "(NP".
    assert "\u2581(NP" not in vocab.pieces(vocab.encode("a(NP"))
    assert vocab.decode(vocab.encode("a(NP")) == "a(NP"


def test_whole_word_symbols_reject_whitespace(lines, tmp_path):
    with pytest.raises(DataError, match="'\\(N P' is empty or holds whitespace"):
        train_sentencepiece(iter(lines), tmp_path / "spm.model", 800, whole_words=["(N P"])
