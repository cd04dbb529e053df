"""A directory's manifest: `SHA256SUMS`, the SHA-256 and relative path of each of its files, in
the format of GNU coreutils' `sha256sum` (`HASH  PATH`, one a line, sorted by path), so that
`cd DIR && sha256sum -c --strict SHA256SUMS` checks it outside vtx.

Every directory vtx writes whole (an export, a keras-hub preset, a data directory) gets one,
written last, into the directory while it is still being built under its temporary name
(`vtx.atomic.new_directory`). The loaders vtx ships check it (`verify`): a changed, missing or
added file is refused by name, as is a symbolic link that leaves the directory and an entry
that is not a plain relative path inside it (`..`, an absolute path). A directory
without one (written before manifests existed, or by another tool) is read unchecked but for
its links.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from vtx import atomic
from vtx.errors import ManifestError

NAME = "SHA256SUMS"
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")  # sha256sum's text (" ") or binary ("*") mode
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file `path`, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(directory: Path) -> list[str]:
    """Every file below `directory` but the manifest, as sorted relative POSIX paths."""
    found = []
    for folder, _, names in os.walk(directory):
        for name in names:
            relative = (Path(folder) / name).relative_to(directory).as_posix()
            if relative != NAME:
                found.append(relative)
    return sorted(found)


def write(directory: str | Path) -> None:
    """Write `directory`'s manifest (atomically), once every other file of it is written.

    Raises:
        ValueError: a file name sha256sum would escape (a newline or a backslash in it).
    """
    directory = Path(directory)
    lines = []
    for relative in _files(directory):
        if "\n" in relative or "\\" in relative:
            raise ValueError(f"{directory / relative}: a file name sha256sum cannot list as is")
        lines.append(f"{file_sha256(directory / relative)}  {relative}\n")
    atomic.write_text(directory / NAME, "".join(lines))


def verify(directory: str | Path) -> None:
    """Check `directory` against its manifest: every listed file present and of its SHA-256, no
    other file, and no symbolic link leaving the directory (checked with or without one).

    Raises:
        ManifestError: the first file that fails, named with the reason.
    """
    directory = Path(directory)
    _check_links(directory)
    manifest = directory / NAME
    if not manifest.is_file():
        return
    listed = {}
    for number, line in enumerate(manifest.read_text(encoding="utf-8",
                                                     errors="replace").splitlines(), 1):
        if not (match := _LINE.match(line)):
            raise ManifestError(f"{manifest}:{number}: not a `sha256sum` line ({line[:80]!r}): "
                                f"damaged")
        _check_entry(match[2], manifest, number)
        listed[match[2]] = match[1]
    for relative, expected in listed.items():
        path = directory / relative
        if not path.is_file():
            raise ManifestError(f"{path} is missing: {manifest} lists it; the directory is not "
                                f"whole")
        if file_sha256(path) != expected:
            raise ManifestError(f"{path} changed after it was written: its SHA-256 is not the "
                                f"one {manifest} lists (damaged or edited)")
    for relative in _files(directory):
        if relative not in listed:
            raise ManifestError(f"{directory / relative} is not in {manifest}: added after the "
                                f"directory was written; remove it")


def _check_entry(relative: str, manifest: Path, number: int) -> None:
    """Refuse an entry of `manifest` (at line `number`) that is not a plain relative path
    inside its directory, before anything is looked up there (an absolute path or `..` would
    name a file outside, and whether it exists would show).

    Raises:
        ManifestError: the entry named.
    """
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ManifestError(f"{manifest}:{number}: its entry {relative!r} is not a plain "
                            f"relative path inside {manifest.parent} (an absolute path, or "
                            f"'..', '.' or an empty part in it): damaged or crafted; not read")


def _check_links(directory: Path) -> None:
    """Refuse a symbolic link below `directory` whose target lies outside it."""
    root = Path(os.path.realpath(directory))
    for folder, folders, names in os.walk(directory):
        for name in folders + names:
            path = Path(folder) / name
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                if target != root and root not in target.parents:
                    raise ManifestError(f"{path} is a symbolic link to {target}, outside "
                                        f"{directory}: not read")
