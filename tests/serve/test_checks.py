"""The check pool of `vtx serve`: each client's checks in its turn, a bound on those waiting."""

import asyncio
import threading
import time

import pytest

from vtx.serve.checks import CheckPool
from vtx.serve.requests import RequestError


def slow(ended: list, name: str, seconds: float = 0.2):
    def check():
        time.sleep(seconds)
        ended.append(name)
        return name
    return check


def test_a_client_of_many_checks_waits_for_its_own_not_the_others():
    async def main():
        pool = CheckPool(threads=2, per_client=16)
        ended = []
        flood = [asyncio.create_task(pool.run("address 10.0.0.1", slow(ended, f"flood{i}")))
                 for i in range(6)]
        await asyncio.sleep(0.05)  # the flood asked first
        honest = await pool.run("address 10.0.0.2", slow(ended, "honest", 0.0))
        await asyncio.gather(*flood)
        pool.close()
        return honest, ended

    honest, ended = asyncio.run(main())
    # One check of the flood at a time: the honest one runs on the other thread at once.
    assert honest == "honest" and ended.index("honest") <= 1, ended


def test_checks_past_a_client_s_bound_get_503_and_an_error_is_its_caller_s():
    async def main():
        pool = CheckPool(threads=1, per_client=2)
        ended = []
        waiting = [asyncio.create_task(pool.run("a", slow(ended, str(i)))) for i in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(RequestError) as refused:
            await pool.run("a", slow(ended, "third"))
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
        assert "2 requests of this client" in str(refused.value)

        def bad():
            raise RequestError("field 'q': no", 400)

        with pytest.raises(RequestError, match="field 'q'"):
            await pool.run("b", bad)
        assert await asyncio.gather(*waiting) == ["0", "1"]
        pool.close()

    asyncio.run(main())


def test_a_check_whose_request_is_dropped_holds_its_client_s_turn_until_it_ends():
    async def main():
        pool = CheckPool(threads=2, per_client=4)
        release, started = threading.Event(), []

        def blocked():
            started.append("first")
            release.wait(10)
            return "first"

        first = asyncio.create_task(pool.run("a", blocked))
        await asyncio.sleep(0.05)
        first.cancel()  # the client went away: its thread still runs
        second = asyncio.create_task(pool.run("a", lambda: started.append("second")))
        await asyncio.sleep(0.1)
        assert started == ["first"]
        release.set()
        await second
        assert started == ["first", "second"]
        pool.close()

    asyncio.run(main())
