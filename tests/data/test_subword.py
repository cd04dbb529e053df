"""`vtx.data.subword`: each epoch's training pairs sampled anew from the kept text, the same for
the same (seed, epoch), deterministic where the batch shapes do not hold them."""

import json

import numpy as np
import pytest

from tests.data.conftest import head, read_shard, write_lines
from vtx.data import pipeline
from vtx.data.directory import DataDirectory
from vtx.data.preprocess import PreprocessConfig, preprocess
from vtx.data.subword import SubwordSampler, check_sampling
from vtx.errors import ArgumentError, DataError

PAIRS = 300


def everything(source, target):
    return np.ones(len(source), bool)


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("subword_corpus")
    for lang in ("en", "de"):
        write_lines(folder / f"train.{lang}", head(shared_data / "multi30k" / f"train.{lang}.gz",
                                                   PAIRS))
        write_lines(folder / f"valid.{lang}", head(shared_data / "multi30k" / f"val.{lang}.gz",
                                                   20))
    return folder


def preprocessed(corpus, destdir, model_type="bpe", keep_train_text=True) -> DataDirectory:
    preprocess(PreprocessConfig("en", "de", destdir, trainpref=str(corpus / "train"),
                                validpref=str(corpus / "valid"), vocab_size=400,
                                model_type=model_type, shard_size=120,
                                keep_train_text=keep_train_text))
    return DataDirectory.open(destdir)


@pytest.fixture(scope="module")
def data(corpus, tmp_path_factory) -> DataDirectory:
    return preprocessed(corpus, tmp_path_factory.mktemp("subword_data") / "bin")


def pairs_of(directory: DataDirectory) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for shard in directory.split("train")["shards"]:
        sources, targets = read_shard(directory.shard_prefix(shard), directory.meta["token_dtype"])
        pairs += [(s.tolist(), t.tolist()) for s, t in zip(sources, targets)]
    return pairs


def test_each_epoch_samples_other_pieces_that_decode_to_the_same_text(data, tmp_path):
    sampler = SubwordSampler(data, 0.1, None, seed=1, folder=tmp_path)
    first, second = (pairs_of(sampler.epoch(epoch, everything)) for epoch in (0, 1))
    deterministic = pairs_of(data)
    assert len(first) == len(second) == len(deterministic) == PAIRS
    vocab = data.load_vocabulary()
    # The text as SentencePiece normalizes it (e.g. two spaces as one), as the preprocessed ids.
    texts = [[vocab.decode(ids) for ids in side] for side in zip(*deterministic)]
    for pairs in (first, second):
        assert [[vocab.decode(ids) for ids in side] for side in zip(*pairs)] == texts
    # BPE-dropout at 0.1 leaves few sentences of ~12 words whole.
    assert sum(a != b for a, b in zip(first, second)) > 0.9 * PAIRS
    assert sum(a != b for a, b in zip(first, deterministic)) > 0.9 * PAIRS
    lengths = [sum(len(s) + len(t) for s, t in pairs) for pairs in (first, deterministic)]
    assert lengths[0] > lengths[1]


def test_the_same_seed_and_epoch_give_the_same_segmentation(data, tmp_path):
    def epoch(seed, number, folder):
        return pairs_of(SubwordSampler(data, 0.1, None, seed, tmp_path / folder)
                        .epoch(number, everything))

    assert epoch(1, 3, "a") == epoch(1, 3, "b")
    assert epoch(1, 3, "a") != epoch(2, 3, "c")
    assert epoch(1, 3, "a") != epoch(1, 4, "d")


def test_a_sampled_pair_that_no_batch_shape_holds_keeps_its_preprocessed_ids(data, tmp_path):
    lines = []
    deterministic = pairs_of(data)
    longest = max(max(len(s), len(t) + 1) for s, t in deterministic)
    sampled = pairs_of(SubwordSampler(data, 0.1, None, 1, tmp_path / "a").epoch(0, everything))
    too_long = [max(len(s), len(t) + 1) > longest for s, t in sampled]
    assert any(too_long)
    epoch = pairs_of(SubwordSampler(data, 0.1, None, 1, tmp_path / "b", lines.append).epoch(
        0, lambda source, target: np.maximum(source, target) <= longest))
    assert epoch == [old if long else new
                     for old, new, long in zip(deterministic, sampled, too_long)]
    assert f" {sum(too_long)} of {PAIRS} pairs kept deterministic" in lines[-1]


def test_the_shapes_view_holds_the_preprocessed_and_the_sampled_pairs(data, tmp_path):
    sampler = SubwordSampler(data, 0.1, None, 1, tmp_path)
    view = sampler.shapes_view(max_positions=1024)
    assert view.split("train")["sentences"] == 2 * PAIRS
    assert view.split("valid") == data.split("valid")  # never sampled
    source, target = pipeline._side_lengths(view, ("train",))
    epoch = pairs_of(sampler.epoch(0, everything))
    assert source.tolist() == [len(s) for s, _ in pairs_of(data) + epoch]
    assert target.tolist() == [len(t) + 1 for _, t in pairs_of(data) + epoch]


def test_only_the_two_newest_epochs_are_kept_on_disk(data, tmp_path):
    sampler = SubwordSampler(data, 0.1, None, 1, tmp_path)
    for epoch in range(4):
        sampler.epoch(epoch, everything)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["epoch-000002", "epoch-000003"]


def test_a_data_dir_without_training_text_is_refused_naming_it_and_the_flag(corpus, tmp_path):
    older = preprocessed(corpus, tmp_path / "older", keep_train_text=False)
    with pytest.raises(DataError, match=f"^{older} keeps no text of its training pairs .* run "
                                        f"`vtx preprocess` again with --keep-train-text$"):
        check_sampling(older, 0.1, None)


def test_bpe_refuses_an_alpha_past_1_and_an_nbest(data):
    with pytest.raises(ArgumentError, match=r"^subword_alpha 1.5: .* in \(0, 1\]$"):
        check_sampling(data, 1.5, None)
    with pytest.raises(ArgumentError, match="^subword_nbest 4 goes with a unigram vocabulary"):
        check_sampling(data, 0.1, 4)


def test_a_unigram_vocabulary_samples_among_the_nbest(corpus, tmp_path):
    unigram = preprocessed(corpus, tmp_path / "unigram", model_type="unigram")
    assert check_sampling(unigram, 0.5, 8) == "unigram"
    sampler = SubwordSampler(unigram, 0.5, 8, 1, tmp_path / "epochs")
    first, second = (pairs_of(sampler.epoch(epoch, everything)) for epoch in (0, 1))
    assert first != second
    vocab = unigram.load_vocabulary()
    assert [vocab.decode(s) for s, _ in first] == [vocab.decode(s) for s, _ in second]


def test_a_damaged_text_shard_is_named(corpus, tmp_path):
    damaged = preprocessed(corpus, tmp_path / "bin")
    shard = damaged.split("train")["shards"][0]
    path = tmp_path / "bin" / f"{shard['name']}.txt"
    path.write_bytes(path.read_bytes().replace(b"a", b"e", 1))
    with pytest.raises(DataError, match=f"^{path}: damaged since `vtx preprocess` wrote it"):
        SubwordSampler(damaged, 0.1, None, 1, tmp_path / "epochs").epoch(0, everything)


def test_an_epoch_directory_is_a_data_directory_of_the_training_split(data, tmp_path):
    epoch = SubwordSampler(data, 0.1, None, 7, tmp_path).epoch(2, everything)
    meta = json.loads((epoch.path / "meta.json").read_text())
    assert list(meta["splits"]) == ["train"]
    assert meta["subword"] == {"data_dir": str(data.path), "epoch": 2, "seed": 7, "alpha": 0.1,
                               "nbest": None}
    assert epoch.vocab_size == data.vocab_size
