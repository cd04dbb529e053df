"""Progress of long work over the lines of a file (`vtx translate`, `vtx parse`, `vtx
preprocess`): lines done, their rate and the time left, at most one line every `interval`
seconds as batches of lines finish, and a summary at the end (as fairseq-generate's "Translated
N sentences (T tokens) in S s").
"""

from __future__ import annotations

import time
from typing import Callable

INTERVAL_SECONDS = 10.0


def format_duration(seconds: float) -> str:
    """H:MM:SS of a whole number of seconds (negative ones as 0:00:00)."""
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class LineProgress:
    """Counts the lines (and output words) done and tells `log` about them.

    Args:
        log: receives the lines (the command's standard error).
        verb: what is done to a line ("translated", "parsed", "train: encoded").
        total: the lines to do, when known (an input file), for the share done and the time
            left; None for a stream.
        words: whether the summary gives the output's words (whitespace-separated).
        interval: the least seconds between two progress lines.
        clock: seconds from an arbitrary origin (tests pass a fake one).
    """

    def __init__(self, log: Callable[[str], None], verb: str, total: int | None = None,
                 words: bool = True, interval: float = INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.log, self.verb, self.total, self.interval, self.clock = (log, verb, total,
                                                                      interval, clock)
        self.lines, self.words = 0, 0 if words else None
        self.started = self.last = clock()

    def update(self, lines: int, outputs: list[str] = ()) -> None:
        """`lines` more lines done, `outputs` their best outputs (for the word count)."""
        self.lines += lines
        if self.words is not None:
            self.words += sum(len(text.split()) for text in outputs)
        now = self.clock()
        if now - self.last >= self.interval and (self.total is None or self.lines < self.total):
            self.last = now
            self.log(self._progress_line(now - self.started))

    def batch(self, outputs: list[str]) -> None:
        """A batch of lines done, `outputs` their best outputs (`Translator.search_ids`'s
        `on_batch`)."""
        self.update(len(outputs), outputs)

    def reach(self, lines: int) -> None:
        """`lines` done in all: the lines left out of the batches (an empty line is not
        searched) counted at the end of a chunk."""
        self.update(lines - self.lines)

    def _progress_line(self, elapsed: float) -> str:
        rate = self.lines / max(elapsed, 1e-9)
        if self.total is None:
            return (f"{self.verb} {_lines(self.lines)} in {format_duration(elapsed)}: "
                    f"{rate:,.1f} lines/s")
        left = (self.total - self.lines) / max(rate, 1e-9)
        return (f"{self.verb} {self.lines:,} of {_lines(self.total)} "
                f"({100 * self.lines // max(self.total, 1)}%) in {format_duration(elapsed)}: "
                f"{rate:,.1f} lines/s, about {format_duration(left)} left")

    def finish(self) -> None:
        """The summary: lines, output words, seconds and rates."""
        elapsed = self.clock() - self.started
        words = f" ({self.words:,} words out)" if self.words is not None else ""
        rates = f"{self.lines / max(elapsed, 1e-9):,.1f} lines/s"
        if self.words is not None:
            rates += f", {self.words / max(elapsed, 1e-9):,.0f} words/s"
        self.log(f"{self.verb} {_lines(self.lines)}{words} in {elapsed:.1f} s: {rates}")


def _lines(count: int) -> str:
    return f"{count:,} line{'' if count == 1 else 's'}"

