"""EVALB (COLLINS.prm) figures on hand-made trees; each expected number is worked out in a comment."""

import time

import pytest

from vtx.errors import TooManyErrors, TreeSyntaxError
from vtx.parsing import evalb, trees
from vtx.parsing.evalb import Status
from vtx.parsing.linearize import delinearize, linearize


def score(gold: str, test: str | None) -> evalb.SentenceResult:
    return evalb.score_sentence(trees.parse_tree(gold), trees.parse_tree(test) if test else None)


def counts(result: evalb.SentenceResult) -> tuple:
    return (result.status, result.match, result.gold_brackets, result.test_brackets, result.crossing,
            result.words, result.correct_tags)


def test_punctuation_is_deleted_with_phrases_left_empty():
    # Gold S(0,2) NP(0,1) VP(1,2): "." is deleted before spans are counted, so the test VP that
    # holds it spans (1,2) too; the test PRN over "." alone spans nothing and is dropped.
    result = score("(TOP (S (NP (NNP John)) (VP (VBD left)) (. .)))",
                   "(TOP (S (NP (NNP John)) (VP (VBD left) (PRN (. .)))))")
    assert counts(result) == (Status.OK, 3, 3, 3, 0, 2, 2)
    assert result.length == 3  # the length counts punctuation (only -NONE- is left out)


def test_advp_and_prt_are_one_label_and_function_tags_are_cut():
    # Gold S NP(-SBJ cut) VP PRT; test S NP VP ADVP: 4 of 4 match. Tags RP vs RB: 2 of 3 right.
    result = score("(TOP (S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up)))))",
                   "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up)))))")
    assert counts(result) == (Status.OK, 4, 4, 4, 0, 3, 2)
    adjp = score("(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))",
                 "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADJP (RP up)))))")
    assert adjp.match == 3


def test_traces_are_removed_and_not_counted_in_length():
    # NP-SBJ dominates only a trace: dropped. Gold S(0,2) VP(0,2) ADVP(1,2) = test.
    result = score("(TOP (S (NP-SBJ (-NONE- *)) (VP (VB Go) (ADVP-DIR (RB home))) (. .)))",
                   "(TOP (S (VP (VB Go) (ADVP (RB home))) (. .)))")
    assert counts(result) == (Status.OK, 3, 3, 3, 0, 2, 2) and result.length == 3


def test_duplicate_brackets_match_as_a_multiset():
    # Gold has NP(0,2) twice (NP over NP), test once: 3 matches, recall 3/4, precision 3/3.
    double = "(TOP (S (NP (NP (DT the) (NN man))) (VP (VBD left))))"
    single = "(TOP (S (NP (DT the) (NN man)) (VP (VBD left))))"
    assert counts(score(double, single)) == (Status.OK, 3, 4, 3, 0, 3, 3)
    assert counts(score(single, double)) == (Status.OK, 3, 3, 4, 0, 3, 3)
    assert counts(score(double, double)) == (Status.OK, 4, 4, 4, 0, 3, 3)


def test_unary_chains_count_every_bracket():
    # Test VP(1,2) > S(1,2) > VP(1,2): 5 brackets, of which S(0,2) NP(0,1) and one VP(1,2) match.
    result = score("(TOP (S (NP (NNP Kim)) (VP (VBD ran))))",
                   "(TOP (S (NP (NNP Kim)) (VP (S (VP (VBD ran))))))")
    assert counts(result) == (Status.OK, 3, 3, 5, 0, 2, 2)


def test_crossing_counts_test_brackets_that_cross_a_gold_bracket():
    # Gold S(0,4) NP(0,2) VP(2,4) NP(3,4); test S(0,4) X(1,3): X crosses NP(0,2) (and VP(2,4)),
    # counted once; 1 match of 4 gold and 2 test brackets.
    result = score("(TOP (S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d)))))",
                   "(TOP (S (DT a) (X (NN b) (VB c)) (NN d)))")
    assert counts(result) == (Status.OK, 1, 4, 2, 1, 4, 4)


def test_the_empty_outer_bracket_is_scored_as_evalb_does():
    # evalb.c reads the label of "( (S" as "", which no DELETE_LABEL names: the bracket counts.
    ptb = "( (S (NP (NNP Kim)) (VP (VBD ran))) )"
    top = "(TOP (S (NP (NNP Kim)) (VP (VBD ran))))"
    assert counts(score(ptb, top)) == (Status.OK, 3, 4, 3, 0, 2, 2)
    assert counts(score(ptb, ptb)) == (Status.OK, 4, 4, 4, 0, 2, 2)


def test_length_and_word_mismatches_are_errors_and_empty_test_lines_skips():
    gold = "(TOP (S (NP (NNP John)) (VP (VBD left)) (. .)))"
    # A punctuation word tagged XX is not deleted: 3 test words against 2 gold words.
    tagged_xx = score(gold, "(TOP (S (NP (NNP John)) (VP (VBD left)) (XX .)))")
    assert (tagged_xx.status, tagged_xx.message) == (Status.ERROR, "Length unmatch (2|3)")
    other_word = score(gold, "(TOP (S (NP (NNP Mary)) (VP (VBD left)) (. .)))")
    assert (other_word.status, other_word.message) == (Status.ERROR, "Words unmatch (John|Mary)")
    assert score(gold, None).status is Status.SKIP


def test_report_excludes_errors_and_skips_from_the_figures():
    gold = trees.parse_tree("(TOP (S (NP (NP (DT the) (NN man))) (VP (VBD left))))")
    test = trees.parse_tree("(TOP (S (NP (DT the) (NN man)) (VP (VBD left))))")
    wrong = trees.parse_tree("(TOP (S (NP (DT a) (NN man)) (VP (VBD left))))")
    report = evalb.score_trees([gold, gold, gold], [test, wrong, None])
    totals = report.all
    assert (totals.sentences, totals.errors, totals.skipped, totals.valid) == (3, 1, 1, 1)
    # Only sentence 1 counts: recall 3/4 = 75.00, precision 3/3 = 100.00, F1 = 2*75*100/175.
    assert (totals.match, totals.gold_brackets, totals.test_brackets) == (3, 4, 3)
    assert evalb.format_errors(report) == "2 : Words unmatch (the|a)\n"  # the skip says nothing
    assert evalb.format_errors(evalb.score_trees([gold], [test])) == ""
    summary = evalb.format_summary(report)
    assert "Number of Error sentence  =      1\n" in summary
    assert "Number of Skip  sentence  =      1\n" in summary
    assert "Bracketing Recall         =  75.00\n" in summary
    assert "Bracketing Precision      = 100.00\n" in summary
    assert "Bracketing FMeasure       =  85.71\n" in summary
    assert "Complete match            =   0.00\n" in summary
    assert "-- len<=40 --" in summary


def test_length_cutoff_counts_punctuation_but_not_traces():
    words = " ".join(f"(NN w{i})" for i in range(40))
    # 40 words and a period: length 41, outside the len<=40 block; 40 words and a trace: 40, inside.
    with_period = trees.parse_tree(f"(TOP (S (NP {words}) (. .)))")
    with_trace = trees.parse_tree(f"(TOP (S (NP {words}) (-NONE- *)))")
    flat = trees.parse_tree(f"(TOP (S {words} (. .)))")
    report = evalb.score_trees([with_period, with_trace], [flat, with_trace])
    assert [r.length for r in report.sentences] == [41, 40]
    assert (report.all.match, report.all.gold_brackets) == (3, 4)
    assert (report.short.sentences, report.short.match, report.short.gold_brackets) == (1, 2, 2)


def test_evalb_stops_at_the_twelfth_error():
    gold = trees.parse_tree("(TOP (S (NN a)))")
    wrong = trees.parse_tree("(TOP (S (NN b)))")
    assert evalb.score_trees([gold] * 11, [wrong] * 11).all.errors == 11
    with pytest.raises(TooManyErrors, match=r"line 12: Words unmatch \(a\|b\)"):
        evalb.score_trees([gold] * 12, [wrong] * 12)
    assert evalb.score_trees([gold] * 12, [wrong] * 12, max_errors=20).all.errors == 12


def test_sequences_of_different_length_are_refused():
    with pytest.raises(ValueError, match="2 gold trees but 1 test trees"):
        evalb.score_trees([None, None], [None])


def test_per_sentence_table_has_evalb_columns():
    report = evalb.score_trees([trees.parse_tree("(TOP (S (NP (NNP Kim)) (VP (VBD ran))))")],
                               [trees.parse_tree("(TOP (S (NP (NNP Kim)) (VP (S (VP (VBD ran))))))")])
    table = evalb.format_sentences(report).splitlines()
    assert table[3] == "   1    2    0  100.00  60.00     3      3    5      0      2     2   100.00"
    assert table[-1] == "                100.00  60.00      3     3     5      0      2     2   100.00"


def test_whole_sample_against_itself_scores_100(sample_trees):
    start = time.perf_counter()
    report = evalb.score_trees(sample_trees, sample_trees)
    seconds = time.perf_counter() - start
    totals = report.all
    assert (totals.sentences, totals.valid, totals.errors, totals.skipped) == (3669, 3669, 0, 0)
    assert f"{totals.f1:.2f}" == "100.00" and totals.complete == 3669
    assert f"{report.short.f1:.2f}" == "100.00"
    print(f"scored {totals.sentences} sentences in {seconds:.2f} s")


def test_delinearized_sample_scores_100_against_normalized_gold(normalized_trees):
    rebuilt = []
    for tree in normalized_trees:
        words, target = linearize(tree)
        rebuilt.append(delinearize(target, words, tags=[tag for _, tag in tree.tagged_words()])[0])
    totals = evalb.score_trees(normalized_trees, rebuilt).all
    assert (totals.valid, totals.match) == (3669, totals.gold_brackets)
    assert totals.gold_brackets == totals.test_brackets > 0


def test_read_tree_lines_names_the_bad_line(tmp_path):
    path = tmp_path / "test.txt"
    path.write_text("(TOP (S (NN a)))\n\n(TOP (S (NN a))\n")
    with pytest.raises(TreeSyntaxError, match="test.txt, line 3"):
        evalb.read_tree_lines(path)
    path.write_text("(TOP (S (NN a)))\n\n")
    assert evalb.read_tree_lines(path)[1] is None


def test_tree_files_are_cut_into_lines_at_newlines_only(tmp_path):
    """str.splitlines also cut at U+2028, U+0085 or a form feed, which the tree reader takes as
    spaces: a two-line file became three lines, and the error named a balanced line as
    unbalanced."""
    path = tmp_path / "gold.txt"
    path.write_text("(TOP (S\u2028(NP (NN a))\x0c(VP (VB c))))\r\n(TOP (X (Y z)))\n",
                    newline="")
    read = evalb.read_tree_lines(path)
    assert [tree.leaves() for tree in read] == [["a", "c"], ["z"]]
    assert evalb.score_files(path, path).all.errors == 0
