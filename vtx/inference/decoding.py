"""Decoding settings, in one place: the search (beam, length penalty alpha and its formula), the
output length limit a * |X| + b, and the padded batch shapes.

Every decoder of vtx reads them: `vtx translate` and `vtx parse` (their flags' defaults are the
presets below), the task metric at validation time (`vtx.training.validation`), the SavedModel
export (baked into its graph) and `vtx.export.ct2.translate_lines` (CTranslate2 under vtx's
conventions).

Conventions: |X| is the number of source pieces (no BOS/EOS); |Y| counts every generated token, EOS
included; a hypothesis may hold at most a * |X| + b tokens, never more than the model's positions.
The length penalty divides log P(Y | X) by ((5 + |Y|) / 6)^alpha (`gnmt`, Wu et al. 2016, the
paper's) or |Y|^alpha (`fairseq`, also CTranslate2's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterator

import numpy as np

from vtx.config import PAD_ID
from vtx.errors import ArgumentError

LENPEN_FORMULAS = ("gnmt", "fairseq")  # the length penalty lp(|Y|) that alpha shapes
# When a sentence's beam search stops (`vtx.inference.beam_search`): "fairseq" once `beam`
# hypotheses have finished (fairseq's rule); "exact" when no live hypothesis can beat the
# nbest-th best finished one, bounding it by the length limit's penalty (the result of running to
# the limit, often in many more steps); "never" at the length limit only.
STOP_RULES = ("fairseq", "exact", "never")
# How `vtx translate` writes its hypotheses: "text", a line each (`score<TAB>text` with nbest),
# or "jsonl", a JSON record per input line with every hypothesis's tokens and scores.
OUTPUT_FORMATS = ("text", "jsonl")
LENGTH_BUCKET = 8  # source lengths are padded up to a multiple of this


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """How `vtx.inference.sampling` draws each token (fairseq's --sampling flags)."""

    topk: int = 0  # draw from the k most probable tokens only; 0: from all
    topp: float = 1.0  # from the fewest most probable tokens of mass >= p; 1: from all
    temperature: float = 1.0  # logits divided by it before the draw (< 1: sharper)
    seed: int = 0  # with the line's id, fixes its samples (modulo 2^32)

    def __post_init__(self) -> None:
        if self.topk < 0:
            raise ArgumentError("{sampling_topk} must be >= 0, got {value}", value=self.topk)
        if not 0.0 < self.topp <= 1.0:
            raise ArgumentError("{sampling_topp} must lie in (0, 1], got {value}",
                                value=self.topp)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ArgumentError("{temperature} must be finite and > 0, got {value}",
                                value=self.temperature)


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """Search settings; defaults are the paper's for translation (section 6.1)."""

    beam: int = 4
    lenpen: float = 0.6  # alpha
    lenpen_formula: str = "gnmt"  # "gnmt": ((5 + |Y|) / 6)^alpha; "fairseq": |Y|^alpha
    max_len_a: float = 1.0  # |Y| <= a * |X| + b
    max_len_b: int = 50
    nbest: int = 1
    stop: str = "exact"  # one of STOP_RULES
    # Source tokens per batch, padding counted. Finished sentences leave a batch's search, so
    # a large batch costs no idle rows; it only needs fewer decoder steps for the same lines.
    max_tokens: int = 16384
    jit_compile: bool = False
    # Parsing with the words in the slots of the trees: every output is a well-formed tree over
    # the source's pieces (`vtx.inference.tree_constraint`).
    constrain_trees: bool = False
    # Draw `nbest` samples per sentence instead of the beam search (`beam` and `stop` unused).
    sampling: SamplingOptions | None = None
    # Also each output token's log-prob (`Hypothesis.positional_scores`): a forward pass of
    # the outputs after the search, none without it.
    positional_scores: bool = False
    # Every hypothesis starts with its line's given target prefix (`vtx.inference.prefix`).
    prefix: bool = False
    # Lines given phrases are searched so that every finished hypothesis holds them
    # (`vtx.inference.lexical`, run from the host); the others by the plain search.
    constraints: bool = False
    # Also each output's word alignment from this decoder layer's cross-attention (negative:
    # from the last), a pass after the search (`vtx.inference.alignment`); None: none.
    alignment_layer: int | None = None
    # Batches searched at once, each on a thread of its own (`vtx.inference.threads`); the
    # results are those of one at a time.
    search_threads: int = 1

    @property
    def rows_per_sentence(self) -> int:
        """Hypotheses searched at once per sentence: the beam, or the samples."""
        return self.nbest if self.sampling is not None else self.beam

    def __post_init__(self) -> None:
        if self.sampling is not None:
            if self.nbest < 1:
                raise ArgumentError("{nbest} must be >= 1, got {value}", value=self.nbest)
            if self.constrain_trees:
                raise ValueError("sampling does not constrain its outputs to trees")
        elif self.beam < 1 or not 1 <= self.nbest <= self.beam:
            raise ArgumentError("need 1 <= {nbest} <= {beam}, got {nbest_value} and "
                                "{beam_value}", nbest_value=self.nbest, beam_value=self.beam)
        if self.search_threads < 1:
            raise ArgumentError("{search_threads} must be >= 1, got {value}",
                                value=self.search_threads)
        if self.constraints:
            self._check_constraints()
        if self.lenpen_formula not in LENPEN_FORMULAS:
            raise ValueError(f"lenpen_formula must be one of {', '.join(LENPEN_FORMULAS)}, got "
                             f"{self.lenpen_formula!r}")
        if self.stop not in STOP_RULES:
            raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, got {self.stop!r}")
        if not all(math.isfinite(x) and x >= 0
                   for x in (self.max_len_a, self.max_len_b, self.lenpen)):
            raise ArgumentError("{max_len_a}, {max_len_b} and {lenpen} must be finite and >= 0, "
                                "got {values}", values=", ".join(
                                    repr(x) for x in (self.max_len_a, self.max_len_b, self.lenpen)))

    def _check_constraints(self) -> None:
        """Refuse the modes the lexically constrained search does not combine with."""
        if self.sampling is not None:
            raise ArgumentError("{constraints} and {sampling} exclude each other: sampling draws "
                                "each token, it does not search for the phrases")
        if self.jit_compile:
            raise ArgumentError("{constraints} and {jit_compile} exclude each other: the "
                                "constrained search runs its steps from the host, not as one "
                                "compiled loop")
        if self.constrain_trees:
            raise ValueError("lexical constraints do not combine with trees")

    def length_limit(self, source_length: int, max_positions: int) -> int:
        """The most tokens (EOS included) a hypothesis of a `source_length`-piece source may hold."""
        max_len_a = min(self.max_len_a, max_positions)  # no limit exceeds it (|X| >= 1)
        return max(1, min(int(max_len_a * source_length) + self.max_len_b, max_positions))


# The paper's decoding: translation (section 6.1) and parsing (section 6.3, input length + 300).
TRANSLATION = DecodeOptions()
PARSING = DecodeOptions(beam=21, lenpen=0.3, max_len_b=300, max_tokens=1024)
# At each validation during training the search must cost seconds on a CPU: translation keeps the
# paper's settings; parsing takes a beam of 4 and a tighter limit, since an early model that never
# ends its trees would decode |X| + 300 tokens in every batch. A linearized tree holds one slot per
# word and two brackets per phrase, under 3 tokens per word (3.5 per source piece at most on the
# WSJ sample), so 4 |X| + 10 cuts no tree a model should produce.
VALIDATION = {"bleu": TRANSLATION,
              "f1": dataclasses.replace(PARSING, beam=4, max_len_a=4.0, max_len_b=10)}


def search_bytes(options: DecodeOptions, config, source_length: int) -> int:
    """About the most memory one sentence's beam search takes, so that it errs high.

    Per hypothesis: the self-attention cache at the length limit L (layers x keys and values x
    d_model x L), the float32 scores over the vocabulary V (the logits and the log-sum-exp's
    passes over them: 4 V), the 2K + 2 candidates taken from each row (values, ids,
    log-probabilities and their mask: 4 of them, up to V each, which a wide beam reaches) and the
    token arrays of the live, finished and candidate hypotheses (16 x L); plus the sentence's
    encoder keys and values.
    `benchmarks/search_memory.py` compares it with a search's peak memory (tracing the search
    takes memory of its own, once, which no sentence's share counts).
    """
    length = options.length_limit(source_length, config.max_positions)
    # The candidates a row: the beam's 2K + 2 best (`beam_search.Search.candidates`); sampling
    # sorts the whole vocabulary for top-p.
    candidates = (config.vocab_size if options.sampling is not None
                  else min(config.vocab_size, 2 * options.beam + 2))
    per_hypothesis = 4 * (2 * config.num_layers * config.d_model * length
                          + 4 * config.vocab_size + 4 * candidates + 16 * (length + 1))
    memory = 4 * 2 * config.num_layers * config.d_model * source_length
    return options.rows_per_sentence * per_hypothesis + memory


def available_memory() -> int | None:
    """Bytes the kernel reports available (MemAvailable), or None where it cannot be read."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def padded_shapes(max_tokens: int, longest: int) -> set[tuple[int, int]]:
    """Every [B, S] shape `padded_batches` (with `pad_rows`, no `max_rows`) can yield for
    sentences of at most `longest` pieces: S a multiple of LENGTH_BUCKET up to `longest` rounded
    up, B a power of two with B * S <= max_tokens (or 1). With XLA each is compiled at most once
    per process; at max_tokens 16384 and sentences of up to 256 pieces that is 255 shapes at
    most, of which an input uses those of its lengths."""
    shapes = set()
    for width in range(LENGTH_BUCKET, max(LENGTH_BUCKET, -(-longest // LENGTH_BUCKET)
                                          * LENGTH_BUCKET) + 1, LENGTH_BUCKET):
        rows = max(1, max_tokens // width)
        shapes.update((1 << power, width) for power in range(rows.bit_length()))
    return shapes


def padded_batches(encoded: list[list[int]], max_tokens: int,
                   max_rows: Callable[[int], int] | None = None, pad_rows: bool = True
                   ) -> Iterator[tuple[list[int], np.ndarray]]:
    """Group sentence indices by length into [B, S] arrays of few distinct shapes.

    Sentences are sorted by length; S is rounded up to a multiple of LENGTH_BUCKET; B is the
    largest power of two with B * S <= max_tokens (at least 1), and at most `max_rows(S)` when
    given; with `pad_rows` (the fixed shapes XLA compiles for) a short last batch is padded with
    empty rows up to a power of two, else it keeps its own number of rows.

    Yields:
        (indices of the real rows, int32 [B, S] source ids).
    """
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    start = 0
    while start < len(order):
        longest = len(encoded[order[min(start, len(order) - 1)]])
        width = max(LENGTH_BUCKET, -(-longest // LENGTH_BUCKET) * LENGTH_BUCKET)
        rows = max_tokens // width
        if max_rows is not None:
            rows = min(rows, max_rows(width))
        rows = 1 << max(0, rows.bit_length() - 1)
        chunk = [i for i in order[start:start + rows] if len(encoded[i]) <= width]
        start += len(chunk)
        height = 1 << (len(chunk) - 1).bit_length() if pad_rows else len(chunk)
        array = np.full((height, width), PAD_ID, np.int32)
        for row, index in enumerate(chunk):
            array[row, :len(encoded[index])] = encoded[index]
        yield chunk, array
