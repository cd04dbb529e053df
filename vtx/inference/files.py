"""The files a decoding command reads and writes: the input's lines (plain or gzip, UTF-8
checked, named in every error), files of a line per input line (prefixes, constraints,
references), and the output, checked before any work and written whole or not at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from vtx import atomic, stop
from vtx.data.text import count_lines, decode_line, open_binary
from vtx.errors import ArgumentError, DataError
from vtx.inference.loading import resolve_checkpoint

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
