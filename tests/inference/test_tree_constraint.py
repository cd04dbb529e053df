"""The tree constraint of `vtx parse --constrain-trees`: whatever the model's scores, every
hypothesis the search returns is a well-formed tree with one word per input word."""

import numpy as np
import pytest
import tensorflow as tf

from vtx.inference import tree_constraint
from vtx.inference.beam_search import beam_search, greedy_search

# vtx's special ids 0-3 first
PIECES = ["<pad>", "<unk>", "<s>", "</s>", "\u2581(S", "\u2581(NP", "\u2581(VP", "\u2581)S",
          "\u2581)NP", "\u2581)VP", "\u2581the", "\u2581dog", "\u2581run", "s", "\u2581.", "ing"]
ID = {piece: index for index, piece in enumerate(PIECES)}
# "the dog runs ." and "dog running": 4 and 2 words
SOURCES = np.array([[ID["\u2581the"], ID["\u2581dog"], ID["\u2581run"], ID["s"], ID["\u2581."]],
                    [ID["\u2581dog"], ID["\u2581run"], ID["ing"], 0, 0]], np.int32)
WORDS = [4, 2]


def random_decoder(seed: int):
    """A stand-in decoder: fixed random logits by (previous token, position), any scores at all."""
    table = tf.constant(np.random.default_rng(seed).normal(0, 3, (len(PIECES), 64, len(PIECES))),
                        tf.float32)

    def decode_step(token_ids, state):
        logits = tf.gather(table[:, state["index"]], token_ids)
        return logits, {**state, "index": state["index"] + 1}

    return decode_step


def check_tree(tokens: list[int], words: int, complete: bool = True) -> None:
    """`tokens` are a tree with `words` words (complete=False: the start of one)."""
    pieces = [PIECES[t] for t in tokens]
    stack, word_starts, previous = [], 0, None
    for position, piece in enumerate(pieces):
        text = piece.removeprefix("\u2581")
        if text.startswith("("):
            assert stack or position == 0, f"a second root: {pieces}"
            stack.append(text[1:])
        elif text.startswith(")"):
            assert stack and stack.pop() == text[1:], f"unmatched {piece}: {pieces}"
            assert not previous.removeprefix("\u2581").startswith("("), f"empty phrase: {pieces}"
        elif piece.startswith("\u2581") or piece == "<unk>":  # a word starts
            assert stack, f"a word outside the root: {pieces}"
            word_starts += 1
        else:  # a piece continuing a word
            assert previous is not None and not previous.removeprefix("\u2581")[:1] in "()", \
                f"{piece} glued to a bracket: {pieces}"
        previous = piece
    if not complete:
        assert pieces and word_starts <= words, f"{word_starts} words, over {words}: {pieces}"
        return
    assert not stack and pieces, f"unclosed {stack}: {pieces}"
    assert word_starts == words, f"{word_starts} words, not {words}: {pieces}"


def search(seed: int, beam: int):
    step = tree_constraint.constrained(random_decoder(seed), PIECES)
    state = tree_constraint.initial_state(tf.constant(SOURCES), {"index": tf.constant(0)}, PIECES)
    options = dict(max_length=60)
    if beam == 1:
        return greedy_search(step, state, 2, **options)
    return beam_search(step, state, 2, beam_size=beam, nbest=beam, **options)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beam", [1, 3])
def test_every_hypothesis_is_a_tree_with_one_word_per_input_word(seed, beam):
    output = search(seed, beam)
    tokens, lengths = output.tokens.numpy(), output.lengths.numpy()
    assert output.finished.numpy().all()  # each ended with EOS, within the limit
    for sentence, words in enumerate(WORDS):
        for rank in range(tokens.shape[1]):
            check_tree(tokens[sentence, rank, :lengths[sentence, rank]].tolist(), words)


def test_the_random_scores_alone_would_break_the_rules():
    """The property above is the constraint's doing: unconstrained, the same decoder writes
    no tree at all."""
    state = {"index": tf.constant(0)}
    output = greedy_search(random_decoder(0), state, 2, max_length=60)
    broken = 0
    for row in range(2):
        tokens = output.tokens.numpy()[row, 0, :output.lengths.numpy()[row, 0]].tolist()
        try:
            check_tree(tokens, WORDS[row])
        except AssertionError:
            broken += 1
    assert broken == 2


def test_a_vocabulary_without_brackets_is_refused():
    with pytest.raises(ValueError, match="no bracket pair"):
        tree_constraint.constrained(random_decoder(0), ["<pad>", "<unk>", "<s>", "</s>", "\u2581a"])


@pytest.mark.parametrize("seed", range(3))
def test_a_forbidden_eos_never_finishes_a_hypothesis(seed):
    """A beam wider than the legal first tokens and a limit too short for the first sentence's
    tree (4 words need 7 tokens, EOS included). A forbidden token must be out of reach, not
    merely unlikely: with a finite score the first step's EOS (after the 3 labels that may open
    the root and <unk>, the first forbidden id the search may generate) is among the 5 best, it
    finishes an empty tree, and a finished hypothesis outranks every live one."""
    step = tree_constraint.constrained(random_decoder(seed), PIECES)
    state = tree_constraint.initial_state(tf.constant(SOURCES), {"index": tf.constant(0)}, PIECES)
    output = beam_search(step, state, 2, beam_size=5, max_length=6)
    finished, scores = output.finished.numpy()[:, 0], output.scores.numpy()[:, 0]
    tokens = [output.tokens.numpy()[row, 0, :output.lengths.numpy()[row, 0]].tolist()
              for row in range(2)]
    assert not finished[0] and len(tokens[0]) == 6 and np.isfinite(scores[0])
    check_tree(tokens[0], WORDS[0], complete=False)  # what `delinearize` repairs
    check_tree(tokens[1], WORDS[1], complete=finished[1])  # (X w w )X EOS fits in 6
    assert np.isfinite(scores[1])
