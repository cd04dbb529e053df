"""The WSJ parsing recipe (recipes/wsj_parsing/small.sh) end to end at toy size: prepare-parse,
preprocess, train, each checkpoint scored on test, dev and test parsed, EVALB F1 printed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from vtx.parsing.trees import parse_tree

DEV_FILE = "wsj_0160.mrg"  # 5 sentences
TEST_FILE = "wsj_0157.mrg"  # 7 sentences


@pytest.mark.slow
def test_small_recipe_runs_end_to_end_and_prints_dev_and_test_f1(shared_data, tmp_path):
    """With self-training: a teacher trained on the sample parses raw news sentences, and the
    student goes on from it on both; each stops at its own update cap."""
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    for source in sorted((shared_data / "ptb_sample").glob("wsj_0*.mrg"))[:160]:  # 0001-0160
        (ptb / source.name).symlink_to(source)
    # 14 lines: two hold quotes (the treebank's ``), the last one is over 35 words.
    news = (shared_data / "wmt14" / "newstest2014-deen.en").read_text().splitlines()[:14]
    raw = tmp_path / "news.en"
    raw.write_text("".join(line + "\n" for line in news + news))  # each kept once
    env = {**os.environ, "PTB": str(ptb), "DEV": DEV_FILE, "TEST": TEST_FILE,
           "WORK": str(tmp_path / "work"), "STEPS": "4", "TEACHER_STEPS": "2",
           "VALIDATE": "4", "COOLDOWN": "0.5",
           "SILVER": str(raw), "VTX": str(Path(sys.executable).with_name("vtx"))}
    result = subprocess.run(["bash", str(REPO_ROOT / "recipes" / "wsj_parsing" / "small.sh")],
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # A 4-update model places no bracket right: F1 may be EVALB's nan (precision = recall = 0).
    for prefix in ("valid", "test"):
        match = re.search(rf"^{prefix} F1 \(all sentences\): (\d+\.\d+|nan)$", result.stdout,
                          re.MULTILINE)
        assert match, result.stdout[-3000:]
    assert "Bracketing Recall" in result.stdout and "wall time:" in result.stdout
    assert "the learning rate falls linearly to 0 over steps 3-4" in result.stderr
    work = tmp_path / "work"
    # The silver trees: one per sentence of 5-35 words, over its treebank tokens, trained on.
    kept = list(dict.fromkeys(line for line in news if 5 <= len(line.split()) <= 35))
    assert len(kept) == len(news) - 1
    assert (work / "silver" / "sentences.txt").read_text().splitlines() == kept
    silver = [parse_tree(line).leaves()
              for line in (work / "silver" / "silver.mrg").read_text().splitlines()]
    assert len(silver) == len(kept) and "``" in sum(silver, [])
    train_words = (work / "text" / "train.words").read_text().splitlines()
    assert {" ".join(leaves) for leaves in silver} <= set(train_words)
    assert f"fine-tuning from {work / 'teacher' / 'start.npz'} (step 2)" in result.stderr
    for prefix, count in (("valid", 5), ("test", 7)):
        trees = (work / f"{prefix}.parsed").read_text().splitlines()
        words = (work / "text" / f"{prefix}.words").read_text().splitlines()
        assert len(trees) == len(words) == count
        for tree, sentence in zip(trees, words):  # well-formed, over exactly the input words
            assert parse_tree(tree).leaves() == sentence.split()
    # The test set is held out of training: none of its sentences is a training source.
    train = set((work / "text" / "train.words").read_text().splitlines())
    assert not train & set((work / "text" / "test.words").read_text().splitlines())
    # Every checkpoint scored on test, beside its validation's dev F1.
    rows = [line.split("\t") for line in (work / "f1.tsv").read_text().splitlines()]
    assert rows[0] == ["step", "minutes", "dev_f1_beam4", "test_f1_beam4"]
    assert [row[0] for row in rows[1:]] == ["4"], rows
    assert re.fullmatch(r"\d+\.\d\d|nan", rows[1][3]) and re.fullmatch(r"\d+\.\d\d", rows[1][2])

    # An earlier run's model as the teacher (its EMA parses): the student trains from scratch on
    # a vocabulary of its own, for the whole budget, and no teacher is trained.
    teacher = work / "teacher" / "checkpoints" / "checkpoint_best.npz"
    again = subprocess.run(["bash", str(REPO_ROOT / "recipes" / "wsj_parsing" / "small.sh")],
                           env={**env, "WORK": str(tmp_path / "student"), "COOLDOWN": "0",
                                "TEACHER": str(teacher)},
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    student = tmp_path / "student"
    assert f"parsing {len(kept)} sentences of SILVER with {teacher}" in again.stderr
    assert "fine-tuning" not in again.stderr and not (student / "teacher").exists()
    assert "binarizing into" in again.stderr and "4000-piece vocabulary" in again.stderr
    assert len((student / "silver" / "silver.mrg").read_text().splitlines()) == len(kept)


@pytest.mark.parametrize("script", ["small.sh", "prepare.sh", "train.sh", "evaluate.sh"])
def test_help_prints_the_header_and_touches_nothing(tmp_path, script):
    """small.sh took no arguments: `small.sh --help` deleted WORK and started an hour's
    training; evaluate.sh --help first overwrote the average."""
    work = tmp_path / "work"
    (work / "checkpoints").mkdir(parents=True)
    (work / "checkpoints" / "keep").write_text("x")
    path = REPO_ROOT / "recipes" / "wsj_parsing" / script
    env = {**os.environ, "WORK": str(work), "VTX": str(Path(sys.executable).with_name("vtx"))}
    result = subprocess.run(["bash", str(path), "--help"], env=env, capture_output=True,
                            text=True, timeout=60)
    second_line = path.read_text().splitlines()[1].removeprefix("# ")
    assert result.returncode == 0 and result.stdout.startswith(second_line), result.stderr
    assert sorted(p.name for p in work.rglob("*")) == ["checkpoints", "keep"]
    if script == "small.sh":
        refused = subprocess.run(["bash", str(path), "--minutes", "5"], env=env,
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "takes no arguments, got '--minutes'" in refused.stderr
        assert (work / "checkpoints" / "keep").exists()


def test_small_refuses_to_replace_a_folder_it_did_not_write(shared_data, tmp_path):
    """small.sh replaces WORK whole (rm -rf), so WORK=. or WORK=$HOME would delete that folder: a
    folder holding anything but an earlier run's outputs is refused; an earlier run's is
    replaced (a stand-in vtx stops the run at its first command)."""
    stub = tmp_path / "vtx"
    stub.write_text("#!/bin/sh\nexit 3\n")
    stub.chmod(0o755)
    work = tmp_path / "my work"
    (work / "src").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    env = {**os.environ, "WORK": str(work), "VTX": str(stub),
           "PTB": str(shared_data / "ptb_sample")}
    path = REPO_ROOT / "recipes" / "wsj_parsing" / "small.sh"
    result = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert f"WORK '{work}' holds 'notes.txt', which small.sh does not write" in result.stderr
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt", "src"]

    earlier = tmp_path / "earlier run"
    for name in ("text", "data", "checkpoints"):
        (earlier / name).mkdir(parents=True)
    (earlier / "valid.parsed").write_text("(S x)\n")
    result = subprocess.run(["bash", str(path)], env={**env, "WORK": str(earlier)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3 and "linearizing the sample" in result.stderr
    assert not earlier.exists()  # replaced: removed before the stand-in vtx failed


def test_small_refuses_a_file_in_two_splits(shared_data, tmp_path):
    """A test file that is also trained on (or chosen on) would make the test figure a lie."""
    stub = tmp_path / "vtx"
    stub.write_text("#!/bin/sh\nexit 3\n")
    stub.chmod(0o755)
    env = {**os.environ, "WORK": str(tmp_path / "w"), "VTX": str(stub),
           "PTB": str(shared_data / "ptb_sample"), "TEST": "wsj_013[0-9].mrg"}
    path = REPO_ROOT / "recipes" / "wsj_parsing" / "small.sh"
    result = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert ("wsj_0130.mrg is in both TRAIN ('wsj_00[0-9][0-9].mrg wsj_01[0-3][0-9].mrg') and "
            "TEST ('wsj_013[0-9].mrg')") in result.stderr
    assert not (tmp_path / "w").exists()
    result = subprocess.run(["bash", str(path)], env={**env, "TEST": "wsj_09*.mrg"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "no file matches TEST 'wsj_09*.mrg' in" in result.stderr


@pytest.mark.parametrize("name, value", [("STEPS", "5k"), ("TEACHER_STEPS", "0")])
def test_small_refuses_an_update_cap_that_is_not_a_count(tmp_path, name, value):
    """vtx train would refuse the student's cap only after the teacher's half hour: a cap that
    is not a count is refused before anything runs."""
    env = {**os.environ, "WORK": str(tmp_path / "w"), name: value,
           "VTX": str(Path(sys.executable).with_name("vtx"))}
    result = subprocess.run(["bash", str(REPO_ROOT / "recipes" / "wsj_parsing" / "small.sh")],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"{name} is " in result.stderr and f"got '{value}'" in result.stderr
    assert not (tmp_path / "w").exists()


def test_prepare_names_an_unknown_option_with_the_usage(tmp_path):
    """`prepare.sh --force DIR` said "treebank folder '--force' does not exist". After "--" a
    folder whose name starts with "-" is taken (here up to the missing vtx)."""
    path = REPO_ROOT / "recipes" / "wsj_parsing" / "prepare.sh"
    env = {**os.environ, "WORK": str(tmp_path / "w"), "VTX": str(tmp_path / "no-vtx")}
    (tmp_path / "-treebank").mkdir()
    prepare = lambda *args: subprocess.run(["bash", str(path), *args], env=env, cwd=tmp_path,
                                           capture_output=True, text=True, timeout=60)
    for args, option in ((["--force", "-treebank"], "--force"), (["-j4"], "-j4"),
                         (["./-treebank", "--workers", "4"], "--workers")):
        result = prepare(*args)
        assert result.returncode == 1
        assert result.stderr == (f"prepare.sh: error: unknown option '{option}'; usage: {path} "
                                 f"TREEBANK_DIR\n")
    result = prepare("--", "-treebank")
    assert result.returncode == 1 and result.stderr.startswith("prepare.sh: error: no vtx at ")
    assert not (tmp_path / "w").exists()


def test_evaluate_without_a_training_run_names_the_missing_folder(tmp_path):
    """It left vtx average-checkpoints' usage text and its option error to say it."""
    path = REPO_ROOT / "recipes" / "wsj_parsing" / "evaluate.sh"
    env = {**os.environ, "WORK": str(tmp_path / "w"),
           "VTX": str(Path(sys.executable).with_name("vtx"))}
    result = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"evaluate.sh: error: no {tmp_path / 'w'}/checkpoints: "
                                     "run train.sh first")
