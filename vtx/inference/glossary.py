r"""Glossaries: source terms whose target terms become a line's lexical constraints.

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

Matching: "whole words" is the regular expression `(?<!\w)term(?!\w)` with Python's `\w`, for
terms that begin or end with non-word characters too ("C++", "U.S.", " - "). A line is cut into
slots (`slots`) and an Aho-Corasick automaton over the terms' slots, built once per glossary,
finds the longest term at every place in one pass: the time grows with the line's length, not
with the number of terms.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Callable, Iterable, Sequence

from vtx.errors import DataError
from vtx.inference.files import read_references


_NON_WORD = re.compile(r"(\W)")


def slots(text: str) -> list[str]:
    r"""`text` cut at each non-word character, kept: word runs (`\w+`) and non-word characters
    alternate, beginning and ending with a word slot, which is empty where two non-word
    characters, or one and the text's edge, meet: "C++ x" -> ["C", "+", "", "+", "", " ", "x"].

    A term occurs as `(?<!\w)term(?!\w)` exactly where its slots occur among the line's: a
    word slot holds a whole word, and an empty one stands where `\w` is absent on both sides.
    """
    return _NON_WORD.split(text)


class TermIndex:
    """An Aho-Corasick automaton over the reversed slots of terms (Aho and Corasick 1975,
    "Efficient string matching"), read from a line's last slot to its first: at each slot, its
    state's longest term is the longest term whose slots begin there.

    States are numbers; `_next[s]` maps a slot to the next state, `_fallback[s]` is the state
    of the longest proper suffix of s's slots that is a state, `_longest[s]` the longest term
    (its number of slots, the term) that is a suffix of s's slots, or None.
    """

    def __init__(self, terms: Iterable[str]):
        self._next: list[dict[str, int]] = [{}]
        self._longest: list[tuple[int, str] | None] = [None]
        for term in terms:
            term_slots = slots(term)
            state = 0
            for slot in reversed(term_slots):
                if slot not in self._next[state]:
                    self._next[state][slot] = len(self._next)
                    self._next.append({})
                    self._longest.append(None)
                state = self._next[state][slot]
            self._longest[state] = (len(term_slots), term)
        self._fallback = [0] * len(self._next)
        breadth_first = [0]
        for state in breadth_first:  # grows as it goes: each state after its fallback
            for slot, child in self._next[state].items():
                self._fallback[child] = self._step(self._fallback[state], slot) if state else 0
                if self._longest[child] is None:
                    self._longest[child] = self._longest[self._fallback[child]]
                breadth_first.append(child)

    def _step(self, state: int, slot: str) -> int:
        while slot not in self._next[state] and state:
            state = self._fallback[state]
        return self._next[state].get(slot, 0)

    def longest_terms(self, line_slots: Sequence[str]) -> dict[int, tuple[int, str]]:
        """The longest term beginning at each slot of a line where one begins: slot index ->
        (number of slots, term). Each slot costs a number of steps bounded on average (each
        fallback shortens the state that a slot lengthened by one)."""
        found = {}
        if len(self._next) == 1:
            return found
        next_state, fallback, longest, state = self._next, self._fallback, self._longest, 0
        for index in range(len(line_slots) - 1, -1, -1):  # `_step`, inlined: the hot loop
            slot = line_slots[index]
            following = next_state[state].get(slot)
            while following is None and state:
                state = fallback[state]
                following = next_state[state].get(slot)
            state = following or 0
            if longest[state] is not None:
                found[index] = longest[state]
        return found


def leftmost_longest(line_slots: Sequence[str], indexes: Iterable[TermIndex]) -> list[str]:
    """The terms of `indexes` found in a line's slots, read left to right, the longest at the
    leftmost place winning, as `re.finditer` finds them with the terms in one alternation,
    longest first."""
    longest: dict[int, tuple[int, str]] = {}
    for index in indexes:
        for start, found in index.longest_terms(line_slots).items():
            if found[0] > longest.get(start, (0, ""))[0]:
                longest[start] = found
    terms, resume = [], 0
    for start in sorted(longest):
        if start >= resume:
            size, term = longest[start]
            terms.append(term)
            # A term ending at an empty slot leaves it to the next term, which may begin there
            # (the regular expression looks behind at the characters it consumed).
            resume = start + size - (line_slots[start + size - 1] == "")
    return terms


@dataclasses.dataclass(frozen=True)
class Glossary:
    """Source term -> target term pairs, and an index finding the source terms in a line."""

    pairs: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        targets = dict(self.pairs)
        object.__setattr__(self, "_targets", targets)
        object.__setattr__(self, "_indexes", (TermIndex(targets),))

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
        """A glossary file: `source<TAB>target` a line, blank lines skipped, a leading UTF-8
        byte order mark dropped.

        Raises:
            OSError: it cannot be read.
            DataError: a bad line (`from_pairs`, naming the file and line), or bytes that are
                not UTF-8.
        """
        lines = read_references(path)
        if lines and lines[0].startswith("\ufeff"):  # a byte order mark, as some editors write
            lines[0] = lines[0][1:]
        numbered = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
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
        """This glossary with `other`'s pairs, which win where both have a source term. It
        searches with both glossaries' indexes, building none: a server's glossary is built once
        and serves under each request's."""
        merged = object.__new__(Glossary)
        object.__setattr__(merged, "pairs", tuple({**self._targets, **other._targets}.items()))
        object.__setattr__(merged, "_targets", dict(merged.pairs))
        object.__setattr__(merged, "_indexes", self._indexes + other._indexes)
        return merged

    def targets_in(self, line: str) -> list[str]:
        """The target terms of the source terms found in `line`, in the order they occur."""
        found = leftmost_longest(slots(line), self._indexes)
        return list(dict.fromkeys(self._targets[term] for term in found))


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
    phrase_pieces = functools.cache(count_pieces)  # a phrase in many lines is counted once
    result = []
    for index, line in enumerate(lines):
        phrases = list(given[index]) if given is not None else []
        held = set(phrases)
        room = length_limit(count_pieces(line)) - 1 - sum(map(phrase_pieces, phrases))
        for term in glossary.targets_in(line):
            if term in held:
                continue
            pieces = phrase_pieces(term)
            if pieces > room:
                warn(f"line {line_ids[index] + 1}: the glossary's term {term!r} ({pieces} "
                     f"pieces) does not fit in the output beside the other phrases: dropped")
                continue
            phrases.append(term)
            held.add(term)
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
