"""Output files that are never seen half-written, never silently clobbered, and never replace a
link or a device.

A regular output is written to a hidden temporary file beside it and renamed over it once
complete, so a crash or a kill leaves the old file (or none), never a truncated one. A symbolic
link is followed: its target is what gets replaced, the link stays. A path that is not a regular
file (a FIFO, `/dev/stdout`, a terminal) is a stream: it is opened and written directly, since
renaming over it would replace the device entry itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator, TextIO


class OutputExistsError(FileExistsError):
    """The output is an existing regular file and replacing it was not asked for."""


def output_path(path: str | Path, force: bool, flag: str = "--output") -> Path:
    """The file an output to `path` lands in (a link's target), checked before any work.

    Raises:
        OutputExistsError: it is an existing regular file and `force` is false (flag named).
        FileNotFoundError: its folder does not exist.
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    if target.is_file() and not force:
        shown = path if target == path.absolute() else f"{path} (a link to {target})"
        raise OutputExistsError(f"{flag} {shown} already exists (use --force to replace it)")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{flag} {path}: folder {target.parent} does not exist")
    return target


def _is_stream(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def open_output(path: str | Path, force: bool = False, flag: str = "--output",
                encoding: str = "utf-8") -> Iterator[TextIO]:
    """A text handle whose content appears at `path` only when the block completes.

    Raises:
        OutputExistsError, FileNotFoundError: see `output_path`.
    """
    target = output_path(path, force, flag)
    if _is_stream(target):
        with open(target, "w", encoding=encoding) as handle:
            yield handle
        return
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding=encoding) as handle:
            yield handle
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def replaced_on_success(path: str | Path, fsync: bool = False) -> Iterator[Path]:
    """A hidden temporary path beside `path` (same suffix) for the caller to write a file or a
    folder into; renamed over `path` (a link's target, the link kept) when the block completes,
    removed when it fails.

    Args:
        fsync: flush a file's data to disk before the rename (checkpoints: a crash right after
            must not leave an empty file under the final name).
    """
    path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{path.suffix}")
    _remove(tmp)
    try:
        yield tmp
        if fsync and tmp.is_file():
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        if path.is_dir() and not path.is_symlink() and tmp.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    with replaced_on_success(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def copy_file(source: str | Path, target: str | Path) -> None:
    """Copy `source` to `target` whole or not at all."""
    with replaced_on_success(target) as tmp:
        shutil.copyfile(source, tmp)
