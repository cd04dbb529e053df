"""Fixtures of the serve tests."""

import pytest

from vtx.serve.process import ServerProcess


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
