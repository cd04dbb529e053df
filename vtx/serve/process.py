"""A `vtx serve` process started from Python (the tests, `benchmarks/serve_load.py`), and a
plain HTTP client of it (urllib)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


class ServerProcess:
    """`vtx serve ARGS --host 127.0.0.1 --port 0` started; `url` once it listens, `stderr` its
    lines so far.

    Raises:
        AssertionError: it ended before listening (its stderr in the message).
    """

    def __init__(self, *args):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vtx_cli.main", "serve", *map(str, args), "--host",
             "127.0.0.1", "--port", "0"], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True)
        self.stderr: list[str] = []
        for line in self.process.stderr:
            self.stderr.append(line)
            if "listening on " in line:
                self.url = line.split("listening on ")[1].strip()
                break
        else:
            raise AssertionError(f"vtx serve ended before listening:\n{''.join(self.stderr)}")
        # Read on, so that the pipe never fills and blocks the server.
        self._reader = threading.Thread(target=lambda: self.stderr.extend(self.process.stderr),
                                        daemon=True)
        self._reader.start()

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, then its exit code."""
        self.process.terminate()
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        return code

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric of GET /metrics."""
        _, _, text = request(self.url + "/metrics", raw=True)
        return next(float(line.split()[1]) for line in text.splitlines()
                    if line.startswith(name + " "))

    def wait_for_metric(self, name: str, value: float, timeout: float = 60) -> None:
        """Poll /metrics until `name` is `value` (a state the caller knows will come).

        Raises:
            AssertionError: it is not, `timeout` seconds on.
        """
        deadline = time.monotonic() + timeout
        while (now := self.metric(name)) != value:
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} is {now}, not {value}, after {timeout} s")
            time.sleep(0.05)


def request(url: str, body: dict | bytes | None = None, raw: bool = False,
            timeout: float = 300, headers: dict | None = None) -> tuple[int, dict, object]:
    """(status, headers, the JSON reply or, `raw`, its text) of a GET, or a POST of `body` (as
    `Content-Type: application/json` unless `headers` say otherwise)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data,
                                                           headers={**sent, **(headers or {})}),
                                    timeout=timeout) as reply:
            status, headers, text = reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as error:
        status, headers, text = error.code, dict(error.headers), error.read().decode()
    return status, headers, text if raw else json.loads(text)
