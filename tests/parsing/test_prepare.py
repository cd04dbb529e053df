from pathlib import Path

import pytest

from vtx.errors import TreeSyntaxError
from vtx.parsing import prepare, trees
from vtx.parsing.linearize import delinearize


def _ldc_layout(root: Path, sample_files: list[Path]) -> Path:
    """wsj/SS/wsj_SS01.mrg for sections 00-24, each a symlink to one sample file (nothing copied)."""
    for section in range(25):
        folder = root / "wsj" / f"{section:02d}"
        folder.mkdir(parents=True)
        (folder / f"wsj_{section:02d}01.mrg").symlink_to(sample_files[section])
    return root


def test_wsj_split_uses_sections_02_21_22_23(tmp_path, sample_files):
    splits = prepare.wsj_split(_ldc_layout(tmp_path, sample_files))
    assert [p.name for p in splits["train"]] == [f"wsj_{s:02d}01.mrg" for s in range(2, 22)]
    assert [p.name for p in splits["valid"]] == ["wsj_2201.mrg"]
    assert [p.name for p in splits["test"]] == ["wsj_2301.mrg"]
    assert prepare.wsj_split(tmp_path / "wsj") == splits


def test_wsj_split_names_a_missing_section(tmp_path, sample_files):
    _ldc_layout(tmp_path, sample_files)
    (tmp_path / "wsj" / "22" / "wsj_2201.mrg").unlink()
    with pytest.raises(FileNotFoundError, match="22"):
        prepare.wsj_split(tmp_path)


def test_prepare_writes_aligned_words_trees_and_gold(tmp_path, sample_files):
    splits = {"train": sample_files[:3], "valid": sample_files[3:5]}
    summaries = prepare.prepare(splits, tmp_path / "out")
    expected_train = sum(len(trees.read_mrg(p)) for p in sample_files[:3])
    assert summaries["train"] == prepare.SplitSummary(files=3, sentences=expected_train, dropped=0)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "brackets.txt", "train.gold", "train.trees", "train.words", "valid.gold", "valid.trees",
        "valid.words"]
    for prefix in splits:
        words, targets, golds = ((tmp_path / "out" / f"{prefix}.{suffix}").read_text().splitlines()
                                 for suffix in prepare.SUFFIXES)
        assert len(words) == len(targets) == len(golds) == summaries[prefix].sentences
        for sentence, target, gold_line in zip(words, targets, golds):
            gold = trees.parse_tree(gold_line)
            assert sentence.split() == gold.leaves()
            tags = [tag for _, tag in gold.tagged_words()]
            assert delinearize(target.split(), sentence.split(), tags)[0] == gold
            assert "XX" in target.split()


def test_brackets_file_lists_each_training_bracket_once(tmp_path, sample_files):
    prepare.prepare({"train": sample_files[:3], "valid": sample_files[3:5]}, tmp_path)
    brackets = (tmp_path / prepare.BRACKETS_FILE).read_text().splitlines()
    in_train = {t for line in (tmp_path / "train.trees").read_text().splitlines()
                for t in line.split() if t != "XX"}
    assert sorted(in_train) == brackets
    assert {"(S", ")S", "(NP", ")NP"} <= set(brackets)


def test_prepare_keep_tags(tmp_path, sample_files):
    prepare.prepare({"train": sample_files[:1]}, tmp_path, slots="tags")
    first = (tmp_path / "train.trees").read_text().splitlines()[0].split()
    assert first[:5] == ["(S", "(NP", "(NP", "NNP", "NNP"]


def test_prepare_drops_trees_with_only_empty_elements(tmp_path):
    source = tmp_path / "wsj_9901.mrg"
    source.write_text("( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))) )\n( (S (NP (NN a)) (VP (VB b))) )\n")
    summary = prepare.prepare({"test": [source]}, tmp_path / "out")["test"]
    assert (summary.sentences, summary.dropped) == (1, 1)
    assert (tmp_path / "out" / "test.words").read_text() == "a b\n"


def test_a_malformed_file_leaves_nothing_behind(tmp_path, sample_files):
    bad = tmp_path / "bad.mrg"
    bad.write_text("( (S (NP (NN a)) )\n")
    out = tmp_path / "out"
    with pytest.raises(TreeSyntaxError, match="bad.mrg"):
        prepare.prepare({"train": sample_files[:2], "valid": [bad]}, out)
    assert not out.exists()  # the folder it created is removed too


def test_train_subtrees_adds_each_long_phrase_of_training_trees_only(tmp_path):
    source = tmp_path / "wsj_9901.mrg"
    source.write_text("( (S (NP-SBJ (DT The) (JJ old) (NN man)) (VP (VBD saw) (NP (DT a) (NN dog))"
                      " (PP (IN in) (NP (DT the) (NN park)))) (. .)) )\n")
    summaries = prepare.prepare({"train": [source], "valid": [source]}, tmp_path / "out",
                                slots="words", train_subtrees=3)
    read = lambda name: (tmp_path / "out" / name).read_text().splitlines()
    # The sentence, then its phrases of >= 3 words in pre-order (the subject NP, the VP, the PP);
    # not the 2-word NPs, the preterminals, nor the root S.
    assert read("train.words") == ["The old man saw a dog in the park .", "The old man",
                                   "saw a dog in the park", "in the park"]
    assert read("train.trees")[1:] == ["(NP The old man )NP",
                                       "(VP saw (NP a dog )NP (PP in (NP the park )NP )PP )VP",
                                       "(PP in (NP the park )NP )PP"]
    assert read("train.gold")[3] == "(TOP (PP (IN in) (NP (DT the) (NN park))))"
    assert summaries["train"].sentences == 4
    assert read("valid.words") == ["The old man saw a dog in the park ."]
    for words, target, gold in zip(read("train.words"), read("train.trees"), read("train.gold")):
        tags = [tag for _, tag in trees.parse_tree(gold).tagged_words()]
        assert delinearize(target.split(), words.split(), tags)[0] == trees.parse_tree(gold)
