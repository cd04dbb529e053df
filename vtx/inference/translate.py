"""Translate text with a trained checkpoint (paper section 6.1).

Lines are read in buffers, encoded, sorted by length and cut into batches of a few fixed padded
shapes (so each compiled search is reused), searched, decoded and written back in input order.
Shapes: B batch, S padded source length, R nbest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import itertools
import json
import math
import stat
import sys
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from vtx import atomic, checkpoints, stop
from vtx.config import PAD_ID, ModelConfig
from vtx.data.text import count_lines, decode_line, lines_in_file, open_binary
from vtx.errors import ArgumentError, DataError, SearchInterrupted, out_of_device_memory
from vtx.inference.decoding import (LENGTH_BUCKET, DecodeOptions, available_memory,
                                   padded_batches, search_bytes)
from vtx.progress_lines import LineProgress

if TYPE_CHECKING:  # the glossary module reads its file with `read_references`, below
    from vtx.inference.glossary import Glossary


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


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or the newest numbered checkpoint of a `vtx train` save directory.

    Raises:
        ValueError: nothing usable at `path`, named as the --checkpoint it was given as.
    """
    path = Path(path)
    if path.is_dir():
        try:
            return checkpoints.newest(path)[0]
        except ValueError as error:
            raise ValueError(f"--checkpoint {error}") from None
    if path.exists() and not path.is_file():
        mode = path.stat().st_mode
        kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
        kind = next((name for test, name in kinds if test(mode)), "not a regular file")
        raise ValueError(f"--checkpoint {path} is {kind}: give a checkpoint file (.npz) or a "
                         f"save directory")
    if not path.is_file():
        raise ValueError(f"--checkpoint {path}: no such checkpoint file or directory")
    return path


def load_model(checkpoint: checkpoints.Checkpoint, dtype: str = "float32"):
    """Build the checkpoint's Transformer and load its weights (optimizer state is ignored)."""
    from vtx.models import transformer

    model_config = ModelConfig.from_dict(checkpoint.meta["model_config"])
    model = transformer.build(model_config, dtype=dtype)
    if [tuple(v.shape) for v in model.variables] != [a.shape for a in checkpoint.model]:
        raise ValueError("checkpoint variables do not match its own model configuration")
    for variable, array in zip(model.variables, checkpoint.model):
        variable.assign(array)
    return model


class Translator:
    """A model, its vocabulary and compiled searches, turning lists of lines into hypotheses.

    Args:
        model: a vtx Transformer, or a list of them of one vocabulary (an ensemble: the mean of
            their probabilities at each step, `model_search.decoder`).
        vocab: a `vtx.data.vocab.Vocabulary` (encode/decode).
        options: search settings.
        warn: receives warnings (truncated lines).
        memory_budget: bytes a batch's search may take (`decoding.search_bytes` per sentence):
            batches hold fewer sentences when a wide beam would need more, and a sentence that
            alone needs more is refused. Default: half of the memory available now.
    """

    def __init__(self, model, vocab, options: DecodeOptions,
                 warn: Callable[[str], None] = lambda message: None,
                 memory_budget: int | None = None):
        from vtx.inference import tree_constraint
        from vtx.inference.model_search import constrained_search_for, search_for

        self.models = list(model) if isinstance(model, (list, tuple)) else [model]
        self.model, self.vocab, self.options, self.warn = self.models[0], vocab, options, warn
        # Positions every model of an ensemble has.
        self.max_positions = min(m.config.max_positions for m in self.models)
        pieces = vocab.pieces(range(vocab.size)) if options.constrain_trees else None
        if pieces is not None:
            tree_constraint.parser_brackets(pieces)  # said now, not inside the search's trace
        model = self.models if len(self.models) > 1 else self.model
        self._search = search_for(model, options, pieces)
        # The lines given constraints (`vtx.inference.lexical`); the others take `_search`.
        self._constrained_search = constrained_search_for(model, options) \
            if options.constraints else None
        self._scorer = None  # made when first needed (`_positional_scores`)
        self._aligner = None  # likewise (`_alignments`)
        layers = self.model.config.num_layers
        if options.alignment_layer is not None and not (
                -layers <= options.alignment_layer < layers):
            raise ArgumentError("{alignment_layer} {value}: the model has {layers} decoder "
                                "layers (0 to {last}, or -1 for the last)",
                                value=options.alignment_layer, layers=layers, last=layers - 1)
        self.memory_budget = memory_budget if memory_budget is not None else (
            (available_memory() or 0) // 2 or None)
        # Source positions a batch may hold, lowered when the device ran out of memory.
        self._device_positions = 1 << 30

    def _max_rows(self, width: int) -> int:
        """Sentences of `width` pieces searched together within `memory_budget` (half of the
        memory available when the Translator was made).

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
                                                 "GiB it may use (half of the available "
                                                 "memory); use a smaller {width_flag}"),
                                size=self.options.rows_per_sentence, width=width,
                                need=one / 2**30, budget=self.memory_budget / 2**30)
        return min(self.memory_budget // one, by_device)

    def _width_flag(self, template: str) -> str:
        """`template` with {width_flag} the argument that sets the hypotheses searched per
        sentence: `nbest` when sampling, else `beam`."""
        name = "nbest" if self.options.sampling is not None else "beam"
        return template.replace("{width_flag}", "{" + name + "}")

    def encode(self, text: str, line_number: int) -> list[int]:
        """Source ids as training saw them (pieces, no bos/eos), cut to the model's positions."""
        ids = self.vocab.encode(text)
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
                  line_ids: Sequence[int] | None = None) -> list[list[Hypothesis]]:
        """Up to nbest hypotheses for each line (`search_ids`), in input order; an empty line
        gets no hypothesis, nor does one of no pieces (a zero-width space, a byte-order mark,
        control characters alone: searched from a source of padding only, the model made a
        sentence up). `on_batch`: see `search_ids`. `prefixes` (with `options.prefix`): each
        line's target prefix, raw text ("" for none). `constraints` (with
        `options.constraints`): each line's phrases, raw text, that every finished hypothesis
        holds (none: the plain search). `line_ids`: each line's id (default
        `first_line_number - 1` plus its index), its number in messages less one, on which with
        the seed its samples depend (a server batching the lines of several requests gives each
        its index in its request, as `vtx translate` of those lines alone would).

        Raises:
            ArgumentError: a prefix leaves no room for EOS within its line's length limit, a
                constraint phrase encodes to no pieces, or constraints without
                `options.constraints`.
        """
        results: list[list[Hypothesis]] = [[] for _ in lines]
        if line_ids is None:
            line_ids = range(first_line_number - 1, first_line_number - 1 + len(lines))
        encoded = [(i, self.encode(line, line_ids[i] + 1))
                   for i, line in enumerate(lines) if line.strip()]
        wanted = [i for i, ids in encoded if ids]
        encoded = [ids for _, ids in encoded if ids]
        prefix_ids = constraint_ids = None
        if self.options.prefix:
            prefix_ids = [self._encode_prefix(prefixes[i], len(ids), line_ids[i] + 1)
                          for i, ids in zip(wanted, encoded)]
        if constraints is not None:
            constraint_ids = [self.encode_constraints(constraints[i], line_ids[i] + 1)
                              for i in wanted]
        for index, hypotheses in zip(wanted, self.search_ids(
                encoded, on_batch=on_batch, line_ids=[line_ids[i] for i in wanted],
                prefixes=prefix_ids,
                constraints=constraint_ids)):
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
        for done, (rows, source, constrained) in enumerate(self._batches(encoded, constraints)):
            if should_stop is not None and should_stop():
                raise SearchInterrupted(f"stopped after {done} batches of the search")
            inputs = self._search_inputs(len(source), rows, line_ids, prefixes,
                                         constraints if constrained else None)
            found = self._search_batch(
                source, inputs, self._constrained_search if constrained else self._search)
            if constrained:
                self._warn_unfinished(found, rows, line_ids, encoded)
            positional = self._positional_scores(source, found)
            alignments = self._alignments(source, found)
            for row, index in enumerate(rows):
                # Past the best, a slot of score -inf is no hypothesis: fewer than nbest exist.
                results[index] = [self._hypothesis(found, row, r, positional, alignments)
                                  for r in range(self.options.nbest)
                                  if r == 0 or found.scores[row, r] > -np.inf]
            if on_batch is not None:
                on_batch([results[index][0].text for index in rows])
        return results

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
        from vtx.inference.alignment import hard_alignment, make_aligner
        from vtx.inference.scoring import FORCED_BYTES

        if self.options.alignment_layer is None:
            return None
        if self._aligner is None:
            self._aligner = make_aligner(self.model, self.options.alignment_layer)
        rows, nbest, width = found.tokens.shape
        # Rows of [T + 1, S] weights (and [H, T + 1, S] scores) a pass holds.
        step = max(1, FORCED_BYTES // (8 * self.model.config.num_heads * (width + 1)
                                       * source.shape[1]))
        flat = found.tokens.reshape(rows * nbest, width)
        sources = np.repeat(source, nbest, axis=0)
        weights = np.concatenate([self._aligner(sources[i:i + step], flat[i:i + step]).numpy()
                                  for i in range(0, rows * nbest, step)])
        return [[hard_alignment(weights[row * nbest + r], int(found.lengths[row, r]))
                 for r in range(nbest)] for row in range(rows)]

    def _positional_scores(self, source: np.ndarray, found: Found) -> np.ndarray | None:
        """float32 [B, R, T + 1] each token's log-prob (`scoring.forced_log_probs`) when the
        options ask for them, else None (no work)."""
        if not self.options.positional_scores:
            return None
        from vtx.inference.scoring import forced_in_chunks, make_scorer

        if self._scorer is None:
            self._scorer = make_scorer(self.models)
        rows, nbest, width = found.tokens.shape
        flat = lambda x: x.reshape((rows * nbest,) + x.shape[2:])
        log_probs = forced_in_chunks(self._scorer, len(self.models), self.vocab.size,
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


STDIN = "standard input"  # the input's name in messages when it is not a file


def split_lines(data: bytes) -> list[bytes]:
    """Lines as `read_lines` reads a stream: cut at "\n" only (a lone "\r" or a form feed
    stays inside its line), the last one without a newline kept, "\r\n" ends removed."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line.rstrip(b"\r") for line in lines]


@contextlib.contextmanager
def damaged_gzip_named(name: str | Path, place: Callable[[], str] = lambda: "") -> Iterator[None]:
    """Say a damaged gzip stream read inside the block as a `DataError` naming `name` and
    `place()`, called when the error comes (e.g. " after line 3").

    Raises:
        DataError: "NAME: cannot read itPLACE (ERROR)" for a truncated stream (EOFError),
            damage inside a compressed block (zlib.error) or a bad header (gzip.BadGzipFile).
    """
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{name}: cannot read it{place()} ({error})") from None


def read_lines(stream: Iterable[bytes], name: str | Path) -> Iterator[str]:
    """Decode byte lines as UTF-8, without their line ends.

    Raises:
        DataError: a line is not UTF-8 (`name`, the line and the bytes named: a gzip file not
            named .gz, or another encoding, gave the search nonsense to translate), or a gzip
            stream is damaged.
    """
    number = 0
    with damaged_gzip_named(name, lambda: f" after line {number}"):
        for number, raw in enumerate(stream, start=1):
            yield decode_line(raw, name, number).rstrip("\r\n")


def _finite(value: float) -> float | None:
    """JSON has no infinity nor nan: null stands for them."""
    return value if math.isfinite(value) else None


def json_record(translator: Translator, line_id: int, source: str,
                hypotheses: list[Hypothesis]) -> str:
    """One input line's jsonl record (`line_record`) as a line of JSON."""
    return json.dumps(line_record(translator, line_id, source, hypotheses), ensure_ascii=False)


def line_record(translator: Translator, line_id: int, source: str,
                hypotheses: list[Hypothesis]) -> dict:
    """One input line's record: its id (0 for the first line), its source, and per hypothesis
    its text, score, pieces and (when computed) positional scores and alignment."""
    records = []
    for hypothesis in hypotheses:
        record = {"text": hypothesis.text, "score": _finite(hypothesis.score),
                  "tokens": translator.vocab.pieces(hypothesis.tokens),
                  "finished": hypothesis.finished}
        if hypothesis.positional_scores is not None:
            record["positional_scores"] = [_finite(x) for x in hypothesis.positional_scores]
        if hypothesis.alignment is not None:
            record["alignment"] = hypothesis.alignment
        records.append(record)
    return {"id": line_id, "source": source, "hypotheses": records}


@dataclasses.dataclass(frozen=True)
class LineFile:
    """A file of one entry per input line, read before the search: `--prefix`'s prefixes or
    `--constraints`' phrase lists, handed to `Translator.translate` as `keyword`."""

    argument: str  # the library argument its errors name: "prefix_path", "constraints_path"
    path: str | Path
    entries: list  # one per input line
    keyword: str  # `Translator.translate`'s argument: "prefixes", "constraints"

    def chunk(self, start: int, count: int) -> list:
        """The entries of input lines start to start + count - 1 (from 0).

        Raises:
            ArgumentError: the file ends before them.
        """
        entries = self.entries[start:start + count]
        if len(entries) < count:
            raise ArgumentError("{" + self.argument + "} {path} has {count} lines, the input "
                                "more", path=self.path, count=len(self.entries))
        return entries

    def check_count(self, lines: int) -> None:
        """Raises: ArgumentError: the file has another number of lines than the input's
        `lines`."""
        if len(self.entries) != lines:
            raise ArgumentError("{" + self.argument + "} {path} has {count} lines, the input "
                                "{lines}", path=self.path, count=len(self.entries), lines=lines)


def translate_stream(translator: Translator, lines: Iterable[str], write: Callable[[str], None],
                     buffer_size: int, progress: LineProgress | None = None,
                     output_format: str = "text", line_files: Sequence[LineFile] = (),
                     glossary: Glossary | None = None) -> list[str]:
    """Translate `lines` `buffer_size` at a time, writing one output line per input line (with
    nbest R > 1, R lines `score<TAB>text` per input: line R * i + r of the output
    is hypothesis r of input line i; `nan<TAB>`, no text, stands for no hypothesis: R of them
    for a line of no pieces, and the rest of a sentence's R when fewer exist; with alignments
    each line ends with a tab and the hypothesis's `i-j` pairs); with `output_format` "jsonl",
    one `json_record` per input line. `line_files`: target prefixes or constraints, an entry per
    input line (`Translator.translate`); `glossary`: its terms found in a line join the line's
    constraints (`vtx.inference.glossary`). Returns the best hypotheses' texts;
    `progress` is told
    of each batch of the search as it finishes, and finished at the end.

    Raises:
        ArgumentError: one of `line_files` has another number of lines than `lines`.
    """
    best, number = [], 1
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, buffer_size)):
        extra = {f.keyword: f.chunk(number - 1, len(chunk)) for f in line_files}
        if glossary is not None:
            from vtx.inference.glossary import translator_constraints

            extra["constraints"] = translator_constraints(
                translator, glossary, chunk, extra.get("constraints"),
                range(number - 1, number - 1 + len(chunk)))
        for offset, hypotheses in enumerate(translator.translate(
                chunk, number, progress.batch if progress else None, **extra)):
            best.append(hypotheses[0].text if hypotheses else "")
            if output_format == "jsonl":
                write(json_record(translator, number - 1 + offset, chunk[offset], hypotheses))
                continue
            # With alignments, each line ends with a tab and its hypothesis's alignment.
            aligned = translator.options.alignment_layer is not None
            ending = lambda hypothesis: f"\t{hypothesis.alignment or ''}" if aligned else ""
            empty = Hypothesis("", float("nan"))
            if translator.options.nbest == 1:
                write(best[-1] + ending(hypotheses[0] if hypotheses else empty))
                continue
            missing = translator.options.nbest - len(hypotheses)
            for hypothesis in hypotheses + [empty] * missing:
                write(f"{hypothesis.score:.4f}\t{hypothesis.text}{ending(hypothesis)}")
        number += len(chunk)
        if progress:  # with the chunk's empty lines, not searched
            progress.reach(number - 1)
    for line_file in line_files:
        line_file.check_count(number - 1)
    if progress:
        progress.finish()
    return best


def check_output(output_path: str | Path | None, force: bool, checkpoint: str | Path,
                 inputs: dict[str, str | Path | None]) -> Path:
    """Check where the output goes before any work: standard output, which must be open, or a
    file: `atomic.output_path` (none of `inputs`, flag -> file, nor the checkpoint file), never
    over a zip archive (a checkpoint under any name, which --force would replace with text).

    Returns:
        The checkpoint file (`resolve_checkpoint`), to be loaded: a save dir is listed once, so
        that a checkpoint training writes meanwhile is not loaded in place of the one checked.

    Raises:
        ArgumentError: standard output is closed (started with `>&-`), naming `output_path`.
        OutputExistsError, ValueError, OSError: see `atomic.output_path`; ValueError also for a
            zip archive, or nothing usable at `checkpoint`.
    """
    if not output_path and sys.stdout is None:  # what was made would be lost, after the work
        raise ArgumentError("standard output is closed (started with >&-): give {output_path}")
    path = resolve_checkpoint(checkpoint)
    if output_path:
        target = atomic.output_path(output_path, force, inputs={**inputs, "--checkpoint": path})
        if target.is_file() and zipfile.is_zipfile(target):
            raise ValueError(f"--output {output_path} is a zip archive, such as a checkpoint: "
                             f"the text written would replace it, --force or not; give "
                             f"another file")
    return path


def open_source(input_path: str | Path | None, stack: contextlib.ExitStack):
    """The binary input: `input_path` opened on `stack` (read as gzip when its name ends in
    .gz, as `vtx preprocess` reads it), or standard input when it is None.

    Raises:
        ArgumentError: standard input is closed (started with `<&-`), naming `input_path`.
    """
    if input_path:
        return stack.enter_context(open_binary(Path(input_path)))  # gzip when named .gz
    if sys.stdin is None:
        raise ArgumentError("standard input is closed: give {input_path}")
    return sys.stdin.buffer


@contextlib.contextmanager
def output_sink(path: str | Path | None, flush_each_line: bool = False, force: bool = False):
    """A `write(line)` to stdout, or to `path` as `vtx.atomic.open_output` writes it (complete
    or not at all; a link's target; a FIFO or device directly).

    Raises:
        OutputExistsError: `path` is an existing regular file and `force` is false.
    """
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(atomic.open_output(path, force)) if path else sys.stdout
        name = path or "standard output"  # named in a write's error (a full disk says none)

        def write(line: str) -> None:
            stop.check()  # a signal whose exception a library swallowed ends it here
            with atomic.errors_named(name):
                handle.write(line + "\n")
                if flush_each_line:
                    handle.flush()

        yield write
        with atomic.errors_named(name):
            handle.flush()  # what is left: an error here, not unnamed at close or exit


def translate_file(checkpoint: str | Path | Sequence[str | Path], input_path: str | Path | None,
                   output_path: str | Path | None, options: DecodeOptions,
                   buffer_size: int = 1024, force: bool = False,
                   warn: Callable[[str], None] = lambda message: None,
                   log: Callable[[str], None] = lambda message: None,
                   other_inputs: dict[str, str | Path | None] | None = None,
                   ema: bool = False, output_format: str = "text",
                   prefix_path: str | Path | None = None,
                   constraints_path: str | Path | None = None,
                   glossary_path: str | Path | None = None) -> list[str]:
    """`vtx translate` as a library call: lines of `input_path` (None: stdin) translated into
    `output_path` (None: stdout) by the model of `checkpoint` (a file, or a save dir's newest;
    a list of them: their ensemble), written as `output_format` says (`translate_stream`);
    with `prefix_path` each line's hypotheses start with that file's line; with
    `constraints_path` every finished hypothesis holds the phrases of that file's line
    (`read_constraints`); with `glossary_path` the target terms of the glossary's source terms
    found in a line join its constraints (`vtx.inference.glossary`).

    Returns:
        The best hypothesis of every line, in input order.

    `other_inputs` (flag -> file) are files of the caller that `output_path` may not be either.
    `ema`: the checkpoint's EMA weights (`checkpoints.with_ema_weights`).

    Raises:
        OutputExistsError: `output_path` exists and `force` is false (checked before any work).
        ArgumentError: standard output is closed and no `output_path` is given.
        OSError, ValueError: an unreadable input or checkpoint (named), or `output_path` is one
            of the inputs; constraints with a mode they exclude (`DecodeOptions`), or a phrase
            of no pieces.
    """
    from vtx.inference.glossary import Glossary

    options = dataclasses.replace(options, prefix=options.prefix or bool(prefix_path),
                                  constraints=options.constraints or bool(constraints_path)
                                  or bool(glossary_path))
    several = not isinstance(checkpoint, (str, Path))
    paths = [check_output(output_path, force, one, {
        "--input": input_path, "--prefix": prefix_path, "--constraints": constraints_path,
        "--glossary": glossary_path, **(other_inputs or {})})
        for one in (checkpoint if several else [checkpoint])]
    line_files = read_line_files(input_path, prefix_path, constraints_path)
    glossary = Glossary.read(glossary_path) if glossary_path else None
    with contextlib.ExitStack() as stack:
        source = open_source(input_path, stack)  # a closed stdin is said before the model loads
        if len(paths) == 1:
            translator = load_translator(paths[0], options, warn, ema)
        else:
            translator = Translator(*load_models(paths, ema), options, warn)
        for path in paths:
            log(f"checkpoint: {path}")
        if glossary is not None:
            glossary.check_targets(lambda text: len(translator.vocab.encode(text)),
                                   str(glossary_path))
        for line_file in line_files:  # every phrase, before the search
            if line_file.keyword == "constraints":
                for number, phrases in enumerate(line_file.entries, 1):
                    translator.encode_constraints(phrases, number, line_file.path)
        progress = LineProgress(log, "translated", lines_in_file(input_path) if input_path
                                    else None)
        with output_sink(output_path, flush_each_line=buffer_size == 1, force=force) as write:
            return translate_stream(translator, read_lines(source, input_path or STDIN),
                                    write, buffer_size, progress, output_format, line_files,
                                    glossary)


def read_line_files(input_path: str | Path | None, prefix_path: str | Path | None,
                    constraints_path: str | Path | None) -> list[LineFile]:
    """The files of an entry per input line that are given, read; each of another number of
    lines than an `--input` file is refused now (`check_reference_length`).

    Raises:
        ArgumentError, OSError, DataError: as `read_references` and `check_reference_length`.
    """
    line_files = []
    if prefix_path:
        line_files.append(LineFile("prefix_path", prefix_path, read_references(prefix_path),
                                   "prefixes"))
    if constraints_path:
        line_files.append(LineFile("constraints_path", constraints_path,
                                   read_constraints(constraints_path), "constraints"))
    for line_file in line_files:
        check_reference_length(input_path, line_file.path, line_file.entries, line_file.argument)
    return line_files


def read_constraints(path: str | Path) -> list[list[str]]:
    """A constraints file: per line its tab-separated phrases, raw text (an empty line: none).

    Raises:
        OSError, DataError: as `read_references`.
    """
    return [line.split("\t") if line else [] for line in read_references(path)]


def bleu(hypotheses: list[str], reference_path: str | Path,
         references: list[str] | None = None) -> tuple[str, str]:
    """Detokenized sacreBLEU of `hypotheses` against a reference file: (score line, signature).

    Args:
        references: the file's lines when already read (`read_references`).

    Raises:
        ArgumentError: the reference has another number of lines (a ValueError naming
            `reference_path` and both counts), or both are empty.
        DataError: it is not UTF-8 (`read_references`).
    """
    import sacrebleu

    if references is None:
        references = read_references(reference_path)
    if len(references) != len(hypotheses):
        raise ArgumentError("{reference_path} {path} has {references} lines, the input "
                            "{hypotheses}", path=reference_path, references=len(references),
                            hypotheses=len(hypotheses))
    if not references:
        raise ArgumentError("{reference_path} {path} and the input are empty: no BLEU to "
                            "compute", path=reference_path)
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(hypotheses, [references])
    return str(score), str(metric.get_signature())


def read_references(reference_path: str | Path) -> list[str]:
    """A reference file's lines (read before translating, so that a bad file costs no search),
    read as gzip when named `.gz`, as `--input` is.

    Raises:
        OSError: it cannot be read.
        DataError: bytes that are not UTF-8 (naming the file, line and column), or a damaged
            gzip file.
    """
    with damaged_gzip_named(reference_path), open_binary(Path(reference_path)) as handle:
        data = handle.read()
    lines = split_lines(data)
    return [decode_line(line, reference_path, number) for number, line in enumerate(lines, 1)]


def check_reference_length(input_path: str | Path | None, reference_path: str | Path,
                           references: list[str], argument: str = "reference_path") -> None:
    """Compare the lines of an `--input` file with its references (or, `argument` naming it,
    another file of a line per input line) before the search (`bleu` would say so after it);
    standard input, read once, is compared by `bleu` (or `translate_stream`) only.

    Raises:
        ArgumentError: other numbers of lines, as `bleu` says it.
        DataError: a damaged gzip input.
    """
    if not input_path or not Path(input_path).is_file():  # a FIFO is read once, by the search
        return
    with damaged_gzip_named(input_path), open_binary(Path(input_path)) as handle:
        count = count_lines(handle)
    if count != len(references):
        raise ArgumentError("{" + argument + "} {path} has {references} lines, the input "
                            "{hypotheses}", path=reference_path, references=len(references),
                            hypotheses=count)


def checkpoint_vocabulary(checkpoint: checkpoints.Checkpoint, path: str | Path):
    """The SentencePiece vocabulary carried by a checkpoint read from `path`.

    Raises:
        ValueError: the checkpoint has no vocabulary, or its vocabulary does not match the
            model's embedding size (the message names `path`).
    """
    from vtx.data.vocab import Vocabulary

    if checkpoint.vocab is None:
        raise ValueError(f"{path}: the checkpoint carries no vocabulary")
    vocab = Vocabulary.from_bytes(checkpoint.vocab, f"in {path}")
    vocab_size = checkpoint.meta["model_config"]["vocab_size"]
    if vocab.size != vocab_size:
        raise ValueError(f"{path}: vocabulary has {vocab.size} pieces but the model "
                         f"{vocab_size} embeddings")
    return vocab


def load_translator(path: str | Path, options: DecodeOptions,
                    warn: Callable[[str], None] = lambda message: None,
                    ema: bool = False) -> Translator:
    """A Translator from a checkpoint file that carries its vocabulary (`ema`: its EMA
    weights, `checkpoints.with_ema_weights`).

    Raises:
        ValueError: the checkpoint is unreadable, has no vocabulary, or its vocabulary does not
            match the model's embedding size.
    """
    checkpoint = checkpoints.load(path, ema)
    vocab = checkpoint_vocabulary(checkpoint, path)
    return Translator(load_model(checkpoint), vocab, options, warn)


def load_models(paths: Sequence[str | Path], ema: bool = False) -> tuple[list, object]:
    """The models of checkpoint files that carry one vocabulary (an ensemble), and it; `ema`:
    each checkpoint's EMA weights.

    Raises:
        ValueError: a checkpoint is unreadable or has no vocabulary, or two have different
            vocabularies (both files and the first differing piece named).
    """
    from vtx.data.vocab import differing_pieces

    models, vocab, first = [], None, None
    for path in paths:
        checkpoint = checkpoints.load(path, ema)
        this = checkpoint_vocabulary(checkpoint, path)
        if vocab is None:
            vocab, first = this, path
        elif differ := differing_pieces(vocab, this):
            index, ours, theirs = differ[0]
            raise ValueError(f"--checkpoint {first} and --checkpoint {path} have different "
                             f"vocabularies (piece {index}: {ours!r} and {theirs!r}); an "
                             f"ensemble needs one")
        models.append(load_model(checkpoint))
    return models, vocab
