import re
import subprocess
import sys

import pytest

from vtx.errors import TreeSyntaxError
from vtx.parsing import trees
from vtx.parsing.trees import Tree

TWO_TREES = """
( (S
    (NP-SBJ (NNP Pierre) (NNP Vinken) )
    (VP (MD will)
      (VP (VB join)
        (NP (DT the) (NN board) )))
    (. .) ))
((S (NP-SBJ (PRP He)) (VP (VBD left)) ))
"""


def test_reads_multiline_trees_with_outer_unlabeled_bracket():
    first, second = trees.iter_trees(TWO_TREES)
    assert first.label == "" and [child.label for child in first.children] == ["S"]
    assert first.leaves() == ["Pierre", "Vinken", "will", "join", "the", "board", "."]
    assert second.to_string() == "( (S (NP-SBJ (PRP He)) (VP (VBD left))))"


def test_sample_tree_counts_match_source_md_per_file(sample_files, source_md_counts):
    assert len(sample_files) == len(source_md_counts) == 179
    counts = {path.name: len(trees.read_mrg(path)) for path in sample_files}
    assert counts == source_md_counts
    assert sum(counts.values()) == 3669


def test_one_line_text_round_trips_on_the_sample(sample_trees):
    for tree in sample_trees:
        assert trees.parse_tree(tree.to_string()) == tree


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT a) (NN b))", "never closed"),
    ("(S (NP a)))", "an extra ')' after tree 1"),
    ("(NP a (DT b))", "word beside"),
    ("word (S (X y))", "expected '('"),
])
def test_malformed_text_names_the_place(text, message):
    with pytest.raises(TreeSyntaxError, match=re.escape(message)) as error:
        trees.parse_tree(text, "gold.txt, line 7")
    assert "gold.txt, line 7" in str(error.value)


def test_parse_tree_wants_exactly_one_tree():
    with pytest.raises(TreeSyntaxError, match="expected one tree, found 2"):
        trees.parse_tree("(X (A a)) (Y (B b))")
    with pytest.raises(TreeSyntaxError, match="found 0"):
        trees.parse_tree("   ")


def test_read_mrg_error_names_the_file(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text("( (S (NP (NN a)) )\n( (S (NN b)) )\n")
    with pytest.raises(TreeSyntaxError, match="wsj_0001.mrg"):
        trees.read_mrg(path)


@pytest.mark.parametrize("label, stripped", [
    ("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("S-TPC-1", "S"), ("NP", "NP"),
    ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"), ("PRP$", "PRP$"), ("ADVP|PRT", "ADVP|PRT"),
])
def test_strip_function_tags(label, stripped):
    assert trees.strip_function_tags(label) == stripped


def test_normalize_removes_traces_and_constituents_left_empty():
    # The example of EVALB's README, section [6]: SBAR and S dominate nothing but traces.
    raw = trees.parse_tree("( (S (NP-SBJ-1 (PRP He)) (VP (VBD reported) (SBAR (-NONE- 0) "
                           "(S (-NONE- *T*-1)))) (. .)) )")
    before = raw.to_string()
    assert trees.normalize(raw).to_string() == "(TOP (S (NP (PRP He)) (VP (VBD reported)) (. .)))"
    assert raw.to_string() == before  # the input is not changed


def test_normalize_keeps_bracket_tags_and_wraps_a_labeled_root():
    tree = trees.parse_tree("(NP-SBJ (-LRB- -LRB-) (NN x) (-RRB- -RRB-))")
    assert trees.normalize(tree).to_string() == "(TOP (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)))"


def test_normalize_returns_none_when_only_empty_elements_remain():
    assert trees.normalize(trees.parse_tree("( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *?*))) )")) is None


def test_normalized_sample_has_no_traces_function_tags_or_empty_phrases(sample_trees, normalized_trees):
    assert all(tree is not None and tree.label == trees.ROOT_LABEL for tree in normalized_trees)
    for raw, tree in zip(sample_trees, normalized_trees):
        assert tree.leaves() == [w for w, tag in raw.tagged_words() if tag != "-NONE-"]
        for node in tree.subtrees():
            if node.is_preterminal:
                assert node.label != "-NONE-"
            else:
                assert node.children, node
                assert node.label.startswith("-") or ("-" not in node.label and "=" not in node.label)


def test_tree_helpers():
    tree = Tree("S", [Tree("NP", [Tree("DT", ["a"])]), Tree("VB", ["b"])])
    assert tree.tagged_words() == [("a", "DT"), ("b", "VB")]
    assert [node.label for node in tree.subtrees()] == ["S", "NP", "DT", "VB"]
    assert str(Tree("NP")) == "(NP)"


def test_parsing_package_imports_neither_tensorflow_nor_keras():
    code = ("import sys, vtx.parsing.evalb, vtx.parsing.prepare; "
            "print(sorted(m for m in ('tensorflow', 'keras', 'click') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_tree_nested_past_max_depth_is_a_syntax_error_naming_it():
    deep = "(" * 5000 + "X x" + ")" * 5000  # was a RecursionError traceback in every command
    with pytest.raises(TreeSyntaxError, match=r"^gold.txt, line 3 \(tree 1\): brackets nested "
                                              r"more than 200 deep$"):
        trees.parse_tree(deep, "gold.txt, line 3")


def test_the_deepest_tree_read_goes_through_prepare_parse_and_scoring(tmp_path):
    """A tree nested as deep as the reader takes is normalized, linearized, written, read back
    and scored (at ~400 levels prepare-parse stopped on Python's recursion limit after the
    reading had passed). Run under pytest, whose own frames sit below these."""
    from vtx.parsing import evalb, prepare
    from vtx.parsing.linearize import delinearize, linearize

    inner = trees.MAX_DEPTH - 2  # under TOP and the .mrg file's unlabeled bracket
    body = "(S " * inner + "(NN x)" + ")" * inner
    mrg = tmp_path / "deep.mrg"
    mrg.write_text(f"( {body})\n")
    prepare.prepare({"train": [mrg], "valid": [mrg]}, tmp_path / "out")
    gold = tmp_path / "out" / "valid.gold"
    (tree,) = evalb.read_tree_lines(gold)
    assert sum(1 for _ in tree.subtrees()) == inner + 2  # TOP, the S's, NN
    words, target = linearize(tree)
    assert delinearize(target, words, tags=["NN"])[0].to_string() == tree.to_string()
    assert evalb.score_files(gold, gold).all.errors == 0
    with pytest.raises(TreeSyntaxError, match="nested more than 200 deep"):
        mrg.write_text(f"( (S {body}))\n")
        prepare.prepare({"valid": [mrg]}, tmp_path / "out2")


def test_text_that_is_not_utf8_is_named_by_file_line_and_column(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_bytes(b"(S (X x))\n(S (X a\xffb))\n")
    with pytest.raises(TreeSyntaxError) as refused:
        trees.read_text(path)
    assert str(refused.value) == f"{path}, line 2, column 8: not UTF-8 text (byte 0xff)"
