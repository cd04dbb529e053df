"""`preprocess`: vocabulary + shards + meta.json; filtering of training pairs only; atomic output."""

import json
import shutil

import numpy as np
import pytest

from tests.data.conftest import (SMALL_VOCAB, TRAIN_LINES, VALID_LINES, head, read_shard,
                                 write_lines)
from vtx.data.preprocess import PreprocessConfig, preprocess, read_symbols
from vtx.data.vocab import Vocabulary
from vtx.errors import DataError


def shard_contents(data_dir, meta, split):
    """All (source ids, target ids) of a split, read back with numpy, in stored order."""
    pairs = []
    for shard in meta["splits"][split]["shards"]:
        sources, targets = read_shard(data_dir / shard["name"], meta["token_dtype"])
        assert len(sources) == shard["sentences"]
        assert sum(map(len, sources)) == shard["source_tokens"]
        assert sum(map(len, targets)) == shard["target_tokens"]
        pairs.extend(zip(sources, targets))
    return pairs


def test_meta_counts_equal_shard_contents(small_data_dir):
    meta = json.loads((small_data_dir / "meta.json").read_text())
    assert meta["vocab"]["size"] == SMALL_VOCAB
    assert (meta["source_lang"], meta["target_lang"]) == ("en", "de")
    for split, lines in (("train", TRAIN_LINES), ("valid", VALID_LINES)):
        pairs = shard_contents(small_data_dir, meta, split)
        counts = meta["splits"][split]
        assert counts["sentences"] == len(pairs) == lines - sum(counts["filtered"].values())
        assert counts["source_tokens"] == sum(len(s) for s, _ in pairs)
        assert counts["target_tokens"] == sum(len(t) for _, t in pairs)
        assert counts["max_source_length"] == max(len(s) for s, _ in pairs)
        assert counts["max_target_length"] == max(len(t) for _, t in pairs)
    assert len(meta["splits"]["train"]["shards"]) == -(-TRAIN_LINES // 300)


def test_shards_hold_the_encoded_text_in_order(small_corpus, small_data_dir):
    meta = json.loads((small_data_dir / "meta.json").read_text())
    vocab = Vocabulary(small_data_dir / "spm.model")
    pairs = shard_contents(small_data_dir, meta, "valid")
    sources = (small_corpus / "valid.en").read_text().splitlines()
    targets = (small_corpus / "valid.de").read_text().splitlines()
    for (source_ids, target_ids), source, target in zip(pairs, sources, targets):
        assert source_ids.tolist() == vocab.encode(source)
        assert target_ids.tolist() == vocab.encode(target)


def test_two_workers_write_the_same_shards_as_one(small_corpus, small_data_dir, tmp_path):
    destdir = tmp_path / "two"
    preprocess(PreprocessConfig("en", "de", destdir, trainpref=str(small_corpus / "train"),
                                validpref=str(small_corpus / "valid"),
                                spm_model=small_data_dir / "spm.model", workers=2,
                                shard_size=300))
    names = sorted(p.name for p in small_data_dir.glob("*.bin"))
    assert names == sorted(p.name for p in destdir.glob("*.bin"))
    for name in names:
        for suffix in (".bin", ".idx"):
            stem = name.removesuffix(".bin")
            assert ((destdir / (stem + suffix)).read_bytes()
                    == (small_data_dir / (stem + suffix)).read_bytes())


def noisy_pairs(shared_data):
    """20 clean Multi30k pairs plus pairs that each training filter must drop."""
    en = head(shared_data / "multi30k" / "train.en.gz", 20)
    de = head(shared_data / "multi30k" / "train.de.gz", 20)
    long_text = " ".join(["word"] * 200)
    en += ["", "A dog.", "   ", long_text, "Yes", "Ok"]
    de += ["", "", "Ein Hund.", long_text, " ".join(["Ja"] * 20), "Gut"]
    return en, de  # filtered: 3 empty, 1 too_long, 1 length_ratio; "Ok"/"Gut" is kept


def test_training_pairs_are_filtered_and_counted_but_valid_and_test_are_not(
        shared_data, small_data_dir, tmp_path):
    en, de = noisy_pairs(shared_data)
    too_long = en.index(" ".join(["word"] * 200))
    write_lines(tmp_path / "train.en", en)
    write_lines(tmp_path / "train.de.gz", de)
    for split in ("valid", "test"):  # every kind of noise but the one pair too long to keep
        write_lines(tmp_path / f"{split}.en", en[:too_long] + en[too_long + 1:])
        write_lines(tmp_path / f"{split}.de.gz", de[:too_long] + de[too_long + 1:])
    meta = preprocess(PreprocessConfig(
        "en", "de", tmp_path / "bin", trainpref=str(tmp_path / "train"),
        validpref=str(tmp_path / "valid"), testprefs=(str(tmp_path / "test"),),
        spm_model=small_data_dir / "spm.model", max_positions=64, max_length_ratio=3.0))
    train = meta["splits"]["train"]
    assert train["filtered"] == {"empty": 3, "too_long": 1, "length_ratio": 1}
    assert train["sentences"] == len(en) - 5
    for split in ("valid", "test"):
        assert meta["splits"][split]["sentences"] == len(en) - 1
        assert sum(meta["splits"][split]["filtered"].values()) == 0
    on_disk = json.loads((tmp_path / "bin" / "meta.json").read_text())
    assert on_disk["splits"]["train"]["filtered"] == train["filtered"]


def test_keep_train_text_keeps_the_text_of_the_kept_training_pairs_only(shared_data,
                                                                       small_data_dir, tmp_path):
    """The text `vtx train --subword-alpha` samples anew: line for line the kept pairs' (the
    filtered ones left out, as in the ids), checksummed; validation keeps none."""
    from vtx.data.directory import DataDirectory

    en, de = noisy_pairs(shared_data)
    for split in ("train", "valid"):
        write_lines(tmp_path / f"{split}.en", en if split == "train" else en[:20])
        write_lines(tmp_path / f"{split}.de", de if split == "train" else de[:20])
    preprocess(PreprocessConfig(
        "en", "de", tmp_path / "bin", trainpref=str(tmp_path / "train"),
        validpref=str(tmp_path / "valid"), spm_model=small_data_dir / "spm.model",
        max_positions=64, max_length_ratio=3.0, shard_size=10, keep_train_text=True))
    data = DataDirectory.open(tmp_path / "bin")
    assert data.has_training_text and data.meta["keep_train_text"]
    texts = [data.shard_text(shard) for shard in data.split("train")["shards"]]
    assert [line for source, _ in texts for line in source] == en[:20] + ["Ok"]
    assert [line for _, target in texts for line in target] == de[:20] + ["Gut"]
    assert not list((tmp_path / "bin").glob("valid.*.txt"))
    assert not DataDirectory.open(small_data_dir).has_training_text


def test_progress_counts_every_pair_kept_or_filtered_shard_by_shard(shared_data, small_data_dir,
                                                                   tmp_path, monkeypatch):
    """`vtx preprocess` on WMT-size text runs for many minutes: each split's pairs encoded so
    far, out of its lines, with the time left (here a line for every shard of 5: no interval)."""
    import functools

    from vtx.data import preprocess as module
    from vtx.progress_lines import LineProgress

    monkeypatch.setattr(module, "LineProgress", functools.partial(LineProgress, interval=0))
    en, de = noisy_pairs(shared_data)
    write_lines(tmp_path / "train.en", en)
    write_lines(tmp_path / "train.de.gz", de)
    said = []
    meta = preprocess(PreprocessConfig(
        "en", "de", tmp_path / "bin", trainpref=str(tmp_path / "train"), shard_size=5,
        spm_model=small_data_dir / "spm.model", max_positions=64, max_length_ratio=3.0),
        log=said.append)
    train = meta["splits"]["train"]
    assert train["sentences"] < len(en)  # some filtered: counted all the same
    done = [int(line.split()[2]) for line in said if line.startswith("train: encoded ")]
    assert done == [5, 10, 15, 20, 25], said  # the 5 filtered pairs among the last 6 counted
    assert all(f" of {len(en)} lines (" in line and " left" in line
               for line in said if line.startswith("train: encoded "))


def test_a_validation_pair_longer_than_the_positions_is_refused_with_its_line(
        shared_data, small_data_dir, tmp_path):
    en, de = noisy_pairs(shared_data)
    too_long = en.index(" ".join(["word"] * 200))
    write_lines(tmp_path / "train.en", en[:20])
    write_lines(tmp_path / "train.de", de[:20])
    write_lines(tmp_path / "valid.en", en)
    write_lines(tmp_path / "valid.de", de)
    with pytest.raises(DataError, match=rf"valid.en / .*valid.de, line {too_long + 1}: \d+ "
                                        rf"source and \d+ target ids \(\+1 for eos\), more "
                                        rf"than --max-positions 64"):
        preprocess(PreprocessConfig(
            "en", "de", tmp_path / "bin", trainpref=str(tmp_path / "train"),
            validpref=str(tmp_path / "valid"), spm_model=small_data_dir / "spm.model",
            max_positions=64))
    assert not (tmp_path / "bin").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_spm_model_is_reused_and_copied(small_corpus, small_data_dir, tmp_path):
    meta = preprocess(PreprocessConfig("en", "de", tmp_path / "bin",
                                       validpref=str(small_corpus / "valid"),
                                       spm_model=small_data_dir / "spm.model"))
    assert meta["vocab"]["trained"] is False
    assert list(meta["splits"]) == ["valid"]
    assert ((tmp_path / "bin" / "spm.model").read_bytes()
            == (small_data_dir / "spm.model").read_bytes())
    assert ((tmp_path / "bin" / "valid.00000.bin").read_bytes()
            == (small_data_dir / "valid.00000.bin").read_bytes())


def test_force_replaces_an_existing_directory_only_at_the_end(small_corpus, small_data_dir,
                                                              tmp_path):
    destdir = tmp_path / "bin"
    shutil.copytree(small_data_dir, destdir)  # an earlier data directory, the only kind replaced
    (destdir / "old.txt").write_text("old")
    config = dict(source_lang="en", target_lang="de", destdir=destdir,
                  validpref=str(small_corpus / "valid"), spm_model=small_data_dir / "spm.model")
    with pytest.raises(DataError, match="exists and is not empty"):
        preprocess(PreprocessConfig(**config))
    preprocess(PreprocessConfig(**config, force=True))
    assert not (destdir / "old.txt").exists() and not (destdir / "train.00000.bin").exists()
    assert (destdir / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]  # no temporary left behind


def test_failed_run_leaves_nothing_behind(small_corpus, small_data_dir, tmp_path):
    (tmp_path / "bad.en").write_bytes(b"fine\nbad \xc3\x28 byte\n")
    (tmp_path / "bad.de").write_bytes(b"gut\nschlecht\n")
    with pytest.raises(DataError, match=r"bad\.en:2: invalid UTF-8"):
        preprocess(PreprocessConfig("en", "de", tmp_path / "out", workers=2,
                                    trainpref=str(small_corpus / "train"),
                                    testprefs=(str(tmp_path / "bad"),), vocab_size=600))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.de", "bad.en"]


@pytest.mark.parametrize("flag", ["validpref", "testpref"])
def test_empty_validation_or_test_files_are_refused_naming_the_flag(small_corpus, tmp_path,
                                                                     flag):
    """A split of 0 pairs was written, and `vtx train` validated on it: loss 0, ppl 1, best."""
    write_lines(tmp_path / "void.en", [])
    write_lines(tmp_path / "void.de", [])
    prefix = str(tmp_path / "void")
    evaluation = dict(validpref=prefix) if flag == "validpref" else dict(testprefs=(prefix,))
    with pytest.raises(DataError, match=rf"--{flag}: .*void\.en and .*void\.de are empty"):
        preprocess(PreprocessConfig("en", "de", tmp_path / "out", vocab_size=600,
                                    trainpref=str(small_corpus / "train"), **evaluation))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes,message", [
    (dict(trainpref=None), "--trainpref is needed"),
    (dict(target_lang="en"), "are both 'en'"),
    (dict(vocab_size=4), "--vocab-size 4 leaves no room"),
    (dict(sample_lines=100), "--sample-lines 100: SentencePiece trains on more than 100"),
    (dict(workers=0), "--workers must be positive, got 0"),
    (dict(max_length_ratio=0.5), "--max-length-ratio must be >= 1, got 0.5"),
])
def test_bad_settings_name_the_flag_and_value(tmp_path, changes, message):
    config = dict(source_lang="en", target_lang="de", destdir=tmp_path / "x", trainpref="t")
    with pytest.raises(DataError, match=message):
        PreprocessConfig(**{**config, **changes})


def test_full_multi30k_with_vocabulary_8000(shared_data, tmp_path):
    prefix = shared_data / "multi30k"
    meta = preprocess(PreprocessConfig(
        "en", "de", tmp_path / "bin", trainpref=str(prefix / "train"),
        validpref=str(prefix / "val"), testprefs=(str(prefix / "test_2016_flickr"),),
        vocab_size=8000))
    counts = {name: split["sentences"] for name, split in meta["splits"].items()}
    assert counts == {"train": 29000, "valid": 1014, "test": 1000}
    assert meta["vocab"]["size"] == 8000 and meta["token_dtype"] == "<u2"
    pairs = shard_contents(tmp_path / "bin", meta, "train")
    assert len(pairs) == 29000
    assert max(int(np.max(s)) for s, _ in pairs) < 8000


def test_whole_word_symbols_file_errors_name_file_and_line(small_corpus, tmp_path):
    symbols = tmp_path / "symbols.txt"
    symbols.write_text("(NP\n\n)NP (VP\n")
    config = dict(source_lang="en", target_lang="de", destdir=tmp_path / "out",
                  trainpref=str(small_corpus / "train"), vocab_size=600)
    with pytest.raises(DataError, match=r"symbols\.txt, line 3: one symbol a line"):
        preprocess(PreprocessConfig(**config, whole_word_symbols=symbols))
    with pytest.raises(DataError, match="cannot read it"):
        preprocess(PreprocessConfig(**config, whole_word_symbols=tmp_path / "missing.txt"))
    assert not (tmp_path / "out").exists()
    with pytest.raises(DataError, match="cannot change --spm-model"):
        PreprocessConfig(**config, spm_model=tmp_path / "spm.model", whole_word_symbols=symbols)


def test_repeated_whole_word_symbols_are_kept_once(small_corpus, tmp_path):
    """SentencePiece refuses a symbol defined twice; a repeat in the file is harmless."""
    symbols = tmp_path / "symbols.txt"
    symbols.write_text("(NP\n)NP\n(NP\n\n)NP\n(VP\n")
    assert read_symbols(symbols) == ["(NP", ")NP", "(VP"]
    preprocess(PreprocessConfig("en", "de", tmp_path / "out", trainpref=str(small_corpus / "train"),
                                vocab_size=600, whole_word_symbols=symbols))
    vocab = Vocabulary(tmp_path / "out" / "spm.model")
    assert [len(vocab.encode(word)) for word in ("(NP", ")NP", "(VP")] == [1, 1, 1]
