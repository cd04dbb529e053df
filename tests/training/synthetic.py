"""A small, deterministic parallel corpus for training tests: the target is the source reversed
(learnable by a tiny model), batches fixed by (seed, epoch) like the real pipeline's."""

import numpy as np

from vtx.config import BOS_ID, EOS_ID, PAD_ID


def make_pairs(count: int, vocab_size: int, seed: int = 0, max_len: int = 8):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        source = rng.integers(EOS_ID + 1, vocab_size, rng.integers(3, max_len + 1)).tolist()
        pairs.append((source, source[::-1]))
    return pairs


def to_batch(pairs, lengths=None):
    """Padded to the pairs' longest, or to `lengths` = (source, target) when given (one shape for
    every batch: one trace)."""
    src_len = max(len(s) for s, _ in pairs)
    tgt_len = max(len(t) for _, t in pairs) + 1
    if lengths is not None:
        if src_len > lengths[0] or tgt_len > lengths[1]:
            raise ValueError(f"pairs of {src_len} x {tgt_len} tokens do not fit {lengths}")
        src_len, tgt_len = lengths
    batch = {k: np.full((len(pairs), n), PAD_ID, np.int32)
             for k, n in (("source", src_len), ("target_in", tgt_len), ("target_out", tgt_len))}
    for i, (source, target) in enumerate(pairs):
        batch["source"][i, :len(source)] = source
        batch["target_in"][i, :len(target) + 1] = [BOS_ID] + target
        batch["target_out"][i, :len(target) + 1] = target + [EOS_ID]
    return batch


def epoch_maker(pairs, batch_size: int, seed: int = 0, lengths=None):
    """`(epoch, skip) -> list of batches`, shuffled by (seed, epoch). `lengths`: a list of
    (source, target) shapes that the epoch's batches take in turn (batch k the k-th modulo its
    size), as in `to_batch`; None pads each batch to its own longest pair."""

    def make_epoch(epoch: int, skip: int):
        order = np.random.default_rng([seed, epoch]).permutation(len(pairs))
        batches = [to_batch([pairs[j] for j in order[i:i + batch_size]],
                            lengths[(i // batch_size) % len(lengths)] if lengths else None)
                   for i in range(0, len(order), batch_size)]
        return batches[skip:]

    return make_epoch
