"""Glossaries: source terms whose target terms become a line's lexical constraints.

A glossary is a list of (source term, target term) pairs, read from a tab-separated file
(`source<TAB>target` a line; blank lines skipped) or given by a server request. Where a source
term occurs in a line as whole words (not inside a longer word: "cat" is not found in "cats"),
case as written (a term "Bank" is not found in "bank"), its target term becomes one of the
line's constraint phrases (`vtx.inference.lexical`): every finished hypothesis holds it.

Overlaps: the line is read left to right, and where terms overlap the longest one found at the
leftmost place wins ("New York City" over "New York" and "York"); a target term found twice, or
also given as a constraint, is one phrase. Fit: the phrases must fit in the line's output length
limit with EOS; the constraints given (`--constraints`, a request's "constraints") come first,
then the glossary's terms in the order they occur in the line, and a term whose pieces would not
fit is dropped with a warning naming the line and the term.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Sequence

from vtx.errors import DataError
from vtx.inference.files import read_references


@dataclasses.dataclass(frozen=True)
class Glossary:
    """Source term -> target term pairs, and a pattern finding the source terms in a line."""

    pairs: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        targets = dict(self.pairs)
        # Longest first: where several terms match at one place, the alternation takes the
        # first, so the longest wins; `finditer` goes on after it (leftmost-longest).
        terms = sorted(targets, key=len, reverse=True)
        pattern = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, terms)) + r")(?!\w)") \
            if terms else None
        object.__setattr__(self, "_targets", targets)
        object.__setattr__(self, "_pattern", pattern)

    @classmethod
    def from_pairs(cls, pairs: Sequence[Sequence[str]], where: Callable[[int], str]
                   ) -> "Glossary":
        """A glossary of checked `pairs`; `where(i)` names pair i in an error.

        Raises:
            DataError: a pair that is not two terms, an empty or blank term, a term holding a
                tab or a line break, or a source term given twice (naming both places).
        """
        seen: dict[str, int] = {}
        for index, pair in enumerate(pairs):
            if len(pair) != 2:
                raise DataError(f"{where(index)}: expected a source term and a target term, "
                                f"got {len(pair)} fields")
            for side, term in zip(("source", "target"), pair):
                if not term.strip():
                    raise DataError(f"{where(index)}: the {side} term is empty")
                if any(c in term for c in "\t\r\n"):
                    raise DataError(f"{where(index)}: the {side} term {term!r} holds a tab or "
                                    f"a line break")
            if pair[0] in seen:
                raise DataError(f"{where(index)}: the source term {pair[0]!r} again (first "
                                f"at {where(seen[pair[0]])})")
            seen[pair[0]] = index
        return cls(tuple((source, target) for source, target in pairs))

    @classmethod
    def read(cls, path: str | Path) -> "Glossary":
        """A glossary file: `source<TAB>target` a line, blank lines skipped.

        Raises:
            OSError: it cannot be read.
            DataError: a bad line (`from_pairs`, naming the file and line), or bytes that are
                not UTF-8.
        """
        numbered = [(number, line) for number, line in enumerate(read_references(path), 1)
                    if line.strip()]
        return cls.from_pairs([line.split("\t") for _, line in numbered],
                              lambda index: f"{path} line {numbered[index][0]}")

    def check_targets(self, count_pieces: Callable[[str], int], where: str) -> None:
        """Refuse a target term of no pieces in the model's vocabulary (e.g. a zero-width
        space alone), which no hypothesis could hold, before any search.

        Raises:
            DataError: naming `where` (the glossary), the target and its source term.
        """
        for source, target in self.pairs:
            if not count_pieces(target):
                raise DataError(f"{where}: the target term {target!r} of {source!r} encodes to "
                                f"no pieces")

    def updated(self, other: "Glossary") -> "Glossary":
        """This glossary with `other`'s pairs, which win where both have a source term."""
        targets = {**dict(self.pairs), **dict(other.pairs)}
        return Glossary(tuple(targets.items()))

    def targets_in(self, line: str) -> list[str]:
        """The target terms of the source terms found in `line`, in the order they occur."""
        if self._pattern is None:
            return []
        return list(dict.fromkeys(self._targets[match.group()]
                                  for match in self._pattern.finditer(line)))


def line_constraints(glossary: Glossary, lines: Sequence[str],
                     given: Sequence[Sequence[str]] | None, count_pieces: Callable[[str], int],
                     length_limit: Callable[[int], int], line_ids: Sequence[int],
                     warn: Callable[[str], None]) -> list[list[str]]:
    """Each line's constraint phrases: the `given` ones (None: none), then its glossary terms
    that fit (module docstring).

    Args:
        count_pieces: a text's number of source (and target) pieces.
        length_limit: the most output tokens, EOS included, of a line of so many pieces.
        line_ids: each line's id, its number in warnings less one.
    """
    result = []
    for index, line in enumerate(lines):
        phrases = list(given[index]) if given is not None else []
        room = length_limit(count_pieces(line)) - 1 - sum(map(count_pieces, phrases))
        for term in glossary.targets_in(line):
            if term in phrases:
                continue
            pieces = count_pieces(term)
            if pieces > room:
                warn(f"line {line_ids[index] + 1}: the glossary's term {term!r} ({pieces} "
                     f"pieces) does not fit in the output beside the other phrases: dropped")
                continue
            phrases.append(term)
            room -= pieces
        result.append(phrases)
    return result


def translator_constraints(translator, glossary: Glossary, lines: Sequence[str],
                           given: Sequence[Sequence[str]] | None,
                           line_ids: Sequence[int]) -> list[list[str]]:
    """`line_constraints` with a `vtx.inference.translator.Translator`'s vocabulary, length
    limit and warnings."""
    positions = translator.max_positions
    return line_constraints(
        glossary, lines, given, lambda text: len(translator.vocab.encode(text)),
        lambda pieces: translator.options.length_limit(min(pieces, positions), positions),
        line_ids, translator.warn)
