"""A toy decoder for search tests: logits from a fixed random table indexed by a hash of the prefix.

The state holds each row's start hash [N], its history of fed tokens [N, 8] and a rank-0 step
counter (shared, never gathered); the hash is recomputed from the history at every step, so a
search that reorders the state wrongly reads the wrong rows of the table.
"""

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID

TABLE_SIZE = 1009  # prime: the hash stays in int32 (1009 * 31 + V < 2^31)
HISTORY = 8


class HashPrefixDecoder:
    """tokens_to_logits for `beam_search`; `log_probs_after` gives the same numbers in numpy.

    Args:
        vocab_size: V.
        seed: seeds the table.
        eos_bias: added to the EOS column (large: stops early; very negative: never stops).
    """

    def __init__(self, vocab_size: int, seed: int = 0, eos_bias: float = 0.0):
        table = np.random.default_rng(seed).normal(scale=2.0, size=(TABLE_SIZE, vocab_size))
        table[:, EOS_ID] += eos_bias
        self.table = table.astype(np.float32)
        self.vocab_size = vocab_size

    @staticmethod
    def next_hash(hash_value, token):
        return (hash_value * 31 + token + 1) % TABLE_SIZE

    def initial_state(self, starts):
        """Decoding state of len(starts) sentences, each with its own start hash."""
        return {"start": tf.constant(starts, tf.int32), "step": tf.constant(0, tf.int32),
                "history": tf.fill((len(starts), HISTORY), PAD_ID)}

    def __call__(self, token_ids, state):
        """[N] fed tokens -> logits [N, V] at the hash of (start, every token fed so far)."""
        step = state["step"]
        written = tf.range(HISTORY)[None, :] == step  # [1, HISTORY]; needs step < HISTORY
        history = tf.where(written, token_ids[:, None], state["history"])  # [N, HISTORY]
        hash_value = state["start"]
        for position in range(HISTORY):
            hash_value = tf.where(position <= step,
                                  self.next_hash(hash_value, history[:, position]), hash_value)
        logits = tf.gather(tf.constant(self.table), hash_value)
        return logits, {"start": state["start"], "step": step + 1, "history": history}

    def log_probs_after(self, hash_value: int) -> np.ndarray:
        """float64 [V] log-probs the decoder gives after reaching `hash_value`."""
        logits = self.table[hash_value].astype(np.float64)
        return logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()


def exhaustive_ranking(decoder: HashPrefixDecoder, start: int, max_length: int, alpha: float,
                       penalty: str):
    """Every finished hypothesis (|Y| <= max_length, EOS counted) with its score, best first.

    Returns:
        list of (score, words tuple) sorted by descending score.
    """
    allowed = [t for t in range(decoder.vocab_size) if t not in (PAD_ID, BOS_ID)]
    lp = (lambda n: ((5.0 + n) / 6.0) ** alpha) if penalty == "gnmt" else (lambda n: n ** alpha)
    ranking = []

    def visit(hash_value, words, logprob):
        log_probs = decoder.log_probs_after(hash_value)
        for token in allowed:
            if token == EOS_ID:
                ranking.append(((logprob + log_probs[token]) / lp(len(words) + 1), words))
            elif len(words) + 2 <= max_length:  # room for this word and a final EOS
                visit(decoder.next_hash(hash_value, token), words + (token,),
                      logprob + log_probs[token])

    visit(decoder.next_hash(start, BOS_ID), (), 0.0)
    return sorted(ranking, key=lambda item: -item[0])
