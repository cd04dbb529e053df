"""Decoding a parser's output as a well-formed tree with one slot per input word.

A parser trained with the words themselves in the slots of its linearized trees (`vtx
prepare-parse --slots words`) writes brackets and word pieces. Unconstrained, a small model skips
or repeats words, closes phrases it never opened and stops early; `delinearize` repairs all that,
but every repair is a guess. Under this constraint the search only extends a hypothesis with a
token that keeps it a prefix of a well-formed tree with as many words as the sentence has:

- a piece that starts a word (`\u2581` first) only inside a phrase and while the sentence has
  words left (as many word starts as the source has); a piece that continues a word only right
  after a word's piece, up to as many pieces as the sentence's longest word has. The words'
  spelling is the model's: `delinearize` aligns them with the sentence;
- `(X` opens a phrase only while words remain (no phrase without a word), at the top level only
  as the first token (one root), and at most MAX_OPENS_IN_A_ROW times in a row (a model unsure of
  the next word would otherwise open phrases until the depth runs out);
- `)X` closes the innermost open phrase, with its label, never right after its opening, and the
  root only once every word is written;
- EOS comes only after the root is closed.

Each hypothesis carries its word count and its stack of open phrases (the close token each
expects) in the decoding state, which follows the beams like the rest of it. Every other token
gets a -inf logit, so the search renormalizes over the allowed ones and never generates another:
a merely very low score (-1e9) would still let a forbidden EOS finish a hypothesis when the
beam is wider than the legal tokens, and a finished hypothesis outranks every live one.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.errors import ArgumentError
from vtx.parsing.linearize import bracket_pairs, is_bracket

MAX_DEPTH = 64  # open phrases at once (the WSJ sample's training trees: 28 at most)
MAX_OPENS_IN_A_ROW = 8  # phrases opened one inside the other at once (the sample's trees: 6)


def initial_state(source_ids, state: dict, pieces: Sequence[str],
                  max_depth: int = MAX_DEPTH) -> dict:
    """`state` with the constraint's entries for the sentences `source_ids` (int [B, S]) of the
    vocabulary `pieces`."""
    rows, length = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    zeros = tf.zeros([rows], tf.int32)
    starts, _ = _word_pieces(pieces)
    is_start = tf.cast(tf.gather(tf.constant(starts), source_ids), tf.int32)  # [B, S]
    words = tf.reduce_sum(is_start, axis=1)
    # pieces per word: the word each piece belongs to (0 = padding), counted
    word_of = tf.cumsum(is_start, axis=1) * tf.cast(source_ids != PAD_ID, tf.int32)
    counts = tf.reduce_sum(tf.one_hot(word_of, length + 1, dtype=tf.int32), axis=1)  # [B, S + 1]
    return {**state, "tree_words": words, "tree_longest_word": tf.reduce_max(counts[:, 1:], 1),
            "tree_word_pieces": zeros, "tree_written": zeros,
            "tree_stack": tf.zeros([rows, max_depth], tf.int32), "tree_depth": zeros,
            "tree_opens_in_a_row": zeros, "tree_opened": tf.zeros([rows], tf.bool)}


def _word_pieces(pieces: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """bool [V] each: the pieces that start a word (`\u2581` first, or unknown) and those that
    continue one (the other pieces, brackets and PAD/BOS/EOS left out)."""
    word = np.array([not is_bracket(piece) for piece in pieces])
    word[[PAD_ID, BOS_ID, EOS_ID]] = False
    marked = np.array([piece.startswith("\u2581") for piece in pieces])
    starts = word & (marked | (np.arange(len(pieces)) == UNK_ID))
    return starts, word & ~starts


def parser_brackets(pieces: Sequence[str]) -> dict[int, int]:
    """The vocabulary's bracket pairs (open id -> close id); check it before a search is built,
    since raised while TensorFlow traces it the error comes wrapped in the trace.

    Raises:
        ArgumentError: there is none: the vocabulary is not a parser's (`constrain_trees`).
    """
    brackets = bracket_pairs(pieces)
    if not brackets:
        raise ArgumentError("{constrain_trees} needs a parser's model: this one's vocabulary "
                            "holds no bracket pair such as (NP / )NP")
    return brackets


def constrained(decode_step, pieces: Sequence[str], eos_id: int = EOS_ID) -> Callable:
    """Wrap `decode_step(token_ids, state) -> (logits, state)` with the constraint.

    Args:
        pieces: the vocabulary's pieces, by id (brackets `\u2581(NP` / `\u2581)NP`, and the
            pieces that start a word, `\u2581` first).

    Raises:
        ArgumentError: the vocabulary holds no bracket pair: it is not a parser's.
    """
    brackets, vocab_size = parser_brackets(pieces), len(pieces)
    opens, closes = np.zeros(vocab_size, bool), np.zeros(vocab_size, bool)
    close_of = np.zeros(vocab_size, np.int32)
    for open_id, close_id in brackets.items():
        opens[open_id], closes[close_id], close_of[open_id] = True, True, close_id
    starts, continues = _word_pieces(pieces)
    opens, closes, close_of, starts, continues = (
        tf.constant(a) for a in (opens, closes, close_of, starts, continues))
    vocabulary = tf.range(vocab_size)[None, :]  # [1, V]

    def step(token_ids, state):
        words, written = state["tree_words"], state["tree_written"]
        stack, depth, opened = state["tree_stack"], state["tree_depth"], state["tree_opened"]
        max_depth = stack.shape[1] or tf.shape(stack)[1]
        # The token fed now is the one the search chose last (BOS at first): account for it.
        is_open, is_close = tf.gather(opens, token_ids), tf.gather(closes, token_ids)
        starts_word = tf.gather(starts, token_ids)
        continues_word = tf.gather(continues, token_ids)
        in_word = starts_word | continues_word
        word_pieces = tf.where(starts_word, 1, tf.where(continues_word,
                                                         state["tree_word_pieces"] + 1, 0))
        written += tf.cast(starts_word, tf.int32)
        push = tf.one_hot(depth, max_depth, on_value=True, off_value=False, dtype=tf.bool)
        stack = tf.where(push & is_open[:, None], tf.gather(close_of, token_ids)[:, None], stack)
        depth += tf.cast(is_open, tf.int32) - tf.cast(is_close, tf.int32)
        opened |= is_open
        in_a_row = tf.where(is_open, state["tree_opens_in_a_row"] + 1, 0)

        logits, state = decode_step(token_ids, state)
        remaining, inside = written < words, depth > 0
        allow_start = remaining & inside
        allow_open = (remaining & (depth < max_depth) & (in_a_row < MAX_OPENS_IN_A_ROW)
                      & (inside | ~opened))
        allow_close = inside & ~is_open & ((depth > 1) | ~remaining)
        allow_eos = opened & ~inside & ~remaining
        top = tf.gather(stack, tf.clip_by_value(depth - 1, 0, max_depth - 1), batch_dims=1)
        allowed = ((allow_start[:, None] & starts[None, :])
                   | ((in_word & (word_pieces < state["tree_longest_word"]))[:, None]
                      & continues[None, :])
                   | (allow_open[:, None] & opens[None, :])
                   | (allow_close[:, None] & (vocabulary == top[:, None]))
                   | (allow_eos[:, None] & (vocabulary == eos_id)))
        # A hypothesis left with no move (a full stack) may only end.
        stuck = ~tf.reduce_any(allowed, axis=1, keepdims=True)
        allowed |= stuck & (vocabulary == eos_id)
        logits = tf.where(allowed, tf.cast(logits, tf.float32), float("-inf"))
        return logits, {**state, "tree_written": written, "tree_stack": stack,
                        "tree_depth": depth, "tree_opens_in_a_row": in_a_row,
                        "tree_opened": opened, "tree_word_pieces": word_pieces}

    return step
