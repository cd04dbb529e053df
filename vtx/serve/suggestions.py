"""The suggestions of POST /suggest (`vtx serve --suggestions FILE`): each one JSON line
appended to the file, `{"q", "s", "source", "target", "time"}`, and nothing of who sent it.

LibreTranslate keeps them in an SQLite table; a file of JSON lines is read by any tool and
never rewritten. Each line is one write of a file opened for appending, under a lock, so the
lines of concurrent requests never interleave; the file stops growing at `max_bytes`.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from pathlib import Path

from vtx.serve.requests import RequestError

MAX_BYTES = 64 << 20  # the file's size past which suggestions are refused (--help says it)


class Suggestions:
    """The append-only file of suggestions at `path`, of `max_bytes` at most."""

    def __init__(self, path: str | Path, max_bytes: int = MAX_BYTES):
        self.path, self.max_bytes = Path(path), max_bytes
        self._lock = threading.Lock()
        os.close(self._open())  # a path that cannot be written fails at the server's start

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def add(self, record: dict) -> None:
        """Append `record` (q, s, source, target) with the time, in UTC, as one line.

        Raises:
            RequestError: 507 where the line would take the file past `max_bytes`.
        """
        now = datetime.datetime.now(datetime.timezone.utc)
        line = (json.dumps({**record, "time": f"{now:%Y-%m-%dT%H:%M:%SZ}"}, ensure_ascii=False)
                + "\n").encode("utf-8")
        with self._lock:
            descriptor = self._open()
            try:
                if os.fstat(descriptor).st_size + len(line) > self.max_bytes:
                    raise RequestError(f"the suggestions file is full ({self.max_bytes} bytes): "
                                       f"this server takes no more suggestions", 507)
                os.write(descriptor, line)
            finally:
                os.close(descriptor)
