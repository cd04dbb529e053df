"""The translated files of `POST /translate_file`, kept in the server's memory (nothing is
written to disk) until `GET /download_file/<name>` fetches them: each under a random name
(`secrets.token_urlsafe`, 192 bits: not guessed), for `--file-ttl` seconds, the newest
`FileSettings.max_files` and `max_kept_bytes` together at most (the oldest dropped first).
"""

from __future__ import annotations

import collections
import dataclasses
import secrets
import time
from typing import Callable

from vtx.errors import ArgumentError


@dataclasses.dataclass(frozen=True)
class FileSettings:
    """What /translate_file takes and keeps (`vtx serve`'s flags of the same names)."""

    enabled: bool = True  # --disable-files-translation: False
    max_file_bytes: int = 10 << 20  # an upload's size; its body may hold 64 KiB more (fields)
    ttl_s: float = 600.0  # --file-ttl: how long a translated file may be downloaded
    max_files: int = 256  # translated files kept at once
    max_pending: int = 8  # files being read or written at once; more get 503

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ArgumentError("{max_file_bytes} must be >= 1, got {value}",
                                value=self.max_file_bytes)
        if not (self.ttl_s == self.ttl_s and 0 < self.ttl_s < float("inf")):
            raise ArgumentError("{ttl_s} must be finite and > 0, got {value}", value=self.ttl_s)

    @property
    def max_body_bytes(self) -> int:
        return self.max_file_bytes + (64 << 10)

    @property
    def max_kept_bytes(self) -> int:
        """The translated files' bytes kept together: 32 uploads of the largest size."""
        return 32 * self.max_file_bytes


@dataclasses.dataclass(frozen=True)
class TranslatedFile:
    data: bytes
    filename: str  # the name it is downloaded as: the upload's, with the target code
    content_type: str


class FileStore:
    """Translated files by name, each kept for `settings.ttl_s` seconds of `clock`."""

    def __init__(self, settings: FileSettings, clock: Callable[[], float] = time.monotonic):
        self._settings, self._clock = settings, clock
        self._files: collections.OrderedDict[str, tuple[float, TranslatedFile]] = \
            collections.OrderedDict()
        self._bytes = 0

    def put(self, file: TranslatedFile) -> str:
        """Keep `file`; its new name. The oldest files go to make room."""
        self._expire()
        name = secrets.token_urlsafe(24)
        self._files[name] = (self._clock() + self._settings.ttl_s, file)
        self._bytes += len(file.data)
        while len(self._files) > self._settings.max_files \
                or self._bytes > self._settings.max_kept_bytes:
            self._drop(next(iter(self._files)))
        return name

    def get(self, name: str) -> TranslatedFile | None:
        """The file kept as `name`, or None: unknown, expired or dropped."""
        self._expire()
        kept = self._files.get(name)
        return kept[1] if kept is not None else None

    def __len__(self) -> int:
        self._expire()
        return len(self._files)

    def _expire(self) -> None:
        now = self._clock()
        while self._files and next(iter(self._files.values()))[0] <= now:
            self._drop(next(iter(self._files)))

    def _drop(self, name: str) -> None:
        _, file = self._files.pop(name)
        self._bytes -= len(file.data)
