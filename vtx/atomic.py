"""Output files that are never seen half-written, never silently clobbered, and never replace a
link or a device.

A regular output is written to a hidden temporary file beside it and renamed over it once
complete, so a crash or a kill leaves the old file (or none), never a truncated one. A symbolic
link is followed: its target is what gets replaced, the link stays. A path that is not a regular
file (a FIFO, `/dev/stdout`, a terminal) is a stream: it is opened and written directly, since
renaming over it would replace the device entry itself. A folder is built the same way: in a
hidden folder beside it, renamed into place when complete (`new_directory`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TextIO


class OutputExistsError(FileExistsError):
    """The output is an existing regular file and replacing it was not asked for."""


def output_path(path: str | Path, force: bool, flag: str = "--output",
                inputs: dict[str, str | Path | None] | None = None) -> Path:
    """The file an output to `path` lands in (a link's target), checked before any work.

    Args:
        inputs: flag -> the command's input files (None where not given): the output may be none
            of them, `force` or not.

    Raises:
        ValueError: it is one of `inputs` (both flags named).
        OutputExistsError: it is an existing regular file and `force` is false (flag named).
        FileNotFoundError: its folder does not exist.
        PermissionError: no file can be made in its folder (tried; flag named).
    """
    path = Path(path)
    target = Path(os.path.realpath(path))
    for input_flag, given in (inputs or {}).items():
        if given is not None and target.is_file() and os.path.isfile(given) \
                and os.path.samefile(target, given):
            raise ValueError(f"{flag} {path} is the {input_flag} file: writing it would replace "
                             f"that input; give another file")
    if target.is_file() and not force:
        shown = path if target == path.absolute() else f"{path} (a link to {target})"
        raise OutputExistsError(f"{flag} {shown} already exists (use --force to replace it)")
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{flag} {path}: folder {target.parent} does not exist")
    if not _is_stream(target) and (problem := unwritable_directory(target.parent)):
        # Else found only when the output is written, after the work, naming a temporary file.
        raise PermissionError(f"{flag} {path}: {problem}")
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
        handle = open(target, "w", encoding=encoding)
        try:
            yield handle
        finally:
            with errors_named(path):  # what is left in the buffer is written here
                handle.close()
        return
    remove_stale_temporaries(target.parent, target.name)
    tmp = _temporary(target, os.getpid())
    try:
        handle = open(tmp, "w", encoding=encoding)
        try:
            yield handle
        finally:
            with errors_named(path):
                handle.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _temporary(path: Path, pid: int) -> Path:
    """The hidden temporary `replaced_on_success` writes `path` into, in process `pid`."""
    return path.with_name(f".{path.name}.tmp-{pid}{path.suffix}")


def _aside(path: Path, pid: int) -> Path:
    """Where `_put_in_place`, in process `pid`, moves the folder `path` it replaces."""
    return path.with_name(f".{path.name}.old-{pid}")


# The names `_temporary` and `_aside` give (the process id is group 1 or 2).
_TEMPORARY = re.compile(r"\..+\.(?:tmp-(\d+)(?:\.[^.]*)?|old-(\d+))")


def _temporaries_of(name: str) -> re.Pattern:
    """The names `_temporary` and `_aside` give for the output `name` (pid: group 1 or 2)."""
    return re.compile(re.escape(f".{name}.") + r"(?:tmp-(\d+)" + re.escape(Path(name).suffix)
                      + r"|old-(\d+))")


def remove_stale_temporaries(folder: str | Path, name: str | None = None
                             ) -> list[tuple[Path, int]]:
    """Remove the hidden temporaries `replaced_on_success` and `open_output` left in `folder`
    when their process was killed mid-write (a checkpoint's or a translation's is full size, and
    was never removed): those of processes no longer running on this host. A folder moved aside
    to be replaced is put back where its replacement never took its place.

    Args:
        name: only those of the output of this name (the one about to be written).

    Returns:
        (path, bytes) of each removed.
    """
    removed = []
    pattern, names = (".*", _TEMPORARY) if name is None else \
        (f".{glob.escape(name)}.*", _temporaries_of(name))
    for path in sorted(Path(folder).glob(pattern)):
        match = names.fullmatch(path.name)
        if not match or _running(int(match[1] or match[2])):
            continue
        if match[2] is not None:  # killed between `_put_in_place`'s two renames: put it back
            original = path.with_name(path.name[1:].rsplit(".old-", 1)[0])
            if not os.path.lexists(original):
                os.replace(path, original)
                continue
        size = path.stat().st_size if path.is_file() else 0
        _remove(path)
        removed.append((path, size))
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


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
    remove_stale_temporaries(path.parent, path.name)
    tmp = _temporary(path, os.getpid())
    _remove(tmp)
    try:
        with errors_named(path):
            yield tmp
            if fsync and tmp.is_file():
                with open(tmp, "rb") as handle:
                    os.fsync(handle.fileno())
            _put_in_place(tmp, path)
    finally:
        _remove(tmp)


def _naming(error: OSError, output: str | Path) -> OSError:
    """`error` with `output` as its file name where it has none: written through a file object
    (numpy, a zip, a text handle), a full disk says only "[Errno 28] No space left on device"."""
    if error.filename is not None or not error.errno:
        return error
    return OSError(error.errno, f"{error.strerror}, writing", str(output))


@contextlib.contextmanager
def errors_named(output: str | Path) -> Iterator[None]:
    """Within it, an OSError without a file name gets `output` as its name (`_naming`)."""
    try:
        yield
    except OSError as error:
        raised = _naming(error, output)
        if raised is error:
            raise
        raise raised from error


def _put_in_place(tmp: Path, path: Path) -> None:
    """Rename `tmp` over `path`; a folder at `path` is moved aside first and removed only once
    `tmp` has taken its place (put back if that rename fails)."""
    if not (path.is_dir() and tmp.is_dir()):
        os.replace(tmp, path)
        return
    old = _aside(path, os.getpid())
    _remove(old)
    os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.replace(old, path)
        raise
    shutil.rmtree(old)


@contextlib.contextmanager
def new_directory(path: str | Path) -> Iterator[Path]:
    """An empty hidden folder beside `path` to build a folder in: it replaces `path` (a link's
    target, the link kept) when the block completes and is removed when it fails, so `path` is
    never seen half-built."""
    with replaced_on_success(path) as tmp:
        tmp.mkdir()
        yield tmp


@contextlib.contextmanager
def replaced_together() -> Iterator[Callable[[str | Path], Path]]:
    """`temporary(path)` gives a hidden temporary path beside `path` to write into (as
    `replaced_on_success`); once the block completes every one is renamed over its path, and
    when it fails none is and all are removed (several outputs that belong together)."""
    with contextlib.ExitStack() as stack:
        yield lambda path: stack.enter_context(replaced_on_success(path))


def move_aside(path: str | Path, suffix: str) -> Path:
    """Rename `path` to its name + `suffix` in the same folder, replacing a file there.

    Returns:
        The new path.
    """
    path = Path(path)
    target = path.with_name(path.name + suffix)
    os.replace(path, target)
    return target


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    with replaced_on_success(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def copy_file(source: str | Path, target: str | Path) -> None:
    """Copy `source` to `target` whole or not at all."""
    with replaced_on_success(target) as tmp:
        shutil.copyfile(source, tmp)


def unwritable_directory(path: str | Path) -> str | None:
    """Why nothing could be created at `path`, a folder to be made or filled (None: it can).

    The nearest part of the path that exists must be a folder in which this process can create
    one: tried, not judged by permission bits (root passes every permission check, yet cannot
    create a folder in /proc or on a read-only mount). The hidden folder it makes there is
    removed. For an output folder a command fills minutes later (checkpoints, logs, caches).
    """
    path = Path(path).absolute()
    existing = next(p for p in (path, *path.parents) if os.path.lexists(p))
    if existing.is_symlink() and not existing.exists():
        return f"{path}: {existing} is a link to {os.readlink(existing)}, which does not exist"
    if not existing.is_dir():
        return f"{path}: {existing} is not a directory"
    try:
        probe = tempfile.mkdtemp(prefix=".vtx-probe-", dir=existing)
    except OSError as error:
        where = "it" if existing == path else str(existing)
        return f"{path}: nothing can be created in {where} ({error.strerror or error})"
    with contextlib.suppress(OSError):  # made but not removable (append-only): left, harmless
        os.rmdir(probe)
    return None
