"""`vtx parse`: stdin to one tree per line, EVALB summary with --gold, clear errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli.stderr import vtx_lines
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
    assert "parsed 5 lines in " in result.stderr


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


def test_evalb_error_sentences_are_listed_before_the_summary(checkpoint, dev, tmp_path):
    words, gold = dev
    lines = words.read_text().splitlines()
    first = lines[0].split()
    lines[0] = " ".join(["zzz", *first[1:]])
    changed = tmp_path / "changed.words"
    changed.write_text("\n".join(lines) + "\n")
    result = invoke("--checkpoint", checkpoint, "--gold", gold, "--input", changed, *FAST)
    assert result.exit_code == 0, result.output
    listed = f"1 : Words unmatch ({first[0]}|zzz)\n"
    assert listed in result.stderr and "Number of Error sentence  =      1" in result.stderr
    assert result.stderr.index(listed) < result.stderr.index("=== Summary ===")


def test_too_many_evalb_errors_say_how_to_score_the_written_trees_anyway(checkpoint, dev,
                                                                         tmp_path):
    words, gold = dev
    sentence, gold_tree = words.read_text().splitlines()[0], gold.read_text().splitlines()[0]
    changed, many_gold = tmp_path / "changed.words", tmp_path / "many.gold"
    changed.write_text(f"zzz {sentence}\n" * 12)  # a word more: 12 error sentences
    many_gold.write_text(f"{gold_tree}\n" * 12)
    output = tmp_path / "trees.txt"
    result = invoke("--checkpoint", checkpoint, "--gold", many_gold, "--input", changed,
                    "--output", output, *FAST)
    assert result.exit_code == 1
    assert "Error: 12 sentences with errors, more than EVALB's MAX_ERROR 10 allows" in result.stderr
    hint = f"; to score them anyway: vtx score-trees {many_gold} {output} --max-errors 12\n"
    assert result.stderr.endswith(hint), result.stderr
    scored = CliRunner().invoke(main, ["score-trees", str(many_gold), str(output),
                                       "--max-errors", "12"])
    assert scored.exit_code == 0 and "Number of Error sentence  =     12" in scored.output


def test_a_beam_too_wide_for_the_memory_is_one_line_naming_the_flag(checkpoint, dev, tmp_path,
                                                                    monkeypatch):
    import vtx.inference.translator

    monkeypatch.setattr(vtx.inference.translator, "available_memory", lambda: 2)  # 1 byte usable
    words, _ = dev
    output = tmp_path / "out.txt"
    result = invoke("--checkpoint", checkpoint, "--input", words, "--output", output, *FAST)
    assert result.exit_code == 1
    assert "Error: --beam 3: the search of one sentence of " in result.stderr
    assert result.stderr.rstrip().endswith("use a smaller --beam")
    assert "Traceback" not in result.output and not output.exists()


def test_constrained_trees_need_no_repair_even_from_a_random_model(checkpoint, dev):
    """Unconstrained, the random model's trees all need repairs (first test above); with
    --constrain-trees every tree is well-formed with one slot per word (the random model still
    misspells the words in its slots, which delinearize counts and replaces)."""
    words, gold = dev
    result = invoke("--checkpoint", checkpoint, "--gold", gold, "--input", words, "--beam", "3",
                    "--max-len-a", "20", "--max-len-b", "10", "--constrain-trees")
    assert result.exit_code == 0, result.output
    repairs = re.search(r"repairs: \d+ of 4 trees repaired \((.*)\)", result.stderr).group(1)
    counts = dict(item.split() for item in repairs.split(", "))
    assert set(counts) > {"extra_closes", "missing_slots", "misspelt_slots"}
    assert all(int(count) == 0 for name, count in counts.items() if name != "misspelt_slots")
    inputs = words.read_text().splitlines()
    for line, tree_line in zip(inputs, result.stdout.splitlines()):
        if line:
            assert parse_tree(tree_line).leaves() == line.split()


def test_raw_text_is_parsed_over_the_treebank_tokens_with_tokenize(checkpoint):
    """Raw text parsed as given kept "don't" and "(now)." as single words, which the
    treebank never has; --tokenize parses its Penn Treebank tokens."""
    raw = 'They said "we don\'t know (now)."\n\nIt\'s $5.\n'
    result = invoke("--checkpoint", checkpoint, *FAST, "--constrain-trees", "--tokenize",
                    stdin=raw)
    assert result.exit_code == 0, result.output
    trees = result.stdout.splitlines()
    assert len(trees) == 3 and trees[1] == ""
    assert parse_tree(trees[0]).leaves() == ["They", "said", "``", "we", "do", "n't", "know",
                                             "-LRB-", "now", "-RRB-", ".", "''"]
    assert parse_tree(trees[2]).leaves() == ["It", "'s", "$", "5", "."]
    untokenized = invoke("--checkpoint", checkpoint, *FAST, "--constrain-trees", stdin=raw)
    assert parse_tree(untokenized.stdout.splitlines()[0]).leaves()[2:4] == ["\"we", "don't"]


def test_constrained_trees_from_a_translation_model_are_one_line_naming_the_flag():
    # Raised while TensorFlow traced the search, it came as a multi-line dump of the trace.
    translation_model = Path(__file__).parents[1] / "fixtures" / "multi30k_tiny.npz"
    result = invoke("--checkpoint", translation_model, "--constrain-trees", stdin="A dog .\n")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert errors == ["Error: --constrain-trees needs a parser's model: this one's vocabulary "
                      "holds no bracket pair such as (NP / )NP"], result.output
    assert "in user code" not in result.output


def test_a_translation_model_is_refused_naming_the_checkpoint(tmp_path):
    """Its German was repaired into flat trees, exit 0: nothing said it was no parser."""
    translation_model = Path(__file__).parents[1] / "fixtures" / "multi30k_tiny.npz"
    output = tmp_path / "trees.txt"
    result = invoke("--checkpoint", translation_model, "--output", output, stdin="A dog .\n")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert errors == [f"Error: {translation_model}: not a parser's checkpoint: its vocabulary "
                      "holds no pair of tree brackets such as (NP and )NP, so its model was not "
                      "trained on linearized trees (vtx prepare-parse, then vtx preprocess "
                      "--whole-word-symbols brackets.txt)"], result.output
    assert not output.exists()


def test_a_vocabulary_needs_both_brackets_of_a_label():
    """A piece like `(x` alone comes from text in parentheses, not from linearized trees."""
    from vtx.inference.parse import check_parser_vocabulary

    for pieces in (["a", "\u2581(x", "x)"], ["(NP", ")VP", "(", ")"]):
        with pytest.raises(ValueError, match="no pair of tree brackets"):
            check_parser_vocabulary(pieces, "model.npz")
    check_parser_vocabulary(["a", "\u2581(NP", "\u2581)NP"], "model.npz")  # a parser's


def test_an_ensemble_parses_two_copies_as_one_and_two_models_into_well_formed_trees(
        checkpoint, dev, sample_files, tmp_path):
    """--checkpoint repeated: the mean of the models' probabilities, constrained as one model's
    search is; each checkpoint is named in the log."""
    words, gold = dev
    args = ["--gold", gold, "--input", words, "--beam", "3", "--max-len-a", "20",
            "--max-len-b", "10", "--constrain-trees"]
    one = invoke("--checkpoint", checkpoint, *args)
    two = invoke("--checkpoint", checkpoint, "--checkpoint", checkpoint, *args)
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    assert two.stdout == one.stdout
    assert two.stderr.count(f"checkpoint: {checkpoint}") == 2
    other = write_random_parser(tmp_path, sample_files[:20], seed=1)
    mixed = invoke("--checkpoint", checkpoint, "--checkpoint", other, *args)
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stdout != one.stdout  # the second model moved the search
    for line, tree_line in zip(words.read_text().splitlines(), mixed.stdout.splitlines()):
        if line:
            assert parse_tree(tree_line).leaves() == line.split()


def test_the_log_lines_say_the_precision_then_whether_the_search_is_compiled_and_why(checkpoint, dev):
    """`auto` (no flag) compiles only where TensorFlow sees a GPU: here none (hidden from it);
    `--jit` compiles, as typed before `auto` existed."""
    words, _ = dev
    vtx = str(Path(sys.executable).with_name("vtx"))
    no_gpu = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    trees = set()
    for flags, said in (([], "search: XLA off (auto: no GPU; XLA decodes slower on a CPU)"),
                        (["--jit"], "search: XLA on (--jit)")):
        result = subprocess.run([vtx, "parse", "--checkpoint", str(checkpoint), "--input",
                                 str(words), *FAST, *flags], capture_output=True, text=True,
                                env=no_gpu, timeout=300)
        assert result.returncode == 0, result.stderr
        first, second = vtx_lines(result.stderr)[:2]
        assert first.startswith("precision: ") and second == said
        trees.add(result.stdout)
    assert len(trees) == 1
