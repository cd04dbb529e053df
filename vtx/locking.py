"""One writer per output: an exclusive lock (flock) on a lock file, held while a command writes
its output, the holder (pid, host, since when) written in it for a refused command to name.

The OS releases a lock when its process ends, however it ends, so a killed writer never leaves
its output locked. `vtx train` holds one in its save dir for the whole run (`LOCK_FILE` there);
a command that writes a file or a folder once (`vtx preprocess`'s data directory, an export,
an averaged checkpoint) holds one beside it for as long as it works (`output_lock`), removed
when done. A lock file is opened without following a link and only where it is a lock file
(created here, or holding a holder's line): anything else at its path is refused, never
overwritten or removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import stat
import time
from pathlib import Path
from typing import Iterator

from vtx.errors import LockFileError, OutputLockedError

_HELD: dict[str, int] = {}  # lock file (`_key`) -> the descriptor whose lock this process holds
_HOLDER = re.compile(r"pid \d+ on [^\n]*, since [^\n]*\n?$")  # what `say_holder` writes


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
    """Hold the lock file `path` for this process (again: nothing to do). The lock file is
    never a link followed nor another's file: one found there must be a lock file's (`_open`).

    Returns:
        False where no lock can be taken (a filesystem without locks, a read-only folder: the
        caller goes on without one), else True.

    Raises:
        Held: another process holds it.
        LockFileError: `path` is not a lock file (a symbolic link, a hard link, another file).
    """
    path = Path(path)
    key = _key(path)
    if key in _HELD:
        return True
    while True:
        if (descriptor := _open(path)) is None:
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
        if _still_at(descriptor, path):
            try:
                _check_lock_file(descriptor, path)
            except LockFileError:
                os.close(descriptor)
                raise
            _HELD[key] = descriptor
            return True
        os.close(descriptor)


def _key(path: Path) -> str:
    """The lock file `path` made absolute through its folder's links, not through its own."""
    return os.path.join(os.path.realpath(path.parent), path.name)


def _open(path: Path) -> int | None:
    """A descriptor of the lock file `path`, created if missing; never through a link.

    Returns:
        None where none can be opened (a read-only or missing folder).

    Raises:
        LockFileError: `path` is a symbolic link, or not a regular file of one name.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    while True:
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass  # a lock file there already (or a link: O_EXCL never follows one)
        except OSError:
            return None
        try:
            descriptor = os.open(path, flags)
        except FileNotFoundError:
            continue  # its holder removed it meanwhile
        except OSError as error:
            if error.errno == errno.ELOOP or os.path.islink(path):
                raise LockFileError(f"{path} is a symbolic link, where vtx keeps a lock file: "
                                    f"not followed (its target would be overwritten, then "
                                    f"removed); remove the link") from None
            return None
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            os.close(descriptor)
            kind = "a hard link" if stat.S_ISREG(found.st_mode) else "not a regular file"
            raise LockFileError(f"{path} is {kind}, where vtx keeps a lock file: not "
                                f"overwritten; remove it")
        return descriptor


def _still_at(descriptor: int, path: Path) -> bool:
    """Whether the file open as `descriptor` is still the one named `path` (no link followed)."""
    try:
        return os.path.samestat(os.fstat(descriptor), os.lstat(path))
    except FileNotFoundError:
        return False


def _check_lock_file(descriptor: int, path: Path) -> None:
    """Refuse a file at the lock file's path that holds anything but a holder's line
    (`say_holder`): someone's file, which taking the lock would overwrite and remove.

    Raises:
        LockFileError: the path named, with the start of what it holds.
    """
    held = os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
    if held and not _HOLDER.match(held):
        raise LockFileError(f"{path} holds {held[:40]!r}, not a vtx lock file's holder: not "
                            f"overwritten; move it away")


def say_holder(path: str | Path) -> None:
    """Write into the held lock file `path` which process holds it (for a refused one to name)."""
    descriptor = _HELD.get(_key(Path(path)))
    if descriptor is not None:
        said = (f"pid {os.getpid()} on {socket.gethostname()}, since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n").encode()
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, said, 0)


def release(path: str | Path, remove: bool = False) -> None:
    """Release the lock file `path`, where this process holds it; `remove`: remove the file
    first (while still held, so that no one takes a lock on a file about to go), where it is
    still the file this process locked."""
    path = Path(path)
    descriptor = _HELD.pop(_key(path), None)
    if descriptor is not None:
        if remove and _still_at(descriptor, path):
            path.unlink(missing_ok=True)
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
