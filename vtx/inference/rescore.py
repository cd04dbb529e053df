"""`vtx score`: the log-probability of given target sentences under a checkpoint (or the mean
probability of an ensemble), e.g. to rescore the n-best lists of `vtx translate --nbest`.

The n-best format (`vtx translate --nbest K`, K > 1): K lines per source line, line K * i + r
holding hypothesis r of source line i as `score<TAB>text`; `nan<TAB>` (no text) stands for no
hypothesis. With K = 1 each target line is the text alone. `vtx score` writes the same format,
the score replaced by the scoring model's, so that its output is an n-best list again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from vtx.config import PAD_ID
from vtx.errors import ArgumentError, DataError
from vtx.inference.beam_search import length_penalty
from vtx.inference.decoding import LENGTH_BUCKET, DecodeOptions
from vtx.inference.files import (STDIN, check_output, open_source, output_sink, read_lines,
                                 read_references)
from vtx.inference.loading import load_models
from vtx.precision import DecodingPrecision
from vtx.inference.scoring import forced_in_chunks, make_scorer


@dataclasses.dataclass(frozen=True)
class Scored:
    """A target sentence's log-probability given its source (`Scorer.score`)."""

    score: float  # logprob / lp(|Y|), |Y| its pieces + EOS; nan: no source or no target
    logprob: float  # log P(Y | X), EOS included
    tokens: tuple[int, ...]  # the target's pieces' ids, without EOS
    positional_scores: tuple[float, ...]  # log P of each piece, then of EOS


NO_SCORE = Scored(float("nan"), float("nan"), (), ())


class Scorer:
    """Scores target sentences given their sources under one model or an ensemble.

    Args:
        models: vtx Transformers of one vocabulary.
        vocab: their `vtx.data.vocab.Vocabulary`.
        options: lenpen and lenpen_formula make the length-normalised score; max_tokens bounds
            the source tokens of a pass; with jit_compile the pass is XLA-compiled, over a
            power of two of rows and sources and targets padded to a multiple of
            LENGTH_BUCKET, so that few shapes are compiled.
    """

    def __init__(self, models: Sequence, vocab, options: DecodeOptions):
        self.models, self.vocab, self.options = list(models), vocab, options
        self._scorer = make_scorer(self.models, options.jit_compile)
        self._bucket = LENGTH_BUCKET if options.jit_compile else 1
        self.max_positions = min(model.config.max_positions for model in self.models)

    def score(self, pairs: list[tuple[list[int], list[int] | None]]) -> list[Scored]:
        """(source ids, target ids) -> their `Scored`, in input order; a pair of no source ids
        or a target of None gets NO_SCORE. Targets must hold fewer ids than `max_positions`."""
        results = [NO_SCORE] * len(pairs)
        order = sorted((i for i, (source, target) in enumerate(pairs)
                        if source and target is not None),
                       key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
        start = 0
        while start < len(order):
            chunk = order[start:start + self._rows(order[start:], pairs)]
            start += len(chunk)
            for index, scored in zip(chunk, self._score_chunk([pairs[i] for i in chunk])):
                results[index] = scored
        return results

    def _rows(self, order: list[int], pairs) -> int:
        """How many of the pairs `order` shares a pass: max_tokens source tokens, padding
        counted (with XLA a power of two)."""
        rows, longest = 0, 0
        for index in order:
            longest = max(longest, _rounded_up(len(pairs[index][0]), self._bucket))
            if rows and (rows + 1) * longest > self.options.max_tokens:
                break
            rows += 1
        return 1 << (rows.bit_length() - 1) if self.options.jit_compile else rows

    def _score_chunk(self, pairs) -> list[Scored]:
        sources, targets = zip(*pairs)
        lengths = np.array([len(t) for t in targets], np.int32)
        log_probs = forced_in_chunks(self._scorer, len(self.models), self.vocab.size,
                                     _padded(sources, self._bucket),
                                     _padded(targets, self._bucket), lengths,
                                     np.ones(len(pairs), bool))
        penalties = length_penalty(lengths + 1, self.options.lenpen,
                                   self.options.lenpen_formula).numpy()
        results = []
        for row, ids in enumerate(targets):
            positional = log_probs[row, :len(ids) + 1]
            total = float(positional.astype(np.float64).sum())
            results.append(Scored(total / float(penalties[row]), total, tuple(ids),
                                  tuple(positional.tolist())))
        return results


def _rounded_up(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def _padded(rows: Sequence[Sequence[int]], multiple: int = 1) -> np.ndarray:
    """int32 [N, W] of the rows, PAD-padded: W the longest row's length (at least 1) rounded
    up to a multiple of `multiple`."""
    width = _rounded_up(max(1, *map(len, rows)), multiple)
    array = np.full((len(rows), width), PAD_ID, np.int32)
    for row, ids in enumerate(rows):
        array[row, :len(ids)] = ids
    return array


def parse_targets(lines: list[str], nbest: int, name: str | Path) -> list[str | None]:
    """The texts of a target file: the lines themselves when nbest is 1, else the n-best
    format's `score<TAB>text` lines (module docstring); None for `nan<TAB>`, no hypothesis.

    Raises:
        DataError: a line without a tab in an n-best file (naming the file and line).
    """
    if nbest == 1:
        return list(lines)
    texts: list[str | None] = []
    for number, line in enumerate(lines, start=1):
        score, tab, text = line.partition("\t")
        if not tab:
            raise DataError(f"{name} line {number}: no score<TAB>text, the format of vtx "
                            f"translate --nbest {nbest}")
        texts.append(None if score == "nan" and not text else text)
    return texts


def encode_pairs(scorer: Scorer, sources: list[str], texts: list[str | None], nbest: int,
                 target_name: str | Path, warn: Callable[[str], None]):
    """(source ids, target ids or None) for target line k: hypothesis k mod nbest of source
    line k // nbest. Sources are cut to the model's positions (a warning, as translate's).

    Raises:
        ArgumentError: the target does not hold nbest lines per source line.
        DataError: a target needs more positions than the model has (file and line named).
    """
    if len(texts) != nbest * len(sources):
        raise ArgumentError("{target_path} {path} has {targets} lines; {nbest} {nbest_value} "
                            "per line of the {sources}-line input needs {needed}",
                            path=target_name, targets=len(texts), nbest_value=nbest,
                            sources=len(sources), needed=nbest * len(sources))
    limit = scorer.max_positions
    source_ids = []
    for number, line in enumerate(sources, start=1):
        ids = scorer.vocab.encode_source(line) if line.strip() else []
        if len(ids) > limit:
            warn(f"line {number}: {len(ids)} tokens, truncated to the model's {limit} positions")
        source_ids.append(ids[:limit])
    pairs = []
    for number, text in enumerate(texts, start=1):
        ids = None if text is None else scorer.vocab.encode(text)
        if ids is not None and len(ids) >= limit:  # with EOS, one more position
            raise DataError(f"{target_name} line {number}: {len(ids)} pieces and EOS, more "
                            f"than the model's {limit} positions")
        pairs.append((source_ids[(number - 1) // nbest], ids))
    return pairs


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def format_scored(scored: Scored, text: str | None, output_format: str, vocab,
                  line_id: int, rank: int, source: str) -> str:
    """One output line: `score<TAB>text` (the n-best format), or a jsonl record."""
    if output_format == "text":
        return f"{scored.score:.4f}\t{text or ''}"
    return json.dumps({"id": line_id, "rank": rank, "source": source, "target": text,
                       "score": _finite(scored.score), "logprob": _finite(scored.logprob),
                       "tokens": vocab.pieces(scored.tokens),
                       "positional_scores": [_finite(x) for x in scored.positional_scores]},
                      ensure_ascii=False)


def score_file(checkpoints: Sequence[str | Path], input_path: str | Path | None,
               target_path: str | Path, output_path: str | Path | None, options: DecodeOptions,
               nbest: int = 1, output_format: str = "text", force: bool = False,
               warn: Callable[[str], None] = lambda message: None,
               log: Callable[[str], None] = lambda message: None,
               ema: bool = False,
               precision: DecodingPrecision = DecodingPrecision()) -> list[Scored]:
    """`vtx score` as a library call: each line of `target_path` (nbest per line of
    `input_path`, None: stdin) scored under the checkpoints' models (`ema`: their EMA weights;
    `precision`: what they are built in)
    and written to `output_path` (None: stdout) as `format_scored` says.

    Raises:
        OutputExistsError, ArgumentError, DataError, OSError, ValueError: as `vtx translate`
            says them (`check_output`), and `encode_pairs`'s.
    """
    paths = [check_output(output_path, force, checkpoint,
                          {"--input": input_path, "--target": target_path})
             for checkpoint in checkpoints]
    texts = parse_targets(read_references(target_path), nbest, target_path)
    with contextlib.ExitStack() as stack:
        source = open_source(input_path, stack)
        sources = list(read_lines(source, input_path or STDIN))
        models, vocab = load_models(paths, ema, precision)
        for path in paths:
            log(f"checkpoint: {path}")
        scorer = Scorer(models, vocab, options)
        results = scorer.score(encode_pairs(scorer, sources, texts, nbest, target_path, warn))
        with output_sink(output_path, force=force) as write:
            for number, (scored, text) in enumerate(zip(results, texts)):
                write(format_scored(scored, text, output_format, vocab, number // nbest,
                                    number % nbest, sources[number // nbest]))
    return results
