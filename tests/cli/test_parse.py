"""`vtx parse`: stdin to one tree per line, EVALB summary with --gold, clear errors."""

import pytest
from click.testing import CliRunner

from tests.inference.parser_checkpoint import write_random_parser
from vtx.parsing.prepare import split_lines
from vtx.parsing.trees import parse_tree
from vtx_cli.main import main

FAST = ["--beam", "3", "--max-len-a", "0.5", "--max-len-b", "6"]


@pytest.fixture(scope="module")
def sample_files(shared_data):
    return sorted((shared_data / "ptb_sample").glob("wsj_*.mrg"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, sample_files):
    return write_random_parser(tmp_path_factory.mktemp("parser"), sample_files[:20])


@pytest.fixture(scope="module")
def dev(sample_files, tmp_path_factory):
    """words and gold files of the four shortest sentences of two unseen files, a blank line third."""
    lines = sorted(split_lines(sample_files[160:162])[0], key=lambda line: len(line[0]))[:4]
    lines.insert(2, ("", "", ""))
    folder = tmp_path_factory.mktemp("dev")
    for column, name in ((0, "valid.words"), (2, "valid.gold")):
        (folder / name).write_text("".join(line[column] + "\n" for line in lines))
    return folder / "valid.words", folder / "valid.gold"


def invoke(*args, stdin=None):
    return CliRunner().invoke(main, ["parse", *map(str, args)], input=stdin)


def test_stdin_to_one_tree_per_line_with_the_evalb_summary(checkpoint, dev):
    words, gold = dev
    result = invoke("--checkpoint", checkpoint, "--gold", gold, *FAST, stdin=words.read_text())
    assert result.exit_code == 0, result.output
    inputs = words.read_text().splitlines()
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(inputs) == 5 and outputs[2] == ""
    for line, tree_line, gold_line in zip(inputs, outputs, gold.read_text().splitlines()):
        if line:
            tree = parse_tree(tree_line)
            assert tree.leaves() == line.split()
            assert tree.tagged_words() == parse_tree(gold_line).tagged_words()
    assert "repairs: 4 of 4 trees repaired" in result.stderr
    assert "=== Summary ===" in result.stderr
    assert "Number of sentence        =      5" in result.stderr
    assert "Number of Skip  sentence  =      1" in result.stderr
    assert "Number of Error sentence  =      0" in result.stderr


def test_input_and_output_files(checkpoint, dev, tmp_path):
    words, _ = dev
    output = tmp_path / "trees.txt"
    result = invoke("--checkpoint", checkpoint, "--input", words, "--output", output, *FAST)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert len(output.read_text().splitlines()) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trees.txt"]
    assert "Summary" not in result.stderr  # no --gold, no score


def test_missing_checkpoint_is_named(tmp_path):
    result = invoke("--checkpoint", tmp_path / "nope.npz", stdin="a b\n")
    assert result.exit_code == 2
    assert "nope.npz" in result.stderr and "does not exist" in result.stderr


def test_gold_with_another_line_count_fails_before_any_output(checkpoint, dev, tmp_path):
    words, gold = dev
    short = tmp_path / "short.gold"
    short.write_text("".join(gold.read_text().splitlines(keepends=True)[:3]))
    output = tmp_path / "out.txt"
    result = invoke("--checkpoint", checkpoint, "--gold", short, "--input", words,
                    "--output", output)
    assert result.exit_code == 1
    assert f"--gold {short} has 3 lines but the input has 5" in result.stderr
    assert not output.exists()


def test_malformed_gold_and_checkpoint_files_are_named(checkpoint, tmp_path):
    gold = tmp_path / "bad.gold"
    gold.write_text("(TOP (NP (NN a))\n")
    result = invoke("--checkpoint", checkpoint, "--gold", gold, stdin="a\n")
    assert result.exit_code == 1
    assert "bad.gold, line 1" in result.stderr and "unbalanced" in result.stderr
    not_a_checkpoint = tmp_path / "model.npz"
    not_a_checkpoint.write_text("hello")
    result = invoke("--checkpoint", not_a_checkpoint, stdin="a\n")
    assert result.exit_code == 1
    assert "model.npz: not a readable vtx checkpoint" in result.stderr
