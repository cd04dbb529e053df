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
        raise OutputExistsError(f"{flag} {shown} exists; add --force to replace it")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{flag} {path}: no folder {target.parent}")
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
