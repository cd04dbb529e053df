"""The Translator: models (one, or an ensemble's), their vocabulary and compiled searches,
turning lists of lines into hypotheses (paper section 6.1).

Lines are encoded, sorted by length and cut into batches of a few fixed padded shapes (so each
compiled search is reused), searched and decoded back in input order.
Shapes: B batch, S padded source length, R nbest, T output length.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np

from vtx import stop
from vtx.config import PAD_ID
from vtx.errors import ArgumentError, SearchInterrupted, out_of_device_memory
from vtx.inference.decoding import (LENGTH_BUCKET, DecodeOptions, available_memory,
                                   padded_batches, search_bytes)
from vtx.inference.loading import load_models
from vtx.inference.threads import in_order


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float  # log P(Y | X) / lp(|Y|)
    tokens: tuple[int, ...] = ()  # its pieces' ids, without EOS
    finished: bool = True  # it ended with EOS (False: cut at the length limit)
    # With `DecodeOptions.positional_scores`: log P of each token, then of EOS when finished.
    positional_scores: tuple[float, ...] | None = None
    # With `DecodeOptions.alignment_layer`: `i-j` pairs, source piece i of target piece j.
    alignment: str | None = None


class Found(NamedTuple):
    """A batch's search results as numpy arrays (`beam_search.SearchOutput`'s fields)."""

    tokens: np.ndarray  # int32 [B, R, T]
    lengths: np.ndarray  # int32 [B, R]
    scores: np.ndarray  # float32 [B, R]
    finished: np.ndarray  # bool [B, R]

    @classmethod
    def concatenate(cls, parts: list["Found"]) -> "Found":
        longest = max(part.tokens.shape[2] for part in parts)  # each stops on its own
        tokens = [np.pad(part.tokens, [(0, 0), (0, 0), (0, longest - part.tokens.shape[2])])
                  for part in parts]
        return cls(np.concatenate(tokens), *(np.concatenate([getattr(part, name) for part in parts])
                                             for name in cls._fields[1:]))


class Compiled:
    """The traced functions of one set of models, shared by Translators of any settings: the
    searches by what shapes their traces (`model_search.trace_key`), of which the `size` most
    recently used are kept, and the scorer and aligners (`Translator`'s positional scores and
    alignments). A search dropped is freed with its traces: a Translator asks for its search at
    each batch and holds none.

    Args:
        models: vtx Transformers of one vocabulary: one, or an ensemble's.
        size: searches kept.
    """

    def __init__(self, models: Sequence, size: int = 8):
        self.models, self.size = list(models), size
        self._searches: collections.OrderedDict[tuple, Callable] = collections.OrderedDict()
        self._others: dict[object, Callable] = {}  # the scorer; the aligner of each layer
        self._dropped_traces = 0  # of the searches no longer kept
        self._lock = threading.RLock()  # a server's search threads ask at once

    def search(self, options: DecodeOptions, pieces: Sequence[str] | None = None):
        """The `model_search.search_for` of `options` (`pieces`: with `constrain_trees`, the
        vocabulary's), to be called with their alpha, nbest and sampling."""
        from vtx.inference.model_search import search_for, trace_key

        return self._kept(("plain", trace_key(options)),
                          lambda: search_for(self.models, options, pieces))

    def constrained_search(self, options: DecodeOptions):
        """The `model_search.constrained_search_for` of `options`, to be called with their
        alpha and nbest."""
        from vtx.inference.model_search import constrained_search_for, trace_key

        return self._kept(("constrained", trace_key(options)),
                          lambda: constrained_search_for(self.models, options))

    def scorer(self) -> Callable:
        """`scoring.make_scorer` of the models, made once."""
        from vtx.inference.scoring import make_scorer

        with self._lock:
            if "scorer" not in self._others:
                self._others["scorer"] = make_scorer(self.models)
            return self._others["scorer"]

    def aligner(self, layer: int) -> Callable:
        """`alignment.make_aligner` of the first model at decoder `layer`, made once."""
        from vtx.inference.alignment import make_aligner

        with self._lock:
            if layer not in self._others:
                self._others[layer] = make_aligner(self.models[0], layer)
            return self._others[layer]

    def traces(self) -> int:
        """Traces of every function made so far, those dropped included."""
        with self._lock:
            live = list(self._searches.values()) + list(self._others.values())
        return self._dropped_traces + sum(f.experimental_get_tracing_count() for f in live)

    def _kept(self, key: tuple, make: Callable[[], Callable]) -> Callable:
        """The search of `key`, made now if not kept; the least recently used dropped past
        `size`."""
        with self._lock:
            if key in self._searches:
                self._searches.move_to_end(key)
                return self._searches[key]
            search = self._searches[key] = make()
            if len(self._searches) > self.size:
                _, dropped = self._searches.popitem(last=False)
                self._dropped_traces += dropped.experimental_get_tracing_count()
            return search


class Translator:
    """A model, its vocabulary and compiled searches, turning lists of lines into hypotheses.

    Args:
        models: vtx Transformers of one vocabulary: one, or an ensemble's (the mean of their
            probabilities at each step, `model_search.decoder`).
        vocab: a `vtx.data.vocab.Vocabulary` (encode/decode).
        options: search settings.
        warn: receives warnings (truncated lines).
        memory_budget: bytes a batch's search may take (`decoding.search_bytes` per sentence):
            batches hold fewer sentences when a wide beam would need more, and a sentence that
            alone needs more is refused. Default: half of the memory available now, over the
            `options.search_threads` batches searched at once.
        compiled: the traced functions of `models` (`Compiled`), shared with other Translators
            of them (of any settings); default: its own.
    """

    def __init__(self, models: Sequence, vocab, options: DecodeOptions,
                 warn: Callable[[str], None] = lambda message: None,
                 memory_budget: int | None = None, compiled: Compiled | None = None):
        from vtx.inference import tree_constraint

        if not models or not isinstance(models, (list, tuple)):
            raise TypeError(f"Translator takes a list of models (one: [model]), got {models!r}")
        self.models = list(models)
        self.model, self.vocab, self.options, self.warn = self.models[0], vocab, options, warn
        self.compiled = compiled if compiled is not None else Compiled(self.models)
        # Positions every model of an ensemble has.
        self.max_positions = min(m.config.max_positions for m in self.models)
        self._pieces = vocab.pieces(range(vocab.size)) if options.constrain_trees else None
        if self._pieces is not None:
            # Said now, not inside the search's trace.
            tree_constraint.parser_brackets(self._pieces)
        self._search(constrained=False)  # its settings are checked now
        if options.constraints:
            self._search(constrained=True)
        layers = self.model.config.num_layers
        if options.alignment_layer is not None and not (
                -layers <= options.alignment_layer < layers):
            raise ArgumentError("{alignment_layer} {value}: the model has {layers} decoder "
                                "layers (0 to {last}, or -1 for the last)",
                                value=options.alignment_layer, layers=layers, last=layers - 1)
        half = (available_memory() or 0) // 2  # 0: not known
        self.memory_budget = memory_budget if memory_budget is not None else (
            max(1, half // options.search_threads) if half else None)
        # Source positions a batch may hold, lowered when the device ran out of memory.
        self._device_positions = 1 << 30

    def _max_rows(self, width: int) -> int:
        """Sentences of `width` pieces searched together within `memory_budget` (half of the
        memory available when the Translator was made, over the batches searched at once).

        Raises:
            ArgumentError: one sentence alone needs more (a ValueError naming `beam` and
                the memory).
        """
        by_device = max(1, self._device_positions // width)  # after running out (below)
        if self.memory_budget is None:
            return by_device
        one = sum(search_bytes(self.options, m.config, width) for m in self.models)
        if one > self.memory_budget:
            raise ArgumentError(self._width_flag("{width_flag} {size}: the search of one "
                                                 "sentence of {width} pieces needs about "
                                                 "{need:.1f} GiB, more than the {budget:.1f} "
                                                 "GiB it may use (its share of half the "
                                                 "available memory); use a smaller {width_flag}"),
                                size=self.options.rows_per_sentence, width=width,
                                need=one / 2**30, budget=self.memory_budget / 2**30)
        return min(self.memory_budget // one, by_device)

    def _width_flag(self, template: str) -> str:
        """`template` with {width_flag} the argument that sets the hypotheses searched per
        sentence: `nbest` when sampling, else `beam`."""
        name = "nbest" if self.options.sampling is not None else "beam"
        return template.replace("{width_flag}", "{" + name + "}")

    def encode(self, text: str, line_number: int, ids: list[int] | None = None) -> list[int]:
        """Source ids as training saw them (pieces, no bos/eos), cut to the model's positions;
        `ids`: the text's pieces already encoded (`vocab.encode_source`), only cut here."""
        ids = self.vocab.encode_source(text) if ids is None else ids
        limit = self.max_positions
        if len(ids) > limit:
            self.warn(f"line {line_number}: {len(ids)} tokens, truncated to the model's "
                      f"{limit} positions")
            ids = ids[:limit]
        return ids

    def translate(self, lines: list[str], first_line_number: int = 1,
                  on_batch: Callable[[list[str]], None] | None = None,
                  prefixes: list[str] | None = None,
                  constraints: Sequence[Sequence[str]] | None = None,
                  line_ids: Sequence[int] | None = None,
                  encoded: Sequence[list[int]] | None = None) -> list[list[Hypothesis]]:
        """Up to nbest hypotheses for each line (`search_ids`), in input order; an empty line
        gets no hypothesis, nor does one of no pieces (a zero-width space, a byte-order mark,
        control characters alone: searched from a source of padding only, the model made a
        sentence up). `on_batch`: see `search_ids`. `prefixes` (with `options.prefix`): each
        line's target prefix, raw text ("" for none). `constraints` (with
        `options.constraints`): each line's phrases, raw text, that every finished hypothesis
        holds (none: the plain search). `line_ids`: each line's id (default
        `first_line_number - 1` plus its index), its number in messages less one, on which with
        the seed its samples depend (a server batching the lines of several requests gives each
        its index in its request, as `vtx translate` of those lines alone would). `encoded`: each
        line's pieces (`vocab.encode_source`), when the caller has them already (a server's checks).

        Raises:
            ArgumentError: a prefix leaves no room for EOS within its line's length limit, a
                constraint phrase encodes to no pieces, or constraints without
                `options.constraints`.
        """
        results: list[list[Hypothesis]] = [[] for _ in lines]
        if line_ids is None:
            line_ids = range(first_line_number - 1, first_line_number - 1 + len(lines))
        encoded = [(i, self.encode(line, line_ids[i] + 1,
                                   None if encoded is None else encoded[i]))
                   for i, line in enumerate(lines) if line.strip()]
        # A source of the vocabulary's suffix alone (an imported model's </s>) has no pieces.
        encoded = [(i, ids) for i, ids in encoded if len(ids) > len(self.vocab.source_suffix)]
        wanted = [i for i, _ in encoded]
        encoded = [ids for _, ids in encoded]
        prefix_ids = constraint_ids = None
        if self.options.prefix:
            prefix_ids = [self._encode_prefix(prefixes[i], len(ids), line_ids[i] + 1)
                          for i, ids in zip(wanted, encoded)]
        if constraints is not None:
            constraint_ids = [self.encode_constraints(constraints[i], line_ids[i] + 1)
                              for i in wanted]
        for index, hypotheses in zip(wanted, self.search_ids(
                encoded, on_batch=on_batch, line_ids=[line_ids[i] for i in wanted],
                prefixes=prefix_ids, constraints=constraint_ids)):
            results[index] = hypotheses
        return results

    def encode_constraints(self, phrases: Sequence[str], line_number: int,
                           path: str | Path = "") -> list[list[int]]:
        """A line's constraint phrases as piece ids, each encoded alone, as a sentence is (so
        that "Hund" is "▁Hund", the piece a word of the output starts with).

        Raises:
            ArgumentError: the options search without constraints, or a phrase of no pieces
                (empty or blank), naming `path` (when given), the line and the phrase.
        """
        if not self.options.constraints:
            raise ArgumentError("{constraints} given to a Translator whose options search "
                                "without them (DecodeOptions(constraints=True))")
        encoded = [self.vocab.encode(phrase) for phrase in phrases]
        for phrase, ids in zip(phrases, encoded):
            if not ids:
                where = "{constraints_path} " + ("{path} " if path else "") + "line {line}"
                raise ArgumentError(where + ": the constraint {phrase!r} encodes to no "
                                    "pieces", path=path, line=line_number, phrase=phrase)
        return encoded

    def _encode_prefix(self, text: str, source_length: int, line_number: int) -> list[int]:
        """A line's prefix ids, checked against its output length limit."""
        ids = self.vocab.encode(text) if text.strip() else []
        limit = self.options.length_limit(source_length, self.max_positions)
        if len(ids) >= limit:  # and EOS
            raise ArgumentError("{prefix_path} line {line}: {pieces} pieces, but the output of "
                                "that line holds at most {limit} tokens with EOS (raise "
                                "{max_len_b})", line=line_number, pieces=len(ids), limit=limit)
        return ids

    def search_ids(self, encoded: list[list[int]],
                   should_stop: Callable[[], bool] | None = None,
                   on_batch: Callable[[list[str]], None] | None = None,
                   line_ids: Sequence[int] | None = None,
                   prefixes: Sequence[list[int]] | None = None,
                   constraints: Sequence[Sequence[Sequence[int]]] | None = None
                   ) -> list[list[Hypothesis]]:
        """nbest hypotheses for each non-empty list of source ids (already within the model's
        positions), in input order, finished ones first; fewer where fewer exist: the search's
        empty slots (score -inf, no words, `beam_search.SearchOutput`) are left out, all but a
        first one (a search with every token forbidden from its first step), so that every
        sentence gets a hypothesis. `should_stop` is asked before each batch's search,
        `on_batch` told each batch's best texts after it (progress). `line_ids`: each list's
        line id (default its index), on which with the seed its samples depend (sampling).
        `prefixes` (with `options.prefix`): each list's target prefix ids, every hypothesis
        starting with them. `constraints` (with `options.constraints`): each list's phrases
        (piece ids; none: the plain search), every finished hypothesis holding them; a line
        whose best hypothesis did not finish is warned about.

        Raises:
            SearchInterrupted: `should_stop()` returned true.
        """
        results: list[list[Hypothesis]] = [[] for _ in encoded]

        def jobs() -> Iterator[Callable[[], tuple]]:
            for done, (rows, source, constrained) in enumerate(
                    self._batches(encoded, constraints)):
                if should_stop is not None and should_stop():
                    raise SearchInterrupted(f"stopped after {done} batches of the search")
                yield functools.partial(self._search_rows, rows, source, constrained, line_ids,
                                        prefixes, constraints, encoded)

        for rows, found, positional, alignments in in_order(jobs(), self.options.search_threads):
            for row, index in enumerate(rows):
                # Past the best, a slot of score -inf is no hypothesis: fewer than nbest exist.
                results[index] = [self._hypothesis(found, row, r, positional, alignments)
                                  for r in range(self.options.nbest)
                                  if r == 0 or found.scores[row, r] > -np.inf]
            if on_batch is not None:
                on_batch([results[index][0].text for index in rows])
        return results

    def _search_rows(self, rows: list[int], source: np.ndarray, constrained: bool, line_ids,
                     prefixes, constraints, encoded: list[list[int]]) -> tuple:
        """One batch of `search_ids` (`rows`: its lists' indices, `source` [B, S] their ids):
        (rows, its Found, its positional scores, its alignments)."""
        inputs = self._search_inputs(len(source), rows, line_ids, prefixes,
                                     constraints if constrained else None)
        found = self._search_batch(source, inputs, self._search(constrained))
        if constrained:
            self._warn_unfinished(found, rows, line_ids, encoded)
        return rows, found, self._positional_scores(source, found), \
            self._alignments(source, found)

    def _batches(self, encoded: list[list[int]],
                 constraints: Sequence[Sequence[Sequence[int]]] | None
                 ) -> Iterator[tuple[list[int], np.ndarray, bool]]:
        """`decoding.padded_batches` of the lists (rows: their indices in `encoded`), and
        whether the batch's lists have constraints: those without first, then those with."""
        groups = [list(range(len(encoded)))]
        if constraints is not None:
            groups = [[i for i in groups[0] if not constraints[i]],
                      [i for i in groups[0] if constraints[i]]]
        for constrained, group in enumerate(groups):
            # Empty rows pad a batch only to the shapes XLA compiles for: without XLA one graph
            # serves every shape, and an empty row would still be searched.
            for rows, source in padded_batches([encoded[i] for i in group],
                                               self.options.max_tokens, self._max_rows,
                                               pad_rows=self.options.jit_compile):
                yield [group[row] for row in rows], source, bool(constrained)

    def _search(self, constrained: bool) -> Callable:
        """The search of this Translator's options (`constrained`: the lexically constrained
        one, for the lines given constraints), their per-call settings bound."""
        options = self.options
        if constrained:
            return functools.partial(self.compiled.constrained_search(options),
                                     alpha=options.lenpen, nbest=options.nbest)
        return functools.partial(self.compiled.search(options, self._pieces),
                                 alpha=options.lenpen, nbest=options.nbest,
                                 sampling=options.sampling)

    def _warn_unfinished(self, found: Found, rows: list[int], line_ids, encoded) -> None:
        """Warn of each constrained line (`rows` of a batch) whose best hypothesis did not end:
        no hypothesis holding every phrase finished within its length limit."""
        for row, index in enumerate(rows):
            if not found.finished[row, 0]:
                line = (index if line_ids is None else line_ids[index]) + 1
                limit = self.options.length_limit(len(encoded[index]), self.max_positions)
                self.warn(f"line {line}: no hypothesis holding every constraint ended within "
                          f"the line's length limit ({limit} tokens with EOS): its best "
                          f"unfinished one is output")

    def _hypothesis(self, found: Found, row: int, rank: int, positional: np.ndarray | None,
                    alignments: list[list[str]] | None) -> Hypothesis:
        """Hypothesis `rank` of sentence `row` of a batch; `positional` [B, R, T + 1] or None,
        `alignments` [B][R] or None."""
        length = int(found.lengths[row, rank])
        tokens = found.tokens[row, rank, :length].tolist()
        finished = bool(found.finished[row, rank])
        scores = None if positional is None else tuple(
            positional[row, rank, :length + finished].tolist())
        return Hypothesis(self.vocab.decode(tokens), float(found.scores[row, rank]),
                          tuple(tokens), finished, scores,
                          None if alignments is None else alignments[row][rank])

    def _alignments(self, source: np.ndarray, found: Found) -> list[list[str]] | None:
        """`alignment.hard_alignment` of every hypothesis [B][R] (the first model's chosen
        layer) when the options ask for them, else None (no work)."""
        from vtx.inference.alignment import hard_alignment
        from vtx.inference.scoring import FORCED_BYTES

        if self.options.alignment_layer is None:
            return None
        aligner = self.compiled.aligner(self.options.alignment_layer)
        rows, nbest, width = found.tokens.shape
        # Rows of [T + 1, S] weights (and [H, T + 1, S] scores) a pass holds.
        step = max(1, FORCED_BYTES // (8 * self.model.config.num_heads * (width + 1)
                                       * source.shape[1]))
        flat = found.tokens.reshape(rows * nbest, width)
        sources = np.repeat(source, nbest, axis=0)
        weights = np.concatenate([aligner(sources[i:i + step], flat[i:i + step]).numpy()
                                  for i in range(0, rows * nbest, step)])
        return [[hard_alignment(weights[row * nbest + r], int(found.lengths[row, r]))
                 for r in range(nbest)] for row in range(rows)]

    def _positional_scores(self, source: np.ndarray, found: Found) -> np.ndarray | None:
        """float32 [B, R, T + 1] each token's log-prob (`scoring.forced_log_probs`) when the
        options ask for them, else None (no work)."""
        if not self.options.positional_scores:
            return None
        from vtx.inference.scoring import forced_in_chunks

        rows, nbest, width = found.tokens.shape
        flat = lambda x: x.reshape((rows * nbest,) + x.shape[2:])
        log_probs = forced_in_chunks(self.compiled.scorer(), len(self.models), self.vocab.size,
                                     np.repeat(source, nbest, axis=0), flat(found.tokens),
                                     flat(found.lengths), flat(found.finished))
        return log_probs.reshape(rows, nbest, width + 1)

    def _search_inputs(self, height: int, rows: list[int], line_ids, prefixes,
                       constraints=None) -> list:
        """The search's inputs after a batch's source, for its `rows` (the rest padding): the
        line ids int32 [B] when sampling; each row's `lexical.Phrases` for a batch of
        `constraints`; prefix ids int32 [B, P] and lengths int32 [B] with `options.prefix`."""
        from vtx.inference.lexical import Phrases

        inputs = []
        if constraints is not None:
            inputs.append([Phrases(constraints[i]) for i in rows]
                          + [Phrases()] * (height - len(rows)))
        if self.options.sampling is not None:
            lines = np.zeros(height, np.int32)  # padding rows: line 0, never read
            lines[:len(rows)] = rows if line_ids is None else [line_ids[i] for i in rows]
            inputs.append(lines)
        if self.options.prefix:
            longest = max(len(prefixes[i]) for i in rows)
            # P a multiple of LENGTH_BUCKET: few shapes for XLA to compile.
            width = max(1, -(-longest // LENGTH_BUCKET) * LENGTH_BUCKET)
            ids, lengths = np.full((height, width), PAD_ID, np.int32), np.zeros(height, np.int32)
            for row, index in enumerate(rows):
                ids[row, :len(prefixes[index])] = prefixes[index]
                lengths[row] = len(prefixes[index])
            inputs += [ids, lengths]
        return inputs

    def _search_batch(self, source: np.ndarray, inputs: list, search: Callable) -> Found:
        """The results of `search` on `source` [B, S] (`inputs`: `_search_inputs`, row-aligned);
        when the device runs out of memory, of its halves (each halved again as needed), and
        later batches hold at most as many source positions as the half that fitted.

        Raises:
            ArgumentError: one sentence alone does not fit (names `beam`).
        """
        try:
            output = stop.interruptible(search, source, *inputs)
            return Found(*(np.asarray(x) for x in (output.tokens, output.lengths, output.scores,
                                                   output.finished)))
        except Exception as error:
            if not out_of_device_memory(error):
                raise
            rows, width = source.shape
            if rows == 1:
                raise ArgumentError(self._width_flag(
                    "{width_flag} {size}: the search of one sentence of {width} pieces ran out "
                    "of the device's memory; use a smaller {width_flag}"),
                    size=self.options.rows_per_sentence, width=width) from error
            half = (rows + 1) // 2
            if half * width < self._device_positions:
                self._device_positions = half * width
                self.warn(f"out of the device's memory searching {rows} sentences of up to "
                          f"{width} pieces at once: batches of at most {half * width} source "
                          f"positions from now on")
        return Found.concatenate([
            self._search_batch(source[:half], [x[:half] for x in inputs], search),
            self._search_batch(source[half:], [x[half:] for x in inputs], search)])


def load_translator(path: str | Path, options: DecodeOptions,
                    warn: Callable[[str], None] = lambda message: None,
                    ema: bool = False) -> Translator:
    """A Translator from a checkpoint file that carries its vocabulary (`ema`: its EMA
    weights, `checkpoints.with_ema_weights`).

    Raises:
        ValueError: the checkpoint is unreadable, has no vocabulary, or its vocabulary does not
            match the model's embedding size.
    """
    return Translator(*load_models([path], ema), options, warn)
