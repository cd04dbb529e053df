"""The limits of `vtx serve` as a LibreTranslate operator sets them, over HTTP: the client
behind a trusted proxy (`--trusted-proxy`)."""

import urllib.parse

import pytest

from vtx.serve.process import ServerProcess, request

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def detect(server: ServerProcess, headers: dict | None = None, **fields) -> tuple[int, dict]:
    """(status, reply) of a POST /detect of the form `fields` (a German text unless given)."""
    body = urllib.parse.urlencode({"q": "Ein Mann fährt Rad.", **fields}, doseq=True).encode()
    status, _, reply = request(server.url + "/detect", body, headers={**FORM, **(headers or {})})
    return status, reply


@pytest.fixture
def started():
    """Start servers of the given flags; each is stopped (cleanly) at the test's end."""
    servers = []

    def start(checkpoint, *flags) -> ServerProcess:
        servers.append(ServerProcess("--checkpoint", checkpoint, "--source-lang", "en",
                                     "--target-lang", "de", "--batch-wait-ms", 1, *flags))
        return servers[-1]

    yield start
    for server in servers:
        assert server.stop() == 0


def test_x_forwarded_for_buys_a_bucket_only_from_a_trusted_proxy(trained_checkpoint, started):
    untrusted = started(trained_checkpoint, "--req-limit", 2)
    forged = [detect(untrusted, {"X-Forwarded-For": f"198.51.100.{i}"})[0] for i in range(3)]
    assert forged == [200, 200, 429]  # one bucket: 127.0.0.1's
    behind = started(trained_checkpoint, "--req-limit", 2, "--trusted-proxy", "127.0.0.1")
    sent = lambda address: detect(behind, {"X-Forwarded-For": f"6.6.6.6, {address}"})[0]
    assert [sent("198.51.100.1") for _ in range(3)] == [200, 200, 429]
    assert sent("198.51.100.2") == 200
    assert detect(behind)[0] == 200  # no header: the proxy's own address
