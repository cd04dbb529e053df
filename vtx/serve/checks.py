"""Where `vtx serve` reads and checks request bodies: a pool of threads shared fairly among
clients, so that a flood of costly-to-check bodies from one client (a megabyte of markup, of
JSON nesting, of sentences) waits for its own checks and takes no thread from the others.

Each client (a request's address: its key is in the body, read only by the check) has one
check running at once, and at most `per_client` waiting; more are refused at once (503, with
Retry-After). Waiting clients take the pool's threads in the order they asked, one check each
at a time, so a client's turn comes after at most one check of each other client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Callable, TypeVar

from vtx.serve.requests import RequestError

T = TypeVar("T")


@dataclasses.dataclass
class _Client:
    running: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    waiting: int = 0  # checks asked, not yet ended (the running one included)


class CheckPool:
    """`threads` threads that run checks (`run`); a client's checks one at a time, at most
    `per_client` asked at once."""

    def __init__(self, threads: int = 4, per_client: int = 16):
        if threads < 1 or per_client < 1:
            raise ValueError(f"threads and per_client must be >= 1, got {threads}, "
                             f"{per_client}")
        self.per_client = per_client
        self._executor = concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="vtx-serve-check")
        self._threads = asyncio.Semaphore(threads)  # FIFO: the clients in the order they ask
        self._clients: dict[str, _Client] = {}

    async def run(self, client: str, check: Callable[[], T]) -> T:
        """`check()` on a thread of the pool, in `client`'s turn; its result or its error.

        Raises:
            RequestError: 503 when `client` has `per_client` checks asked already.
        """
        state = self._clients.setdefault(client, _Client())
        if state.waiting >= self.per_client:
            raise RequestError(f"{state.waiting} requests of this client are being read "
                               f"already: wait for their answers", 503, {"Retry-After": "1"})
        state.waiting += 1
        held: list[asyncio.Lock | asyncio.Semaphore] = []

        def release(_=None) -> None:
            for lock in held:
                lock.release()
            state.waiting -= 1
            if not state.waiting:
                del self._clients[client]

        try:
            for lock in (state.running, self._threads):
                await lock.acquire()
                held.append(lock)
            future = asyncio.get_running_loop().run_in_executor(self._executor, check)
        except BaseException:
            release()
            raise
        # Released when the thread ends, not when the request is dropped: a client that goes
        # away mid-check cannot start another beside it.
        future.add_done_callback(release)
        return await asyncio.shield(future)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
