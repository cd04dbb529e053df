"""Reading raw parallel text: `PREFIX.LANG` or `PREFIX.LANG.gz`, streamed line by line.

Lines are read as bytes and split on b"\\n" only, so line numbers in error messages are the ones
an editor shows (`str.splitlines` would also split on U+2028 and friends). Decoding to str is a
separate step (`decode_line`) so it can run in a worker process.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from vtx.errors import DataError


def resolve_path(prefix: str | Path, lang: str) -> Path:
    """Return the existing file `PREFIX.LANG` or `PREFIX.LANG.gz`.

    Raises:
        DataError: neither exists, or both do (which one is meant would be a guess).
    """
    plain = Path(f"{prefix}.{lang}")
    gzipped = Path(f"{prefix}.{lang}.gz")
    for path in (plain, gzipped):
        if path.is_dir():  # else said to be missing
            raise DataError(f"{path} is a directory, not a text file")
    if plain.is_file() and gzipped.is_file():
        raise DataError(f"both {plain} and {gzipped} exist; remove one")
    if plain.is_file():
        return plain
    if gzipped.is_file():
        return gzipped
    raise DataError(f"missing file: neither {plain} nor {gzipped} exists")


GZIP_MAGIC = b"\x1f\x8b"  # no UTF-8 text starts so (0x8b is a continuation byte)


def open_binary(path: Path) -> BinaryIO:
    """Open a plain or gzip file (chosen by its `.gz` suffix) for binary reading.

    Raises:
        DataError: a file whose first bytes say the other (gzip data without the suffix was
            read as text: lines counted in compressed bytes, or invalid UTF-8 at line 1).
    """
    handle = open(path, "rb")
    start = handle.peek(len(GZIP_MAGIC))[:len(GZIP_MAGIC)]  # peek: a FIFO stays unread
    if path.suffix == ".gz" and start and start != GZIP_MAGIC[:len(start)]:
        handle.close()
        raise DataError(f"{path} is named .gz but is not gzip data; name it without .gz")
    if path.suffix != ".gz" and start == GZIP_MAGIC:
        handle.close()
        raise DataError(f"{path} holds gzip data but is not named .gz; name it {path}.gz")
    if path.suffix == ".gz":
        handle.close()  # a GzipFile leaves a file object it was given open
        return gzip.open(path, "rb")
    return handle


def count_lines(handle: BinaryIO) -> int:
    """Number of lines left in `handle` (a last line without a newline counts)."""
    return sum(1 for _ in handle)


def lines_in_file(path: str | Path) -> int | None:
    """The lines of the file at `path`, opened as its reading opens it (`open_binary`: plain or
    gzip), counted ahead of that reading for a share done and a time left; None when it is not
    a regular file (a FIFO or device is read once only) or its gzip data is damaged (the
    reading of the lines then says so, naming the line)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with open_binary(path) as handle:
            return count_lines(handle)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return None


def read_parallel(source: Path, target: Path) -> Iterator[tuple[bytes, bytes]]:
    """Yield (source line, target line) as raw bytes without the line ending, in lockstep.

    Never holds more than one line of each file in memory.

    Raises:
        DataError: the files have different line counts (both files and both counts named), or a
            gzip file is corrupt.
    """
    with open_binary(source) as src, open_binary(target) as tgt:
        count = 0
        try:
            # Not zip(): it would swallow the source line read just before the target runs out.
            for src_line in src:
                tgt_line = tgt.readline()
                if not tgt_line:
                    raise DataError(f"line counts differ: {source} has "
                                    f"{count + 1 + count_lines(src)} lines, {target} has "
                                    f"{count} lines")
                count += 1
                yield src_line.rstrip(b"\r\n"), tgt_line.rstrip(b"\r\n")
            tgt_rest = count_lines(tgt)
        except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError;
            # damage inside a compressed block is zlib's error
            raise DataError(f"cannot read {source} / {target}: {err}") from err
        if tgt_rest:
            raise DataError(f"line counts differ: {source} has {count} lines, {target} has "
                            f"{count + tgt_rest} lines")


def decode_line(raw: bytes, path: Path, line_number: int) -> str:
    """Decode one line as strict UTF-8.

    Raises:
        DataError: naming the file, the 1-based line number and the offending bytes.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start:err.end]
        raise DataError(f"{path}:{line_number}: invalid UTF-8 (bytes {bad!r} at column "
                        f"{err.start + 1})") from None
