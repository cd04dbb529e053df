"""The limits' state in this process and in a real Redis (`--req-limit-storage`): both stores
keep the same rules, and two `vtx serve` processes sharing a Redis share their limits."""

import shutil
import socket
import subprocess
import time

import pytest

from tests.serve.test_limits import detect
from vtx.errors import DataError
from vtx.serve.limit_store import MemoryStore, RedisStore, open_store


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A redis-server of its own on a free loopback port, nothing saved to disk."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is missing: tests/run.sh installs Debian's redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                                "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path_factory.mktemp("redis"))],
                               stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(params=["memory", "redis"])
def store(request, redis_url):
    return MemoryStore() if request.param == "memory" else RedisStore(
        redis_url, prefix=f"vtx:test:{time.monotonic_ns()}:")


def test_both_stores_keep_a_bucket_of_its_size(store):
    assert [store.take("address 10.0.0.1", 1, 2) for _ in range(2)] == [0.0, 0.0]
    assert 29 < store.take("address 10.0.0.1", 1, 2) <= 30  # one back at 2 a minute
    assert store.take("address 10.0.0.2", 2, 2) == 0.0
    assert 59 < store.take("key k", 4, 4) + store.take("key k", 4, 4) <= 60


def test_both_stores_ban_past_the_threshold_and_say_for_how_long(store):
    store.refused("address 10.0.0.1", 1, 60, 30)
    assert store.banned_for(["address 10.0.0.1", "key k"]) == 0
    store.refused("address 10.0.0.1", 1, 60, 30)
    assert 29 < store.banned_for(["key k", "address 10.0.0.1"]) <= 30
    assert store.banned_for(["address 10.0.0.2"]) == 0


def test_an_unknown_or_unreachable_storage_is_refused_naming_it():
    with pytest.raises(DataError, match="--req-limit-storage 'memcached://x'"):
        open_store("memcached://x")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(DataError, match=f"--req-limit-storage 'redis://127.0.0.1:{port}/0'"):
        open_store(f"redis://127.0.0.1:{port}/0")


def test_two_servers_sharing_a_redis_share_their_limits(trained_checkpoint, started,
                                                        redis_url):
    flags = ("--req-limit", 2, "--req-limit-storage", redis_url.replace("/0", "/1"))
    first, second = started(trained_checkpoint, *flags), started(trained_checkpoint, *flags)
    assert [detect(server)[0] for server in (first, second, first)] == [200, 200, 429]
    status, reply = detect(second)
    assert status == 429 and reply["error"].startswith("Slowdown: 2 per 1 minute")
