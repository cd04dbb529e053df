"""Constituency parsing with a trained sequence-to-sequence model (paper section 6.3).

The model was trained on `vtx prepare-parse` output: source = the words of a sentence, target = its
linearized tree (Vinyals et al. 2015). Parsing beam-searches a target for each input line with a
`Translator` (paper settings: beam 21, alpha 0.3, max output length = input length + 300) and
turns it back into a well-formed tree over exactly the input words with `delinearize`, which
repairs and counts malformed outputs.

Gold POS tags. The model predicts no tags (slots are `XX`), but EVALB with COLLINS.prm deletes
punctuation by its POS tag: a `,` tagged `XX` stays while the gold `,` is deleted, and the sentence
becomes a "Length unmatch" error. So when gold trees are given, each predicted tree takes the gold
tree's tags; tagging accuracy is then 100% by construction and says nothing about the model. Without gold trees, the slot tokens are the tags.

Words holding `(` or `)` are written with the Penn Treebank escapes `-LRB-` and `-RRB-` (so
every output line reads back as one tree); the treebank's own text already uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Callable, Sequence

from vtx.errors import ArgumentError, TooManyErrors
from vtx.inference.decoding import DecodeOptions
from vtx.inference.files import STDIN, check_output, open_source, output_sink, read_lines
from vtx.inference.loading import load_models
from vtx.precision import DecodingPrecision
from vtx.inference.translator import Translator
from vtx.parsing import evalb
from vtx.parsing.linearize import RepairStats, bracket_pairs, delinearize
from vtx.parsing.tokenize import treebank_words
from vtx.parsing.trees import Tree
from vtx.progress_lines import LineProgress

_BRACKET_ESCAPES = str.maketrans({"(": "-LRB-", ")": "-RRB-"})


@dataclasses.dataclass
class ParseReport:
    """What `parse_lines` produced, line by line, and how much repair it took."""

    trees: list[Tree | None]  # one per input line; None for an empty line
    repairs: RepairStats  # repairs of every tree together
    repaired_trees: int  # trees that needed at least one repair

    def repair_summary(self) -> str:
        """One line: how many trees were repaired, then each kind of repair with its count."""
        parsed = sum(tree is not None for tree in self.trees)
        kinds = ", ".join(f"{field.name} {getattr(self.repairs, field.name)}"
                          for field in dataclasses.fields(self.repairs))
        return f"repairs: {self.repaired_trees} of {parsed} trees repaired ({kinds})"


def sentence_words(line: str) -> list[str]:
    """The whitespace-separated words of a line, brackets escaped as in the Penn Treebank."""
    return [word.translate(_BRACKET_ESCAPES) for word in line.split()]


def read_gold(gold_path: str | Path, line_count: int) -> list[Tree | None]:
    """Gold trees, one per line (None for a blank line), checked against the input's line count.

    Raises:
        FileNotFoundError: `gold_path` does not exist.
        TreeSyntaxError: a line is not one tree (file and line named).
        ArgumentError: the file has a number of lines other than `line_count` (a ValueError
            naming `gold_path`).
    """
    gold = evalb.read_tree_lines(gold_path)
    if len(gold) != line_count:
        raise ArgumentError("{gold_path} {path} has {lines} lines but the input has {line_count}",
                            path=gold_path, lines=len(gold), line_count=line_count)
    return gold


def gold_tags(gold: Tree | None, words: list[str], line: int = 1,
              warn: Callable[[str], None] = lambda message: None) -> list[str] | None:
    """The POS tags a predicted tree over `words` takes from its gold tree (module docstring).

    Args:
        gold: the gold tree, None for a blank gold line.
        words: the input line's N words.
        line: input line number, for the warning.
        warn: told when the gold tree has another number of words (None is returned then: the
            slots' tags are kept and EVALB counts the sentence as an error).

    Returns:
        N tags, or None.
    """
    # Traces (-NONE-) are no words: a gold file that keeps them (raw treebank trees, which EVALB
    # takes) would otherwise shift every tag after the first trace onto the wrong word.
    tagged = [(word, tag) for word, tag in (gold.tagged_words() if gold is not None else [])
              if tag not in evalb.DELETE_LABELS_FOR_LENGTH]
    if len(tagged) != len(words):
        warn(f"line {line}: {len(words)} words but the gold tree has {len(tagged)}; "
             f"EVALB counts it as an error sentence")
        return None
    return [tag for _, tag in tagged]


def parse_lines(translator: Translator, lines: Sequence[str],
                gold: Sequence[Tree | None] | None = None, first_line_number: int = 1,
                warn: Callable[[str], None] = lambda message: None,
                on_batch: Callable[[list[str]], None] | None = None) -> ParseReport:
    """Parses sentences, one per line, into trees over exactly their words.

    Args:
        translator: a Translator whose model maps words to linearized trees (nbest 1 is used).
        lines: whitespace-tokenized sentences; an empty line gets no tree.
        gold: gold trees aligned with `lines`; their POS tags go into the predicted trees.
        first_line_number: line number of `lines[0]`, for messages.
        warn: receives warnings (gold trees with another number of words, truncated lines).
        on_batch: told each batch of the search's best outputs as it finishes (progress).

    Returns:
        The trees in input order and the repairs made.
    """
    words = [sentence_words(line) for line in lines]
    hypotheses = translator.translate([" ".join(w) for w in words], first_line_number,
                                      on_batch)
    report = ParseReport([], RepairStats(), 0)
    for index, (sentence, best) in enumerate(zip(words, hypotheses)):
        if not sentence:
            report.trees.append(None)
            continue
        line = first_line_number + index
        tags = gold_tags(gold[index], sentence, line, warn) if gold is not None else None
        # No hypothesis for words of no pieces (e.g. a zero-width space): a flat tree over them.
        tree, stats = delinearize(best[0].text.split() if best else [], sentence, tags)
        report.trees.append(tree)
        report.repairs += stats
        report.repaired_trees += stats.total > 0
    return report


def parse_stream(translator: Translator, lines: Sequence[str], write: Callable[[str], None],
                 buffer_size: int, gold: Sequence[Tree | None] | None = None,
                 warn: Callable[[str], None] = lambda message: None,
                 progress: LineProgress | None = None) -> ParseReport:
    """`parse_lines` over `buffer_size` lines at a time, writing each chunk's trees (one line
    each, an empty line for an empty input line) as soon as it is parsed; `progress` is told of
    each batch of the search as it finishes, and finished at the end.

    Raises:
        ValueError: `gold` is given with a length other than `len(lines)`.
    """
    if gold is not None and len(gold) != len(lines):
        raise ValueError(f"{len(gold)} gold trees for {len(lines)} input lines")
    total = ParseReport([], RepairStats(), 0)
    for start in range(0, len(lines), buffer_size):
        stop = start + buffer_size
        chunk = parse_lines(translator, lines[start:stop],
                            None if gold is None else gold[start:stop], start + 1, warn,
                            progress.batch if progress else None)
        for tree in chunk.trees:
            write(tree.to_string() if tree is not None else "")
        total.trees += chunk.trees
        total.repairs += chunk.repairs
        total.repaired_trees += chunk.repaired_trees
        if progress:  # with the chunk's empty lines, not searched
            progress.reach(len(total.trees))
    if progress:
        progress.finish()
    return total


@dataclasses.dataclass
class ParsedFile:
    """What `parse_file` did."""

    checkpoint: Path  # the checkpoint file used (a save dir's newest; an ensemble's first)
    parse: ParseReport  # the trees and their repairs
    scores: evalb.EvalbReport | None  # EVALB (COLLINS.prm) against the gold trees, if given


def parse_file(checkpoint: str | Path | Sequence[str | Path], input_path: str | Path | None,
               output_path: str | Path | None, options: DecodeOptions, buffer_size: int = 1024,
               force: bool = False, gold_path: str | Path | None = None,
               warn: Callable[[str], None] = lambda message: None,
               log: Callable[[str], None] = lambda message: None,
               ema: bool = False, tokenize: bool = False,
               precision: DecodingPrecision = DecodingPrecision()) -> ParsedFile:
    """`vtx parse` as a library call: the sentences of `input_path` (None: stdin) parsed into
    trees in `output_path` (None: stdout) by the model of `checkpoint` (a file, or a save dir's
    newest; or a list of them: their ensemble) and, with `gold_path`, scored against its trees.

    The input, the output, the gold trees and the checkpoint are all checked before any parsing;
    `log` is told the checkpoint used, then the repairs made. `ema`: the checkpoint's EMA
    weights (`checkpoints.with_ema_weights`). `tokenize`: the input is raw text, split into the
    Penn Treebank's tokens (`vtx.parsing.tokenize`) before parsing; the trees hold those tokens.
    `precision`: the dtype policy and quantization the models are built in.

    Raises:
        OutputExistsError: `output_path` exists and `force` is false.
        ArgumentError: the gold file's line count differs from the input's (naming `gold_path`),
            or a sentence alone needs more memory than allowed (naming `beam`).
        OSError, ValueError, TreeSyntaxError: an unreadable input, gold file or checkpoint
            (named).
        TooManyErrors: more error sentences than EVALB allows (the trees are written); the
            message gives the `vtx score-trees` command that scores them anyway.
    """
    several = not isinstance(checkpoint, (str, Path))
    paths = [check_output(output_path, force, one, {"--input": input_path, "--gold": gold_path})
             for one in (checkpoint if several else [checkpoint])]
    with contextlib.ExitStack() as stack:
        source = open_source(input_path, stack)
        lines = list(read_lines(source, input_path or STDIN))
    if tokenize:
        lines = [" ".join(treebank_words(line)) for line in lines]
    gold = read_gold(gold_path, len(lines)) if gold_path else None
    translator = Translator(*load_models(paths, ema, precision), options, warn)
    path = paths[0]  # one vocabulary for all (load_models)
    check_parser_vocabulary(translator.vocab.pieces(range(translator.vocab.size)), path)
    for one in paths:
        log(f"checkpoint: {one}")
    with output_sink(output_path, force=force) as write:
        report = parse_stream(translator, lines, write, buffer_size, gold, warn,
                              LineProgress(log, "parsed", len(lines), words=False))
    log(report.repair_summary())
    scores = _score(gold, report.trees, gold_path, output_path) if gold is not None else None
    return ParsedFile(path, report, scores)


def check_parser_vocabulary(pieces: Sequence[str], path: str | Path) -> None:
    """Refuse a checkpoint whose vocabulary holds no pair of tree brackets: the repairs would turn
    its output (e.g. a translation's words) into flat trees without a word of warning. A piece
    like `(x` alone can come from text in parentheses; a parser's vocabulary holds `(X` and `)X`
    for each label.

    Raises:
        ValueError: no label X has both `(X` and `)X` among the pieces (the message names `path`).
    """
    if not bracket_pairs(pieces):
        raise ValueError(f"{path}: not a parser's checkpoint: its vocabulary holds no pair of "
                         f"tree brackets such as (NP and )NP, so its model was not trained on "
                         f"linearized trees (vtx prepare-parse, then vtx preprocess "
                         f"--whole-word-symbols brackets.txt)")


def _score(gold: list[Tree | None], trees: list[Tree | None], gold_path: str | Path,
           output_path: str | Path | None) -> evalb.EvalbReport:
    """EVALB's scores of the written trees; when it gives up, how to score them anyway."""
    try:
        return evalb.score_trees(gold, trees)
    except TooManyErrors as error:
        written = output_path or "TREES"
        where = "" if output_path else " (TREES: the trees written to standard output)"
        raise TooManyErrors(f"{error}; to score them anyway: vtx score-trees {gold_path} "
                                  f"{written} --max-errors {len(gold)}{where}") from None
