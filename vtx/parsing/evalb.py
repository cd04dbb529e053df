"""Labeled bracketing scores exactly as EVALB (Sekine & Collins, 1997) computes them with COLLINS.prm.

Behaviour reproduced from `evalb.c` and `COLLINS.prm` (the parameters below are that file's):

- A preterminal whose tag is a DELETE_LABEL (`TOP -NONE- , : `` '' .`) is removed with its word,
  before positions are counted; the tag is compared as written (no function-tag stripping).
- Phrase labels are cut at their first `-` or `=` (`NP-SBJ-1` -> `NP`, and `-NONE-` -> `""`);
  a phrase is dropped when its label is then a DELETE_LABEL or when it spans no remaining word
  (so phrases over punctuation or traces only disappear). A phrase with an empty label, such as the
  outer `( (S ...) )` bracket of Penn Treebank files, is NOT deleted and is scored like any other
  bracket: EVALB does so too, which is why vtx always writes its roots as `TOP`.
- Sentence length (for the `len<=40` block) counts every word whose tag is not `-NONE-`
  (DELETE_LABEL_FOR_LENGTH), punctuation included, and is taken from the gold tree.
- A test tree with no remaining word is a "skip" sentence; a different number of remaining words
  ("Length unmatch") or a differing word ("Words unmatch") makes an "error" sentence. Both are
  excluded from every figure except the sentence counts. COLLINS.prm has no QUOTE_LABEL, so
  EVALB's quote fix-up never applies: a punctuation word tagged differently in gold and test
  (e.g. `XX`) makes a length error.
- Brackets match on (start, end, label) with ADVP and PRT equal (EQ_LABEL), each test bracket
  used at most once: n gold and m test copies of one bracket give min(n, m) matches.
- Crossing: test brackets that cross at least one gold bracket.
- Tagging accuracy: remaining words whose test tag equals the gold tag.
- EVALB stops (exit 1, no summary) at its (MAX_ERROR + 2)-th error, i.e. the 12th with MAX_ERROR 10;
  `score_trees` raises `TooManyErrors` at the same point.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from vtx.errors import TooManyErrors
from vtx.parsing.trees import Tree, parse_tree, read_text

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
DELETE_LABELS_FOR_LENGTH = frozenset({"-NONE-"})
# EQ_LABEL pairs, mapped to one representative so that equal labels compare equal.
_EQUIVALENT = {"PRT": "ADVP"}
CUTOFF_LEN = 40
MAX_ERROR = 10


class Status(enum.IntEnum):
    """Per-sentence status as EVALB prints it."""

    OK = 0
    ERROR = 1
    SKIP = 2


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One line of EVALB's per-sentence table.

    Attributes:
        line: 1-based line number.
        length: gold words other than `-NONE-` (punctuation included).
        status: OK, ERROR or SKIP.
        match: matched brackets.
        gold_brackets: scored gold brackets.
        test_brackets: scored test brackets.
        crossing: test brackets crossing a gold bracket.
        words: scored words (punctuation and traces removed).
        correct_tags: scored words whose tags agree.
        message: why the sentence is an error ("" otherwise).
    """

    line: int
    length: int
    status: Status
    match: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    message: str = ""


@dataclasses.dataclass
class Totals:
    """Sums over a set of sentences (all of them, or those of length <= CUTOFF_LEN)."""

    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    match: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    complete: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    words: int = 0
    correct_tags: int = 0

    def add(self, result: SentenceResult) -> None:
        """Counts one sentence in as EVALB's `individual_result` does."""
        self.sentences += 1
        if result.status is Status.ERROR:
            self.errors += 1
            return
        if result.status is Status.SKIP:
            self.skipped += 1
            return
        self.match += result.match
        self.gold_brackets += result.gold_brackets
        self.test_brackets += result.test_brackets
        self.complete += result.gold_brackets == result.test_brackets == result.match
        self.crossing += result.crossing
        self.no_crossing += result.crossing == 0
        self.two_or_less_crossing += result.crossing <= 2
        self.words += result.words
        self.correct_tags += result.correct_tags

    @property
    def valid(self) -> int:
        """Sentences neither skipped nor in error."""
        return self.sentences - self.errors - self.skipped

    @property
    def recall(self) -> float:
        """Bracketing recall in percent."""
        return 100.0 * self.match / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        """Bracketing precision in percent."""
        return 100.0 * self.match / self.test_brackets if self.test_brackets else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall in percent (NaN when both are 0, as in EVALB)."""
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else math.nan

    @property
    def complete_match(self) -> float:
        """Percent of valid sentences whose brackets all match."""
        return 100.0 * self.complete / self.valid if self.valid else 0.0

    @property
    def tagging_accuracy(self) -> float:
        """Percent of scored words with the gold tag."""
        return 100.0 * self.correct_tags / self.words if self.words else 0.0


@dataclasses.dataclass
class EvalbReport:
    """Per-sentence results and the two summary blocks."""

    sentences: list[SentenceResult]
    all: Totals
    short: Totals
    cutoff_len: int = CUTOFF_LEN


@dataclasses.dataclass
class _Scored:
    """What EVALB keeps of one tree: the remaining words, tags, brackets, and the length."""

    words: list[str] = dataclasses.field(default_factory=list)
    tags: list[str] = dataclasses.field(default_factory=list)
    brackets: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)
    length: int = 0


def _evalb_label(label: str) -> str:
    """EVALB's `modify_label`, then the EQ_LABEL representative."""
    label = re.split(r"[-=]", label, maxsplit=1)[0]
    return _EQUIVALENT.get(label, label)


def _scored(tree: Tree | None) -> _Scored:
    scored = _Scored()
    if tree is not None:
        _collect(tree, scored)
    return scored


def _collect(tree: Tree, scored: _Scored) -> None:
    """Adds `tree`'s words, tags, brackets and length to `scored` (evalb.c `read_line`)."""
    if tree.is_preterminal:
        scored.length += tree.label not in DELETE_LABELS_FOR_LENGTH
        if tree.label not in DELETE_LABELS:
            scored.words.append(tree.children[0])
            scored.tags.append(tree.label)
        return
    start = len(scored.words)
    for child in tree.children:
        _collect(child, scored)
    label = _evalb_label(tree.label)
    if len(scored.words) > start and label not in DELETE_LABELS:
        scored.brackets.append((start, len(scored.words), label))


def _crossing(gold: list[tuple[int, int, str]], test: list[tuple[int, int, str]]) -> int:
    """Test brackets crossing at least one gold bracket (evalb.c counts per test bracket)."""
    gold_spans = {(start, end) for start, end, _ in gold}
    crossing = 0
    for start, end, _ in test:
        # Gold spans nest (they come from one tree), so a test span equal to one crosses none.
        if (start, end) in gold_spans:
            continue
        crossing += any(g_start < start < g_end < end or start < g_start < end < g_end
                        for g_start, g_end in gold_spans)
    return crossing


def score_sentence(gold: Tree | None, test: Tree | None, line: int = 1) -> SentenceResult:
    """Scores one test tree against its gold tree as EVALB with COLLINS.prm does.

    Args:
        gold: the gold tree, or None for an empty line.
        test: the test tree, or None for an empty line (a skipped sentence).
        line: line number reported in the result.

    Returns:
        The sentence's counts; errors and skips carry only `line`, `length`, `status`, `message`.
    """
    g, t = _scored(gold), _scored(test)
    if not t.words:
        return SentenceResult(line, g.length, Status.SKIP)
    if len(g.words) != len(t.words):
        return SentenceResult(line, g.length, Status.ERROR,
                              message=f"Length unmatch ({len(g.words)}|{len(t.words)})")
    for gold_word, test_word in zip(g.words, t.words):
        if gold_word != test_word:
            return SentenceResult(line, g.length, Status.ERROR,
                                  message=f"Words unmatch ({gold_word}|{test_word})")
    match = sum((Counter(g.brackets) & Counter(t.brackets)).values())
    correct = sum(_evalb_tag(a) == _evalb_tag(b) for a, b in zip(g.tags, t.tags))
    return SentenceResult(line, g.length, Status.OK, match, len(g.brackets), len(t.brackets),
                          _crossing(g.brackets, t.brackets), len(g.words), correct)


def _evalb_tag(tag: str) -> str:
    # Tags are compared with EVALB's label_comp: exact text, EQ_LABEL pairs equal.
    return _EQUIVALENT.get(tag, tag)


def score_trees(gold: Sequence[Tree | None], test: Sequence[Tree | None],
                cutoff_len: int = CUTOFF_LEN, max_errors: int = MAX_ERROR) -> EvalbReport:
    """Scores test trees against gold trees, line by line.

    Args:
        gold: gold trees (None for an empty line).
        test: test trees, as many as `gold` (None for an empty line: skipped).
        cutoff_len: length limit of the second summary block (CUTOFF_LEN).
        max_errors: EVALB's MAX_ERROR; it stops at error number `max_errors + 2`.

    Raises:
        ValueError: the two sequences differ in length.
        TooManyErrors: as many error sentences as make EVALB stop.
    """
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees")
    report = EvalbReport([], Totals(), Totals(), cutoff_len)
    for line, (gold_tree, test_tree) in enumerate(zip(gold, test), start=1):
        result = score_sentence(gold_tree, test_tree, line)
        report.sentences.append(result)
        report.all.add(result)
        if result.length <= cutoff_len:
            report.short.add(result)
        if report.all.errors >= max_errors + 2:
            raise TooManyErrors(f"{report.all.errors} sentences with errors, more than EVALB's "
                                f"MAX_ERROR {max_errors} allows; the last: line {line}: {result.message}")
    return report


def read_tree_lines(path: str | Path) -> list[Tree | None]:
    """Reads one tree per line (None for a blank line).

    Raises:
        FileNotFoundError: `path` does not exist.
        TreeSyntaxError: a line is not one tree; the message names the file and line.
    """
    # Lines cut at "\n" only, as `vtx parse` reads its input: str.splitlines also cuts at
    # U+2028, U+0085 or a form feed inside a word, and then named the wrong line as unbalanced.
    lines = read_text(path).split("\n")
    if lines[-1] == "":
        lines.pop()
    lines = [line.rstrip("\r") for line in lines]
    return [parse_tree(text, f"{path}, line {number}") if text.strip() else None
            for number, text in enumerate(lines, start=1)]


def score_files(gold_path: str | Path, test_path: str | Path, cutoff_len: int = CUTOFF_LEN,
                max_errors: int = MAX_ERROR) -> EvalbReport:
    """`score_trees` over two files of one tree per line.

    Raises:
        FileNotFoundError, TreeSyntaxError: see `read_tree_lines`.
        ValueError: the files have different numbers of lines (the message names both).
        TooManyErrors: see `score_trees`.
    """
    gold, test = read_tree_lines(gold_path), read_tree_lines(test_path)
    if len(gold) != len(test):
        raise ValueError(f"{gold_path} has {len(gold)} lines but {test_path} has {len(test)}")
    return score_trees(gold, test, cutoff_len, max_errors)


def format_errors(report: EvalbReport) -> str:
    """EVALB's message for each error sentence, `LINE : MESSAGE` a line ("" when none)."""
    return "".join(f"{result.line} : {result.message}\n" for result in report.sentences
                   if result.message)


def format_sentences(report: EvalbReport) -> str:
    """EVALB's per-sentence table and its totals line."""
    rows = ["  Sent.                        Matched  Bracket   Cross        Correct Tag",
            " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
            "=" * 76]
    for r in report.sentences:
        recall = 100.0 * r.match / r.gold_brackets if r.gold_brackets else 0.0
        precision = 100.0 * r.match / r.test_brackets if r.test_brackets else 0.0
        accuracy = 100.0 * r.correct_tags / r.words if r.words else 0.0
        rows.append(f"{r.line:4d}  {r.length:3d}    {int(r.status)}  {recall:6.2f} {precision:6.2f}   "
                    f"{r.match:3d}    {r.gold_brackets:3d}  {r.test_brackets:3d}    {r.crossing:3d}"
                    f"   {r.words:4d}  {r.correct_tags:4d}   {accuracy:6.2f}")
    rows.append("=" * 76)
    t = report.all
    brackets = (f"                {t.recall:6.2f} {t.precision:6.2f} {t.match:6d} {t.gold_brackets:5d} "
                f"{t.test_brackets:5d}  {t.crossing:5d}") if t.gold_brackets and t.test_brackets else ""
    rows.append(f"{brackets}  {t.words:5d} {t.correct_tags:5d}   {t.tagging_accuracy:6.2f}")
    return "\n".join(rows) + "\n"


def format_summary(report: EvalbReport) -> str:
    """EVALB's `=== Summary ===` text: the `-- All --` block and the `-- len<=40 --` block."""
    lines = ["=== Summary ==="]
    for title, totals in (("All", report.all), (f"len<={report.cutoff_len}", report.short)):
        valid = totals.valid
        lines += ["", f"-- {title} --",
                  f"Number of sentence        = {totals.sentences:6d}",
                  f"Number of Error sentence  = {totals.errors:6d}",
                  f"Number of Skip  sentence  = {totals.skipped:6d}",
                  f"Number of Valid sentence  = {valid:6d}",
                  f"Bracketing Recall         = {totals.recall:6.2f}",
                  f"Bracketing Precision      = {totals.precision:6.2f}",
                  f"Bracketing FMeasure       = {totals.f1:6.2f}",
                  f"Complete match            = {totals.complete_match:6.2f}",
                  f"Average crossing          = {totals.crossing / valid if valid else 0.0:6.2f}",
                  f"No crossing               = {100.0 * totals.no_crossing / valid if valid else 0.0:6.2f}",
                  f"2 or less crossing        = "
                  f"{100.0 * totals.two_or_less_crossing / valid if valid else 0.0:6.2f}",
                  f"Tagging accuracy          = {totals.tagging_accuracy:6.2f}"]
    return "\n".join(lines) + "\n"
