"""Lexically constrained beam search: every finished hypothesis holds each of its sentence's
phrases, by dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained Decoding
with Dynamic Beam Allocation"; phrases met in any order, as Hu et al. 2019 and fairseq's
`LexicallyConstrainedBeamSearch`).

The search reaches the model as `beam_search` does, through tokens_to_logits(token_ids [N],
state) -> (logits [N, V], new state), and keeps its conventions (`beam_search`'s module
docstring: |Y| counts EOS, a hypothesis scores log P(Y | X) / lp(|Y|), the stop rules, EOS
finishing a hypothesis only from the K best candidates, PAD and BOS never generated). What
differs:

  * A sentence's constraints are phrases, each a sequence of tokens (`Phrases`); a hypothesis
    holds one when the phrase's tokens appear in it contiguously. Each hypothesis tracks its
    `Progress`: the phrases not met yet, and the longest end of its output that begins one of
    them. Its *bank* counts the phrase tokens that progress accounts for: all those of the met
    phrases and the matched ones of the next. Bank C (every phrase token) means every phrase
    is met.
  * EOS may end a hypothesis only in bank C: a finished hypothesis holds every phrase.
  * A step's candidates: the 2K best one-token extensions of the sentence's live hypotheses,
    and for each live hypothesis its best token and every token taking it one token further
    into an unmet phrase, however improbable.
  * Dynamic beam allocation: the candidates, sorted by score within each bank, are taken in
    turn across the banks, the highest bank first (the best of bank C, the best of bank C - 1,
    ..., the best of bank 0, then the second best of each, ...). The first 2K of that order
    stand for the plain search's 2K best: an EOS among its first K finishes a hypothesis, its
    first K others go on. Every bank keeps a share of the beam, so hypotheses that took a
    phrase's tokens are not crowded out by likelier ones that have not.
  * A sentence with fewer than R finished hypotheses at its length limit (its phrases did not
    fit, or the beam found no way to end after them) fills the rest with live ones, the
    highest bank first, then by score (`finished = False`).
  * Without phrases every candidate is in bank 0, the order is the score's, and the search is
    the plain one: `beam_search`'s hypotheses and scores.

The search runs from the host: each step is one call of a compiled function (`HostStep`: the
decoder's step and the candidates' log-probs, traced once for every shape), then each
sentence's candidates are chosen in Python. As with `beam_search(drop_done=True)`, the rows of
a sentence whose search is over leave the decoder's state. `benchmarks/translate_speed.py
--modes` measures its cost against the plain search, which `vtx translate` keeps for the lines
without constraints.

Shapes: B batch, K beam size, V vocabulary, L max_length, R nbest, N = b * K rows of the
decoder's state (b sentences still searching), C' candidates a row gives (2K + 1 + the banned
ids), W constraint tokens a row may take next.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from vtx.config import BOS_ID, EOS_ID, PAD_ID
from vtx.inference.beam_search import (SearchOutput, TokensToLogits, candidate_log_probs,
                                       expand_to_beams, gather_rows, make_search, stop_rule)
from vtx.inference.beam_search import length_penalty as lp

_NEG_INF = float("-inf")


class Progress(NamedTuple):
    """A hypothesis's progress on its sentence's phrases (`Phrases`)."""

    unmet: tuple[int, ...]  # the phrases (their indices) not in the output yet
    matched: tuple[int, ...]  # the longest end of the output that begins an unmet phrase


class Phrases:
    """A sentence's constraints: phrases (token sequences) that must each appear, contiguous and
    in any order, in a finished hypothesis. Phrases may overlap in the output ("New York" holds
    "York" too); a phrase given twice is one phrase.

    Raises:
        ValueError: a phrase of no tokens.
    """

    def __init__(self, phrases: Sequence[Sequence[int]] = ()):
        self.phrases = tuple(dict.fromkeys(tuple(int(t) for t in phrase) for phrase in phrases))
        if any(not phrase for phrase in self.phrases):
            raise ValueError("a constraint phrase needs at least one token")
        self.tokens = sum(len(phrase) for phrase in self.phrases)  # C, the highest bank
        self._advanced: dict[tuple[Progress, int], Progress] = {}

    def start(self) -> Progress:
        """The progress of an empty output."""
        return Progress(tuple(range(len(self.phrases))), ())

    def advance(self, progress: Progress, token: int) -> Progress:
        """The progress once `token` is appended to an output at `progress`.

        Every unmet phrase ending at `token` is met; the matched end becomes the longest end of
        the output that begins a phrase still unmet. Both can be read from `progress.matched`
        and `token` alone: an end of the output that begins an unmet phrase is at most one
        token longer than an end that did so before it (the argument of the Aho-Corasick
        automaton), and the longest of those holds every shorter one.
        """
        key = (progress, token)
        if key not in self._advanced:
            tail = progress.matched + (token,)
            unmet = tuple(i for i in progress.unmet
                          if tail[-len(self.phrases[i]):] != self.phrases[i])
            self._advanced[key] = Progress(unmet, self._longest_start(tail, unmet))
        return self._advanced[key]

    def _longest_start(self, tail: tuple[int, ...], unmet: tuple[int, ...]) -> tuple[int, ...]:
        """The longest end of `tail` that begins one of the `unmet` phrases (maybe none: ())."""
        for start in range(len(tail) + 1):
            end = tail[start:]
            if any(self.phrases[i][:len(end)] == end for i in unmet):
                return end
        return ()

    def bank(self, progress: Progress) -> int:
        """The phrase tokens `progress` accounts for: C exactly when every phrase is met."""
        unmet = sum(len(self.phrases[i]) for i in progress.unmet)
        return self.tokens - unmet + len(progress.matched)

    def next_tokens(self, progress: Progress) -> set[int]:
        """The tokens that take an output at `progress` one token further into an unmet
        phrase: the next token after each end of the output that begins one (the empty end
        included: each unmet phrase's first token)."""
        tokens = set()
        for i in progress.unmet:
            phrase = self.phrases[i]
            for start in range(len(progress.matched) + 1):
                end = progress.matched[start:]
                if len(end) < len(phrase) and phrase[:len(end)] == end:
                    tokens.add(phrase[len(end)])
        return tokens


class HostStep:
    """The device's part of a step of the search, compiled once for every number of rows and
    cache length: reorder the decoder state's rows, run the decoder, take each row's
    candidates.

    Args:
        tokens_to_logits: (token_ids int32 [N], state) -> (logits [N, V], new state).
        beam_size: K.
        beam_invariant: keys of a dict state whose tensors keep one row per sentence (as
            `beam_search` takes them).
        bos_id: the start token (never generated, nor is PAD).
    """

    def __init__(self, tokens_to_logits: TokensToLogits, beam_size: int,
                 beam_invariant: tuple[str, ...] = (), bos_id: int = BOS_ID):
        self.tokens_to_logits, self.beam_invariant = tokens_to_logits, tuple(beam_invariant)
        self.beam_size = beam_size
        # One more than the plain search's 2K: EOS may be barred from a row's best.
        self.count = 2 * beam_size + 1
        self.banned_ids = (PAD_ID, bos_id)
        self._compiled = None

    def __call__(self, rows, token_ids, wanted, state):
        """Args: rows int32 [N], the row of `state` each new row continues; token_ids int32
        [N], each row's last token; wanted int32 [N, W], tokens whose log-probs each row
        needs (any where it needs fewer).

        Returns:
            (log-probs float32 [N, C'] in descending order, -inf at banned ids, their token ids
            int32 [N, C'], the log-probs of `wanted` float32 [N, W], the new state).
        """
        if self._compiled is None:
            spec = lambda x: tf.TensorSpec([None] * x.shape.rank, x.dtype)
            self._compiled = tf.function(self._step, autograph=False, input_signature=[
                tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([None, None], tf.int32), tf.nest.map_structure(spec, state)])
        return self._compiled(rows, token_ids, wanted, state)

    def tracing_count(self) -> int:
        """Times the step was traced (once for every shape, 0 before its first call)."""
        return 0 if self._compiled is None else self._compiled.experimental_get_tracing_count()

    def _step(self, rows, token_ids, wanted, state):
        state = gather_rows(state, rows, self.beam_invariant)
        logits, state = self.tokens_to_logits(token_ids, state)
        logits = tf.cast(logits, tf.float32)
        log_probs, ids, log_norm = candidate_log_probs(logits, self.count, self.banned_ids)
        chosen = tf.gather(logits, wanted, batch_dims=1)  # [N, W]
        wanted_log_probs = tf.where(chosen == _NEG_INF, _NEG_INF, chosen - log_norm)
        return log_probs, ids, wanted_log_probs, state


class _Live(NamedTuple):
    """A live hypothesis of the host's beam."""

    tokens: tuple[int, ...]  # generated after BOS
    logprob: np.float32  # log P of its tokens
    progress: Progress


class _Candidate(NamedTuple):
    """A one-token extension of a live hypothesis."""

    total: np.float32  # log P of the extended hypothesis
    slot: int  # the live hypothesis extended
    token: int
    progress: Progress
    bank: int


class _Sentence:
    """One sentence's search: K live slots (None: empty) and its finished hypotheses, best first."""

    def __init__(self, phrases: Phrases, beam_size: int, limit: int):
        self.phrases, self.limit = phrases, limit
        self.live: list[_Live | None] = [_Live((), np.float32(0.0), phrases.start())]
        self.live += [None] * (beam_size - 1)
        self.finished: list[tuple[np.float32, tuple[int, ...]]] = []  # (score, words), <= K
        self.done = False


def allocate(banks: Sequence[int], totals: Sequence[float], width: int) -> list[int]:
    """Dynamic beam allocation: the first `width` candidates (their indices) of the order that
    takes the best of each bank, highest bank first, then the second best of each, and so on.
    Ties keep the candidates' order."""
    by_bank = sorted(range(len(banks)), key=lambda i: (-banks[i], -totals[i]))
    rank, seen = {}, {}
    for i in by_bank:
        rank[i] = seen.get(banks[i], 0)
        seen[banks[i]] = rank[i] + 1
    return sorted(by_bank, key=lambda i: (rank[i], -banks[i]))[:width]


def _candidates(sentence: _Sentence, log_probs, ids, wanted, wanted_log_probs,
                eos_id: int) -> list[_Candidate]:
    """A sentence's candidates of a step, each (slot, token) once, in the order: the 2K best
    extensions, each slot's best token, each slot's constraint tokens.

    Args:
        log_probs, ids: [K, C'] its rows' candidates (`HostStep`).
        wanted, wanted_log_probs: [K, W] its rows' constraint tokens and their log-probs.
    """
    beam = len(sentence.live)
    live = np.array([_NEG_INF if h is None else h.logprob for h in sentence.live], np.float32)
    unmet = np.array([h is not None and bool(h.progress.unmet) for h in sentence.live])
    totals = live[:, None] + log_probs  # [K, C']
    allowed = np.isfinite(totals) & ~((ids == eos_id) & unmet[:, None])
    totals = np.where(allowed, totals, _NEG_INF)
    # Ties to the lower flat index, as top_k breaks them in `beam_search`.
    best = [divmod(int(i), ids.shape[1]) for i in np.argsort(-totals, axis=None, kind="stable")
            [:2 * beam] if allowed.flat[i]]
    best += [(slot, int(np.argmax(allowed[slot]))) for slot in range(beam) if allowed[slot].any()]
    pairs = [(slot, int(ids[slot, column]), totals[slot, column]) for slot, column in best]
    wanted_totals = live[:, None] + wanted_log_probs
    pairs += [(slot, int(token), wanted_totals[slot, column])
              for slot, column in zip(*np.nonzero(np.isfinite(wanted_totals)))
              if (token := wanted[slot, column]) != PAD_ID]
    candidates, seen = [], set()
    for slot, token, total in pairs:
        if (slot, token) not in seen:
            seen.add((slot, token))
            parent = sentence.live[slot].progress
            progress = parent if token == eos_id else sentence.phrases.advance(parent, token)
            candidates.append(_Candidate(total, slot, token, progress,
                                         sentence.phrases.bank(progress)))
    return candidates


def _advance(sentence: _Sentence, step: int, outputs, search, penalties) -> list[int]:
    """One step of one sentence: candidates chosen by dynamic beam allocation, EOS among the
    first K finishing, the first K others live; then whether its search is over.

    Args:
        step: the tokens its hypotheses hold after this step (|Y| of one ending now).
        outputs: its K rows of (log_probs, ids, wanted, wanted_log_probs).
        search: the settings (`beam_search.Search`).
        penalties: float32 [L + 1], lp(|Y|) by |Y|.

    Returns:
        The slot each new live slot continues (an empty one: 0).
    """
    beam = search.beam_size
    candidates = _candidates(sentence, *outputs, search.eos_id)
    taken = [candidates[i] for i in allocate([c.bank for c in candidates],
                                             [c.total for c in candidates], 2 * beam)]
    ended = [(c.total / penalties[step], sentence.live[c.slot].tokens)
             for c in taken[:beam] if c.token == search.eos_id]
    # Stable: a finished hypothesis keeps its place before a new one of its score.
    sentence.finished = sorted(sentence.finished + ended, key=lambda f: -f[0])[:beam]
    going = [c for c in taken if c.token != search.eos_id][:beam]
    sentence.live = [_Live(sentence.live[c.slot].tokens + (c.token,), c.total, c.progress)
                     for c in going] + [None] * (beam - len(going))
    sentence.done = _sentence_done(sentence, step, search, penalties)
    return [c.slot for c in going] + [0] * (beam - len(going))


def _sentence_done(sentence: _Sentence, step: int, search, penalties) -> bool:
    """`beam_search.stop_rule` of one sentence (its finished hypotheses kept sorted)."""
    live = [h.logprob for h in sentence.live if h is not None]
    finished = [score for score, _ in sentence.finished] + [_NEG_INF] * search.beam_size
    best_possible = max(live) / penalties[sentence.limit] if live else _NEG_INF
    return bool(stop_rule(search.stop, step >= sentence.limit or not live,
                          finished[search.beam_size - 1], finished[search.nbest - 1],
                          best_possible))


def _best(sentence: _Sentence, nbest: int, penalties) -> list[tuple[float, tuple, bool]]:
    """The R best (score, words, finished) of a sentence: finished first, then live ones, the
    highest bank first; empty slots (-inf, (), False) past them."""
    live = sorted((h for h in sentence.live if h is not None),
                  key=lambda h: (-sentence.phrases.bank(h.progress), -h.logprob))
    best = [(score, words, True) for score, words in sentence.finished]
    best += [(h.logprob / penalties[sentence.limit], h.tokens, False) for h in live]
    return (best + [(_NEG_INF, (), False)] * nbest)[:nbest]


def _outputs(sentences: list[_Sentence], nbest: int, max_length: int, penalties,
             steps: int) -> SearchOutput:
    """The `SearchOutput` (numpy arrays) of the finished search."""
    tokens = np.full((len(sentences), nbest, max_length), PAD_ID, np.int32)
    lengths = np.zeros((len(sentences), nbest), np.int32)
    scores = np.full((len(sentences), nbest), _NEG_INF, np.float32)
    finished = np.zeros((len(sentences), nbest), bool)
    for b, sentence in enumerate(sentences):
        for r, (score, words, ended) in enumerate(_best(sentence, nbest, penalties)):
            tokens[b, r, :len(words)] = words
            lengths[b, r], scores[b, r], finished[b, r] = len(words), score, ended
    return SearchOutput(tokens, lengths, scores, finished, np.int32(steps))


def _feed(sentences: list[_Sentence], bos_id: int, eos_id: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Each live slot's last token int32 [N] (BOS first; PAD for an empty slot) and the
    tokens that advance it int32 [N, W] (PAD-padded, W >= 1): further into a phrase, or EOS
    once it holds every phrase (it may end then, but need not be likely to)."""
    last = lambda h: PAD_ID if h is None else (h.tokens[-1] if h.tokens else bos_id)
    slots = [(sentence, h) for sentence in sentences for h in sentence.live]
    tokens = np.array([last(h) for _, h in slots], np.int32)
    advancing = lambda s, h: (sorted(s.phrases.next_tokens(h.progress)) if h.progress.unmet
                              else [eos_id] if s.phrases.phrases else [])
    nexts = [[] if h is None else advancing(s, h) for s, h in slots]
    wanted = np.full((len(slots), max([1] + [len(n) for n in nexts])), PAD_ID, np.int32)
    for row, tokens_next in enumerate(nexts):
        wanted[row, :len(tokens_next)] = tokens_next
    return tokens, wanted


@functools.lru_cache(maxsize=4096)
def _penalty(length: int, alpha: float, formula: str) -> np.float32:
    """lp(length) as `beam_search`'s graph computes it at a step, to the last bit: of one length,
    in a graph (eager, or of a vector, TensorFlow's pow may differ in the last bit), alpha fed
    as a tensor as the compiled search takes it (one trace for every alpha)."""
    return _graph_penalty(tf.constant(length, tf.int32), tf.constant(alpha, tf.float32),
                          formula).numpy()


_graph_penalty = tf.function(lp, autograph=False)


def beam_search(step: HostStep, initial_state: Any, constraints: Sequence[Phrases],
                max_lengths, beam_size: int = 4, alpha: float = 0.6,
                length_penalty: str = "gnmt", eos_id: int = EOS_ID,
                bos_id: int = BOS_ID, nbest: int = 1, stop: str = "exact") -> SearchOutput:
    """Beam search of B sentences in which a finished hypothesis holds each of its sentence's
    phrases (module docstring); eager, run from the host.

    Args:
        step: the decoder's compiled step (`HostStep`, of this `beam_size` and `bos_id`).
        initial_state: the decoder state of the B sentences (rank >= 1 tensors lead with B,
            but the step's beam-invariant entries), as `beam_search` takes it; its cache grows.
        constraints: each sentence's `Phrases` (none: the plain search's result).
        max_lengths: int [B], each sentence's limit on |Y| (EOS included), >= 1.
        beam_size, alpha, length_penalty, eos_id, bos_id, nbest, stop: as `beam_search`'s.

    Returns:
        `SearchOutput` of numpy arrays, tokens [B, R, max(max_lengths)].

    Raises:
        ValueError: a setting out of range, or a phrase holding PAD, BOS or EOS.
    """
    max_lengths = np.asarray(max_lengths, np.int64)
    search = make_search(step.tokens_to_logits, len(constraints), beam_size,
                         int(max_lengths.max()), alpha, length_penalty, eos_id, bos_id,
                         nbest, stop, step.beam_invariant)
    if any(token in (PAD_ID, bos_id, eos_id) for phrases in constraints
           for phrase in phrases.phrases for token in phrase):
        raise ValueError("a constraint phrase holds PAD, BOS or EOS")
    penalties = np.array([_penalty(n, search.alpha, search.penalty)
                          for n in range(search.max_length + 1)], np.float32)
    sentences = [_Sentence(phrases, beam_size, int(limit))
                 for phrases, limit in zip(constraints, max_lengths)]
    state = expand_to_beams(initial_state, beam_size, step.beam_invariant)
    active, rows, steps = sentences, np.arange(len(sentences) * beam_size, dtype=np.int32), 0
    while active:
        tokens, wanted = _feed(active, bos_id, eos_id)
        log_probs, ids, wanted_log_probs, state = step(rows, tokens, wanted, state)
        outputs = (log_probs.numpy(), ids.numpy(), wanted, wanted_log_probs.numpy())
        steps += 1
        parents = [_advance(sentence, steps, [x[i * beam_size:(i + 1) * beam_size]
                                              for x in outputs], search, penalties)
                   for i, sentence in enumerate(active)]
        kept = [i for i, sentence in enumerate(active) if not sentence.done]
        if len(kept) < len(active) and kept and step.beam_invariant:
            invariant = gather_rows({key: state[key] for key in step.beam_invariant},
                                    tf.constant(kept, tf.int32))
            state = {**state, **invariant}
        rows = np.array([i * beam_size + parent for i in kept for parent in parents[i]],
                        np.int32)
        active = [active[i] for i in kept]
    return _outputs(sentences, nbest, search.max_length, penalties, steps)
