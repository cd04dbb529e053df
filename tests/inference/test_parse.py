"""Parsing with a model: one well-formed tree per line over exactly its words; gold tags for EVALB."""

import pytest

from tests.inference.parser_checkpoint import write_random_parser
from vtx.errors import ArgumentError, TooManyErrors
from vtx.inference import parse
from vtx.inference.decoding import DecodeOptions
from vtx.inference.translator import load_translator
from vtx.parsing import evalb
from vtx.parsing.linearize import delinearize
from vtx.parsing.prepare import split_lines
from vtx.parsing.trees import parse_tree

# Short outputs keep the random model's searches (which never pick EOS) fast.
OPTIONS = DecodeOptions(beam=3, lenpen=0.3, max_len_a=0.5, max_len_b=6, max_tokens=256)


@pytest.fixture(scope="module")
def sample_files(shared_data):
    return sorted((shared_data / "ptb_sample").glob("wsj_*.mrg"))


@pytest.fixture(scope="module")
def translator(tmp_path_factory, sample_files):
    path = write_random_parser(tmp_path_factory.mktemp("parser"), sample_files[:20])
    return load_translator(path, OPTIONS)


@pytest.fixture(scope="module")
def dev_lines(sample_files):
    """(words, linearized tree, gold tree) lines of two files the vocabulary did not see."""
    return split_lines(sample_files[160:162])[0]


@pytest.fixture(scope="module")
def short_lines(dev_lines):
    """The five shortest dev lines (few padded shapes, so few traces of the search)."""
    return sorted(dev_lines, key=lambda line: len(line[0]))[:5]


def test_one_tree_per_line_over_exactly_the_words(translator, short_lines):
    lines = [words for words, _, _ in short_lines]
    lines[1:1] = ["", "   "]
    lines.append("f(x) = ( y )")
    report = parse.parse_lines(translator, lines)
    assert len(report.trees) == len(lines)
    assert report.trees[1] is None and report.trees[2] is None
    for line, tree in zip(lines, report.trees):
        if not line.strip():
            continue
        assert tree.label == "TOP"
        assert tree.leaves() == parse.sentence_words(line)
        assert parse_tree(tree.to_string()) == tree  # reads back as exactly one tree
    assert report.trees[-1].leaves() == ["f-LRB-x-RRB-", "=", "-LRB-", "y", "-RRB-"]
    # The search stops at 0.5 * |X| + 6 tokens, too few for the words: every tree was repaired.
    assert report.repaired_trees == len(lines) - 2
    assert report.repairs.missing_slots > 0
    assert report.repair_summary().startswith(f"repairs: {len(lines) - 2} of {len(lines) - 2} ")


def test_chunked_stream_writes_the_same_trees_in_input_order(translator, short_lines):
    lines = [words for words, _, _ in short_lines] + [""]
    gold = [parse_tree(tree) for _, _, tree in short_lines] + [None]
    whole = parse.parse_lines(translator, lines, gold)
    written = []
    streamed = parse.parse_stream(translator, lines, written.append, buffer_size=2, gold=gold)
    assert written == [tree.to_string() if tree else "" for tree in whole.trees]
    assert streamed.trees == whole.trees and streamed.repairs == whole.repairs
    # Gold tags went in: every tree's tags are its gold tree's.
    for tree, gold_tree in zip(streamed.trees[:5], gold[:5]):
        assert tree.tagged_words() == gold_tree.tagged_words()
    with pytest.raises(ValueError, match="5 gold trees for 6 input lines"):
        parse.parse_stream(translator, lines, written.append, 2, gold[:5])


def test_words_of_no_pieces_get_a_flat_tree_over_them(translator):
    # Their search is skipped (a source of padding only), which left parse_lines no hypothesis.
    report = parse.parse_lines(translator, ["\u200b \ufeff", "", "The cat sleeps ."])
    assert report.trees[0].to_string() == "(TOP (XX \u200b) (XX \ufeff))"
    assert report.trees[1] is None and report.trees[2].leaves() == ["The", "cat", "sleeps", "."]


def test_gold_tags_make_evalb_delete_punctuation_as_in_gold(dev_lines):
    golds = [parse_tree(tree) for _, _, tree in dev_lines]
    with_tags, without_tags = [], []
    for (words, target, _), gold in zip(dev_lines, golds):
        words = words.split()
        with_tags.append(delinearize(target.split(), words, parse.gold_tags(gold, words))[0])
        without_tags.append(delinearize(target.split(), words)[0])
    scored = evalb.score_trees(golds, with_tags)
    assert (scored.all.errors, scored.all.f1, scored.all.complete_match) == (0, 100.0, 100.0)
    # With `XX` tags the punctuation stays in the test tree: EVALB reports length errors.
    punctuated = sum(any(tag in {",", "."} for _, tag in g.tagged_words()) for g in golds)
    assert punctuated > 0
    with pytest.raises(TooManyErrors, match="Length unmatch"):
        evalb.score_trees(golds, without_tags)


def test_gold_tags_with_another_word_count_warn_and_keep_the_slots():
    warnings = []
    gold = parse_tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBZ sleeps))))")
    assert parse.gold_tags(gold, ["The", "cat"], 7, warnings.append) is None
    assert parse.gold_tags(None, ["The"], 8, warnings.append) is None
    assert warnings == ["line 7: 2 words but the gold tree has 3; EVALB counts it as an error "
                        "sentence", "line 8: 1 words but the gold tree has 0; EVALB counts it "
                        "as an error sentence"]
    assert parse.gold_tags(gold, ["The", "cat", "sleeps"]) == ["DT", "NN", "VBZ"]


def test_gold_trees_with_traces_give_their_words_tags_and_score_as_evalb(dev_lines):
    # Raw treebank trees keep -NONE- traces, which EVALB takes as gold: their tags were counted
    # as words, so every sentence with a trace lost its tags, kept its punctuation and was a
    # "Length unmatch" (more than 10 of them stop EVALB).
    gold = parse_tree("(TOP (S (NP-SBJ (-NONE- *)) (, ,) (VP (VBD sat) (NP (-NONE- *T*-1))) "
                      "(. .)))")
    assert parse.gold_tags(gold, [",", "sat", "."]) == [",", "VBD", "."]
    golds, tests = [], []
    for words, target, tree in dev_lines:
        words, clean = words.split(), parse_tree(tree)
        traced = parse_tree(clean.to_string().replace("(TOP ", "(TOP (-NONE- *) ", 1))
        golds.append(traced)
        tests.append(delinearize(target.split(), words, parse.gold_tags(traced, words))[0])
    scored = evalb.score_trees(golds, tests)
    assert (scored.all.errors, scored.all.f1) == (0, 100.0)


def test_read_gold_checks_the_line_count(tmp_path):
    gold = tmp_path / "valid.gold"
    gold.write_text("(TOP (NP (NN a)))\n\n(TOP (NP (NN b)))\n")
    trees = parse.read_gold(gold, 3)
    assert trees[1] is None and trees[2].leaves() == ["b"]
    with pytest.raises(ArgumentError,
                       match=r"^gold_path .*valid\.gold has 3 lines but the input has 4$") as error:
        parse.read_gold(gold, 4)
    assert error.value.arguments == ["gold_path"]
