"""Output files that are never seen half-written, never silently clobbered, and never replace a
link or a device.

A regular output is written to a hidden temporary file beside it and renamed over it once
complete, so a crash or a kill leaves the old file (or none), never a truncated one. A symbolic
link is followed: its target is what gets replaced, the link stays. A path that is not a regular
file (a FIFO, `/dev/stdout`, a terminal) is a stream: it is opened and written directly, since
renaming over it would replace the device entry itself. A folder is built the same way: in a
hidden folder beside it, renamed into place when complete (`new_directory`).

A hidden name says whose it is: host, process and a token of the write (`hidden_name`), so that
writers sharing a folder (hosts, containers with equal pids) never meet on one, and the next
write of an output removes what a killed write of it left on this host, never another host's.
It fits the 255 bytes of a file name for any output name: a long one is cut, with a digest of
the whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, TextIO

from vtx import stop
from vtx.errors import OutputExistsError


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
    with _claimed(target, "tmp") as tmp:
        try:
            handle = open(tmp, "w", encoding=encoding)
            try:
                yield handle
            finally:
                with errors_named(path):
                    handle.close()
            stop.check()  # a signal whose exception a library swallowed: not completed
            if force:
                os.replace(tmp, target)
            else:
                _publish_new(tmp, target, f"{flag} {path}")
        finally:
            tmp.unlink(missing_ok=True)


def _publish_new(tmp: Path, target: Path, said: str) -> None:
    """Put `tmp` at `target` only if no file is there: one that appeared while the command ran
    (another process's output) is not replaced without --force. A hard link makes the check
    and the rename one step; where the filesystem has none, checked just before the rename.

    Raises:
        OutputExistsError: `target` appeared meanwhile (`said`: the flag and path given).
    """
    appeared = OutputExistsError(f"{said} appeared while this command ran (another process "
                                 f"wrote it; use --force to replace it): this output is not "
                                 f"written")
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise appeared from None
    except OSError:  # no hard links on this filesystem
        if os.path.lexists(target):
            raise appeared from None
        os.replace(tmp, target)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def hidden_name(path: Path, kind: str, *, host: str | None = None, pid: int | None = None,
                token: str | None = None) -> Path:
    """The hidden path beside `path` that a write of it uses: `.{name}.tmp-{host}-{pid}-{token}`
    + the suffix of `path` (`kind` "tmp": the temporary the output is written into) or
    `.{name}.old-{host}-{pid}-{token}` ("old": where a folder being replaced is moved meanwhile).
    Where that could pass `NAME_MAX` bytes (a name of over ~160 bytes), the name is cut and a
    digest of it follows the kind: `.{head}.tmp~{digest}-{host}-{pid}-{token}` (`_shortened`).

    Host and pid say whose it is (pids repeat across hosts and containers, a container's process
    is often pid 1); the token tells apart the writes of one process (a restarted container's
    pid 1 is its predecessor's pid too). `remove_stale_temporaries` reads them back.

    Args:
        host, pid: this host (`_this_host`) and this process where not given.
        token: 8 hex digits; a new random one where not given.
    """
    owner = (f"{_this_host() if host is None else host}-{os.getpid() if pid is None else pid}-"
             f"{secrets.token_hex(4) if token is None else token}")
    suffix = path.suffix if kind == "tmp" else ""
    shortened = _shortened(path.name, suffix)
    if shortened is None:
        return path.with_name(f".{path.name}.{kind}-{owner}{suffix}")
    head, digest, suffix = shortened
    return path.with_name(f".{head}.{kind}~{digest}-{owner}{suffix}")


NAME_MAX = 255  # bytes of a file name (Linux, macOS; ext4, XFS, btrfs, APFS, NFS)
_HOST_MAX = 64  # characters of the host in a hidden name (Linux's HOST_NAME_MAX; `_this_host`)
_PID_MAX = 10  # digits of a pid (a 32-bit pid_t)
# Bytes of a hidden name besides the output's name and suffix: ".", ".tmp-", host, "-", pid,
# "-", token; a shortened one adds "~" and the name's digest.
_OVERHEAD = 1 + 5 + _HOST_MAX + 1 + _PID_MAX + 1 + 8
_SHORTENED_OVERHEAD = _OVERHEAD + 1 + 8
_SUFFIX_MAX = 64  # bytes of a suffix a shortened hidden name keeps (a longer one is no file type)


def _size(name: str) -> int:
    return len(os.fsencode(name))


def _shortened(name: str, suffix: str) -> tuple[str, str, str] | None:
    """How the hidden names of the output `name` (with `suffix`: "" for kind "old") hold it:
    None where whole (it fits `NAME_MAX` with any host and pid), else (head, digest, suffix):
    the longest start of `name` that fits, 8 hex digits of its SHA-256, and `suffix` where
    `_SUFFIX_MAX` bytes at most (else "")."""
    if _size(name) + _size(suffix) + _OVERHEAD <= NAME_MAX:
        return None
    suffix = suffix if _size(suffix) <= _SUFFIX_MAX else ""
    head = name
    while _size(head) > NAME_MAX - _SHORTENED_OVERHEAD - _size(suffix):
        head = head[:-1]  # by characters: a cut never splits one
    return head, hashlib.sha256(os.fsencode(name)).hexdigest()[:8], suffix


def _whole_host() -> str:
    """This host's name, characters outside [A-Za-z0-9_.-] as "_"."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "_"


def _this_host() -> str:
    """This host's name as `hidden_name` writes it (`_whole_host`): one of over `_HOST_MAX`
    characters cut, a digest of the whole at its end (two such hosts sharing a start differ)."""
    whole = _whole_host()
    if len(whole) <= _HOST_MAX:
        return whole
    return f"{whole[:_HOST_MAX - 9]}-{hashlib.sha256(whole.encode()).hexdigest()[:8]}"


# The tokens of the hidden names this process is writing or has moved a folder to (`_claimed`):
# `remove_stale_temporaries` keeps those of this host and pid that are in it, removes the others.
_IN_FLIGHT: set[str] = set()


@contextlib.contextmanager
def _claimed(path: Path, kind: str) -> Iterator[Path]:
    """A new `hidden_name` beside `path`, its token in flight until the block ends (the caller
    has renamed or removed it by then)."""
    while (token := secrets.token_hex(4)) in _IN_FLIGHT:
        pass
    _IN_FLIGHT.add(token)
    try:
        yield hidden_name(path, kind, token=token)
    finally:
        _IN_FLIGHT.discard(token)


# Whose a hidden name is: host, pid and token (`hidden_name`), or only a pid (`legacy_pid`) in
# the `.{name}.tmp-{pid}` / `.{name}.old-{pid}` of earlier versions (which never shortened).
_OWNER = r"(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})"
_OWNER_OR_LEGACY = rf"(?:{_OWNER}|(?P<legacy_pid>\d+))"


def _hidden_names(name: str | None) -> list[tuple[re.Pattern, str]]:
    """(pattern, kind) of the hidden names `hidden_name` gives for the output `name` (any
    output where None), shortened ones first; group `name` is the output's name where the
    hidden name holds it whole."""
    if name is None:
        any_suffix = r"(?:\.[^.]*)?"
        return [(re.compile(rf"\..+\.tmp~[0-9a-f]{{8}}-{_OWNER}{any_suffix}"), "tmp"),
                (re.compile(rf"\..+\.old~[0-9a-f]{{8}}-{_OWNER}"), "old"),
                (re.compile(rf"\.(?P<name>.+)\.tmp-{_OWNER_OR_LEGACY}{any_suffix}"), "tmp"),
                (re.compile(rf"\.(?P<name>.+)\.old-{_OWNER_OR_LEGACY}"), "old")]
    patterns = []
    for kind, suffix in (("tmp", Path(name).suffix), ("old", "")):
        shortened = _shortened(name, suffix)
        if shortened is None:
            pattern = (rf"\.(?P<name>{re.escape(name)})\.{kind}-{_OWNER_OR_LEGACY}"
                       rf"{re.escape(suffix)}")
        else:
            head, digest, suffix = shortened
            pattern = rf"\.{re.escape(head)}\.{kind}~{digest}-{_OWNER}{re.escape(suffix)}"
        patterns.append((re.compile(pattern), kind))
    return patterns


def remove_stale_temporaries(folder: str | Path, name: str | None = None
                             ) -> list[tuple[Path, int]]:
    """Remove the hidden temporaries `replaced_on_success` and `open_output` left in `folder`
    when their process was killed mid-write (a checkpoint's or a translation's is full size, and
    was never removed): those of this host whose process is no longer running, or is this one
    but no longer writing them (`_stale`). A folder moved aside to be replaced is put back where
    its replacement never took its place; one whose hidden name holds its name shortened is
    left alone unless `name` is given (which output it was cannot be told from it).

    Args:
        name: only those of the output of this name (the one about to be written).

    Returns:
        (path, bytes) of each removed.
    """
    removed = []
    patterns = _hidden_names(name)
    for path in sorted(Path(folder).glob(".*")):
        match, kind = next(((match, kind) for pattern, kind in patterns
                            if (match := pattern.fullmatch(path.name))), (None, None))
        if not match or not _stale(match):
            continue
        if kind == "old":  # killed between `_put_in_place`'s two renames: put it back
            original_name = name or match.groupdict().get("name")
            if original_name is None:
                continue
            original = path.with_name(original_name)
            if not os.path.lexists(original):
                os.replace(path, original)
                continue
        size = path.stat().st_size if path.is_file() else 0
        _remove(path)
        removed.append((path, size))
    return removed


def _stale(match: re.Match) -> bool:
    """Whether the hidden name `match` (of `_hidden_names`) is no longer being written."""
    if match.groupdict().get("legacy_pid") is not None:
        # An earlier version's (no host, no token): judged by its pid on this host as then, else
        # one a kill left before an upgrade stays for good. This process gives no such name, so
        # one with its pid is a predecessor's (a restarted container's pid 1).
        pid = int(match["legacy_pid"])
        return pid == os.getpid() or not _running(pid)
    if match["host"] not in (_this_host(), _whole_host()):  # as written now, or before
        # Another host's (a shared file system): its pid says nothing about this host's
        # processes, and whether that host still runs the writer cannot be told from here.
        return False
    pid = int(match["pid"])
    if pid == os.getpid():  # this process's, or a predecessor's with the same pid (containers)
        return match["token"] not in _IN_FLIGHT
    return not _running(pid)


def _running(pid: int) -> bool:
    """Whether a process `pid` runs on this host (in this pid namespace)."""
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
    with _claimed(path, "tmp") as tmp:
        try:
            with errors_named(path):
                yield tmp
                if fsync and tmp.is_file():
                    with open(tmp, "rb") as handle:
                        os.fsync(handle.fileno())
                stop.check()
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
    with _claimed(path, "old") as old:
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
def scratch_directory(path: str | Path) -> Iterator[Path]:
    """A new hidden folder beside `path` (`hidden_name`) for this process's own files while the
    block runs, removed at its end: never shared with another process writing beside it, and
    one a killed process left is removed by the next `remove_stale_temporaries` there."""
    with _claimed(Path(path), "tmp") as folder:
        folder.mkdir()
        try:
            yield folder
        finally:
            _remove(folder)


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
