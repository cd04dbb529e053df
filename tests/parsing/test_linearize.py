import random

import pytest

from vtx.parsing import trees
from vtx.parsing.linearize import RepairStats, delinearize, linearize

CAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBZ sleeps)) (. .)))"


def test_linearize_follows_vinyals_et_al():
    words, target = linearize(trees.parse_tree(CAT))
    assert words == ["The", "cat", "sleeps", "."]
    assert " ".join(target) == "(S (NP XX XX )NP (VP XX )VP XX )S"


def test_linearize_can_keep_tags():
    _, target = linearize(trees.parse_tree(CAT), slots="tags")
    assert " ".join(target) == "(S (NP DT NN )NP (VP VBZ )VP . )S"


def test_round_trip_on_every_sample_tree(normalized_trees):
    for tree in normalized_trees:
        gold = tree.to_string()
        words, with_tags = linearize(tree, slots="tags")
        rebuilt, stats = delinearize(with_tags, words)
        assert (rebuilt.to_string(), stats.total) == (gold, 0)
        _, with_slots = linearize(tree)
        rebuilt, stats = delinearize(with_slots, words, tags=[tag for _, tag in tree.tagged_words()])
        assert (rebuilt.to_string(), stats.total) == (gold, 0)


def test_linearize_can_write_the_words():
    words, target = linearize(trees.parse_tree(CAT), slots="words")
    assert " ".join(target) == "(S (NP The cat )NP (VP sleeps )VP . )S"
    rebuilt, stats = delinearize(target, words)  # word slots name no tag: XX
    assert rebuilt.to_string() == "(TOP (S (NP (XX The) (XX cat)) (VP (XX sleeps)) (. .)))"
    assert stats.total == 0
    with pytest.raises(ValueError, match="slots must be one of xx, tags, words, got 'pos'"):
        linearize(trees.parse_tree(CAT), slots="pos")


def test_round_trip_with_word_slots_on_every_sample_tree(normalized_trees):
    for tree in normalized_trees:
        words, target = linearize(tree, slots="words")
        rebuilt, stats = delinearize(target, words, tags=[tag for _, tag in tree.tagged_words()])
        assert (rebuilt.to_string(), stats.total) == (tree.to_string(), 0)


def test_word_slots_are_aligned_with_the_words_so_a_misspelt_word_shifts_no_other():
    words = "The cat sleeps .".split()
    # "cat" written in two pieces: by counting, "t" would take "sleeps" and "sleeps" the ".".
    tree, stats = delinearize("(S (NP The ca t )NP (VP sleeps )VP . )S".split(), words)
    assert tree.to_string() == "(TOP (S (NP (XX The) (XX cat)) (VP (XX sleeps)) (. .)))"
    assert (stats.misspelt_slots, stats.extra_slots, stats.total) == (1, 1, 2)
    # A skipped word goes just before the next word found, in its phrase.
    tree, stats = delinearize("(S (NP The )NP (VP sleeps )VP . )S".split(), words)
    assert tree.to_string() == "(TOP (S (NP (XX The)) (VP (XX cat) (XX sleeps)) (. .)))"
    assert (stats.missing_slots, stats.total) == (1, 1)
    # XX slots are counted, not aligned: the same skip shifts every word after it.
    tree, _ = delinearize("(S (NP XX )NP (VP XX )VP XX )S".split(), words)
    assert tree.to_string() == "(TOP (S (NP (XX The)) (VP (XX cat)) (XX sleeps) (XX .)))"


def test_round_trip_of_a_root_with_several_children():
    tree = trees.parse_tree("(TOP (NP (NN a)) (VP (VB b)))")
    words, target = linearize(tree, slots="tags")
    assert " ".join(target) == "(TOP (NP NN )NP (VP VB )VP )TOP"
    assert delinearize(target, words)[0] == tree


def test_slots_without_tags_become_xx():
    tree, _ = delinearize("(S (NP XX )NP XX )S".split(), ["a", "b"])
    assert tree.to_string() == "(TOP (S (NP (XX a)) (XX b)))"


@pytest.mark.parametrize("target, words, expected, repair", [
    ("(S XX )S )S", "a", "(TOP (S (XX a)))", {"extra_closes": 1}),
    (")S (S XX )S", "a", "(TOP (S (XX a)))", {"extra_closes": 1}),
    ("(S (NP XX )VP )S", "a", "(TOP (S (NP (XX a))))", {"mismatched_closes": 1}),
    ("(S (NP XX ) )S", "a", "(TOP (S (NP (XX a))))", {}),
    ("(S XX XX XX )S", "a b", "(TOP (S (XX a) (XX b)))", {"extra_slots": 1}),
    ("(S (NP XX )NP )S (X XX", "a b c", "(TOP (S (NP (XX a))) (X (XX b) (XX c)))",
     {"missing_slots": 1, "unclosed_opens": 1}),
    ("(S (NP XX )NP )S", "a b c", "(TOP (S (NP (XX a)) (XX b) (XX c)))", {"missing_slots": 2}),
    ("(S XX )S XX", "a b c", "(TOP (S (XX a)) (XX b) (XX c))", {"missing_slots": 1}),
    ("", "a b", "(TOP (XX a) (XX b))", {"missing_slots": 2}),
    ("(S (NP XX", "a", "(TOP (S (NP (XX a))))", {"unclosed_opens": 2}),
    ("(S (NP )NP XX (VP (PP )PP )VP )S", "a", "(TOP (S (XX a)))", {"empty_constituents": 3}),
    ("( (S XX )S", "a", "(TOP (S (XX a)))", {"dropped_tokens": 1}),
    # A label with a bracket in it (byte pieces decode to any character) was a phrase whose
    # label no tree file reads back: `(TOP (( ...` or `(S(NP`.
    ("(( (S XX )S", "a", "(TOP (S (XX a)))", {"dropped_tokens": 1}),
    ("(S (S(NP XX )S", "a", "(TOP (S (XX a)))", {"dropped_tokens": 1}),
    ("(S (NP XX )NP) )NP )S", "a", "(TOP (S (NP (XX a))))", {"dropped_tokens": 1}),
    ("(TOP (S XX )S )TOP", "a", "(TOP (S (XX a)))", {}),
])
def test_each_repair_rule(target, words, expected, repair):
    tree, stats = delinearize(target.split(), words.split())
    assert tree.to_string() == expected
    assert stats == RepairStats(**repair)


def test_tags_must_match_words():
    with pytest.raises(ValueError, match="1 tags for 2 words"):
        delinearize(["XX", "XX"], ["a", "b"], tags=["NN"])


def test_repair_stats_add_up():
    total = RepairStats(extra_closes=1, missing_slots=2) + RepairStats(extra_closes=3)
    assert total == RepairStats(extra_closes=4, missing_slots=2) and total.total == 6


def _corrupt(target: list[str], rng: random.Random, vocabulary: list[str]) -> list[str]:
    """Deletes, inserts, swaps or replaces a few tokens at random."""
    target = list(target)
    for _ in range(rng.randint(1, 6)):
        operation = rng.choice(["delete", "insert", "swap", "replace", "truncate"])
        at = rng.randrange(len(target) + 1)
        if operation == "insert" or not target:
            target.insert(at, rng.choice(vocabulary))
        elif operation == "truncate":
            target = target[:at]
        else:
            at = min(at, len(target) - 1)
            other = rng.randrange(len(target))
            if operation == "delete":
                del target[at]
            elif operation == "swap":
                target[at], target[other] = target[other], target[at]
            else:
                target[at] = rng.choice(vocabulary)
    return target


def test_repair_always_yields_a_tree_over_exactly_the_words(normalized_trees):
    rng = random.Random(0)
    vocabulary = ["XX", "(NP", ")NP", "(VP", ")VP", "(S", ")S", "(", ")", "(PP", ")PP", "NN",
                  "((", "(S(NP", ")NP)"]
    for tree in rng.sample(normalized_trees, 400):
        words, target = linearize(tree)
        for corrupted in (_corrupt(target, rng, vocabulary),
                          [rng.choice(vocabulary) for _ in range(rng.randint(0, 2 * len(target)))]):
            rebuilt, stats = delinearize(corrupted, words)
            assert rebuilt.leaves() == words
            assert rebuilt.label == trees.ROOT_LABEL
            assert trees.parse_tree(rebuilt.to_string()) == rebuilt  # well-formed text
            assert all(node.children for node in rebuilt.subtrees())
            slots = sum(not token.startswith(("(", ")")) for token in corrupted)
            assert stats.extra_slots == max(0, slots - len(words))
            assert stats.missing_slots == max(0, len(words) - slots)


def test_bracket_pairs_match_each_opening_piece_with_its_closing_one_written_alike():
    from vtx.parsing.linearize import bracket_pairs

    pieces = ["<pad>", "\u2581(NP", "\u2581)NP", "(NP", ")NP", "\u2581(S", "(", "\u2581)VP", "\u2581a"]
    assert bracket_pairs(pieces) == {1: 2, 3: 4}  # (S has no partner; ( alone is no bracket
