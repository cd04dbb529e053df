"""One writer per output: an exclusive lock (flock) on a lock file, held while a command writes
its output, the holder (pid, host, since when) written in it for a refused command to name.

The OS releases a lock when its process ends, however it ends, so a killed writer never leaves
its output locked. `vtx train` holds one in its save dir for the whole run (`LOCK_FILE` there);
a command that writes a file or a folder once (`vtx preprocess`'s data directory, an export,
an averaged checkpoint) holds one beside it for as long as it works (`output_lock`), removed
when done.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from vtx.errors import OutputLockedError

_HELD: dict[str, int] = {}  # resolved lock file -> the descriptor whose lock this process holds


class Held(Exception):
    """Raised by `acquire` when another process holds the lock.

    Attributes:
        path: the lock file.
        holder: what its holder wrote in it (`say_holder`), "" before it wrote anything.
    """

    def __init__(self, path: Path, holder: str):
        super().__init__(f"{path} is held by {holder or 'a process starting'}")
        self.path, self.holder = path, holder


def acquire(path: str | Path) -> bool:
    """Hold the lock file `path` for this process (again: nothing to do).

    Returns:
        False where no lock can be taken (a filesystem without locks, a read-only folder: the
        caller goes on without one), else True.

    Raises:
        Held: another process holds it.
    """
    path = Path(path)
    key = str(path.resolve())
    if key in _HELD:
        return True
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a read-only folder: its writes fail later, each named
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 4096, 0).decode("utf-8", "replace").strip()
            os.close(descriptor)
            raise Held(path, holder) from None
        except OSError:
            os.close(descriptor)
            return False
        # A holder that removes its lock file when done (`release`) may have done so between
        # our open and our lock: that file is no one's lock any more; take the new one.
        try:
            same = os.path.samestat(os.fstat(descriptor), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            _HELD[key] = descriptor
            return True
        os.close(descriptor)


def say_holder(path: str | Path) -> None:
    """Write into the held lock file `path` which process holds it (for a refused one to name)."""
    descriptor = _HELD.get(str(Path(path).resolve()))
    if descriptor is not None:
        said = (f"pid {os.getpid()} on {socket.gethostname()}, since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n").encode()
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, said, 0)


def release(path: str | Path, remove: bool = False) -> None:
    """Release the lock file `path`, where this process holds it; `remove`: remove the file
    first (while still held, so that no one takes a lock on a file about to go)."""
    key = str(Path(path).resolve())
    descriptor = _HELD.pop(key, None)
    if descriptor is not None:
        if remove:
            Path(key).unlink(missing_ok=True)
        os.close(descriptor)


def lock_path(output: str | Path) -> Path:
    """The lock file of a command writing `output` (a file or a folder): hidden beside it."""
    output = Path(os.path.realpath(output))
    return output.with_name(f".{output.name}.lock")


@contextlib.contextmanager
def output_lock(output: str | Path, flag: str) -> Iterator[None]:
    """Hold `output`'s lock (`lock_path`) while the block writes it; where none can be taken
    (a missing or read-only folder), the block runs without one and its own checks speak.

    Args:
        flag: how the command was given `output` (e.g. "--destdir"), for the refusal; or the
            library argument that holds it (e.g. "output"), which a command writes as its flag
            (`errors.Templated`).

    Raises:
        OutputLockedError: another process writes `output` (the holder and the lock file named).
    """
    path = lock_path(output)
    try:
        held = acquire(path)
    except Held as error:
        named = "{" + flag + "}" if flag.isidentifier() else flag.replace("{", "{{")
        raise OutputLockedError(
            named + " {target} is being written by another process ({holder}; {lock} is its "
            "lock): wait for it to end, or give another " + named, target=output,
            holder=error.holder or "starting", lock=path) from None
    try:
        if held:
            say_holder(path)
        yield
    finally:
        if held:
            release(path, remove=True)
