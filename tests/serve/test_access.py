"""Api keys, keyless origins and the rate limit of the routes that translate, detect or
parse."""

import pytest

from vtx.errors import DataError
from vtx.serve.access import (Access, Flood, KeyLimits, forwarded_address, forwarded_origin,
                              read_api_keys, read_proxies, request_size)
from vtx.serve.limit_store import MemoryStore
from vtx.serve.requests import RequestError


def test_api_keys_are_read_one_a_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# ours\nkey-1\n\n  key-2  \nkey-3 req_limit=120 char_limit=5000\n"
                    "key-4\tchar_limit=0\n")
    assert read_api_keys(path) == {"key-1": KeyLimits(), "key-2": KeyLimits(),
                                   "key-3": KeyLimits(req_limit=120, char_limit=5000),
                                   "key-4": KeyLimits(char_limit=0)}
    path.write_text("# none\n")
    with pytest.raises(DataError, match="no api key in it"):
        read_api_keys(path)


def test_a_missing_or_unknown_key_gets_403():
    access = Access({"key-1": KeyLimits()})
    access.admit("key-1", "10.0.0.1")
    for key in (None, "key-2"):
        with pytest.raises(RequestError) as refused:
            access.admit(key, "10.0.0.1")
        assert refused.value.status == 403


def test_a_missing_key_from_a_keyless_origin_is_let_through():
    access = Access({"key-1": KeyLimits()}, keyless_origins=("https://mt.example.org",
                                                           "moz-extension://*"))
    for origin in ("https://mt.example.org", "HTTPS://MT.example.org",
                   "moz-extension://5f1c-9a"):
        access.admit(None, "10.0.0.1", origin)
    for key, origin in ((None, "https://mt.example.org.evil.example"),
                        (None, "http://mt.example.org"), ("key-2", "https://mt.example.org")):
        with pytest.raises(RequestError) as refused:
            access.admit(key, "10.0.0.1", origin)
        assert refused.value.status == 403


def test_with_keys_optional_a_keyless_request_counts_as_its_address_and_a_made_up_key_403():
    now = [0.0]
    access = Access({"key-1": KeyLimits(req_limit=5)}, per_minute=1, keys_optional=True,
                    store=MemoryStore(clock=lambda: now[0]))
    assert access.admit(None, "10.0.0.1") == "address 10.0.0.1"
    with pytest.raises(RequestError) as refused:
        access.admit(None, "10.0.0.1")  # --req-limit 1: the address's bucket is empty
    assert refused.value.status == 429
    assert access.admit("key-1", "10.0.0.1") == "key key-1"  # the key's own 5 a minute
    with pytest.raises(RequestError) as refused:
        access.admit("key-2", "10.0.0.2")
    assert (refused.value.status, str(refused.value)) == (403, "invalid api key")


def test_each_known_key_and_address_gets_its_requests_a_minute_then_429():
    now = [0.0]
    access = Access({"key-1": KeyLimits()}, per_minute=2, store=MemoryStore(clock=lambda: now[0]),
                    keyless_origins=("http://page.example",))
    for _ in range(2):
        access.admit(None, "10.0.0.1", "http://page.example")
        access.admit("key-1", "10.0.0.1")  # a key counts apart from its address
    with pytest.raises(RequestError) as refused:
        access.admit(None, "10.0.0.1", "http://page.example")
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "30"}
    access.admit(None, "10.0.0.2", "http://page.example")
    now[0] = 30.0  # one request back, at 2 a minute
    access.admit(None, "10.0.0.1", "http://page.example")
    with pytest.raises(RequestError):
        access.admit(None, "10.0.0.1", "http://page.example")


def test_a_key_checked_before_its_texts_are_known_costs_nothing():
    access = Access({"key-1": KeyLimits()}, per_minute=1, char_limit=3)
    for _ in range(3):
        access.admit("key-1", "10.0.0.1", charged=False)
    with pytest.raises(RequestError) as refused:
        access.admit("key-2", "10.0.0.1", charged=False)
    assert refused.value.status == 403
    access.admit("key-1", "10.0.0.1", texts=["abc"])  # the minute's one text
    with pytest.raises(RequestError) as refused:
        access.admit("key-1", "10.0.0.1", texts=["abc"])
    assert refused.value.status == 429


def test_a_made_up_key_buys_no_bucket_of_its_own():
    access = Access(per_minute=2)  # no keys file: every key is made up
    access.admit("made-up-1", "10.0.0.1")
    access.admit("made-up-2", "10.0.0.1")
    with pytest.raises(RequestError) as refused:
        access.admit("made-up-3", "10.0.0.1")
    assert refused.value.status == 429


def test_x_forwarded_for_names_the_client_only_from_a_trusted_proxy():
    proxies = read_proxies(("10.0.0.0/8", "::1"))
    # From an untrusted peer the header is whatever the client wrote: ignored.
    assert forwarded_address("192.0.2.9", ["198.51.100.1"], proxies) == "192.0.2.9"
    assert forwarded_address("10.0.0.7", ["198.51.100.1"], proxies) == "198.51.100.1"
    # The client's own forged hops lie left of the right-most untrusted one.
    assert forwarded_address("10.0.0.7", ["6.6.6.6, 198.51.100.1, 10.1.2.3"],
                             proxies) == "198.51.100.1"
    assert forwarded_address("::1", ["6.6.6.6", "198.51.100.1"], proxies) == "198.51.100.1"
    assert forwarded_address("10.0.0.7", [], proxies) == "10.0.0.7"
    assert forwarded_address("10.0.0.7", ["10.0.0.8"], proxies) == "10.0.0.8"
    assert forwarded_address("10.0.0.7", ["198.51.100.1, junk"], proxies) == "10.0.0.7"
    with pytest.raises(DataError, match="--trusted-proxy 'proxy.local'"):
        read_proxies(("proxy.local",))


def test_a_trusted_proxy_s_forwarded_scheme_and_host_make_the_server_s_urls():
    proxies = read_proxies(("10.0.0.0/8",))
    origin = lambda peer, protos, hosts: forwarded_origin(peer, protos, hosts, proxies, "http",
                                                          "127.0.0.1:5000")
    assert origin("10.0.0.7", ["https"], ["mt.example.org"]) == "https://mt.example.org"
    assert origin("10.0.0.7", ["http, HTTPS"], ["a.example, mt.example.org:8443"]) == \
        "https://mt.example.org:8443"  # the right-most: the value the proxy itself set
    assert origin("192.0.2.9", ["https"], ["evil.example"]) == "http://127.0.0.1:5000"
    assert origin("10.0.0.7", [], []) == "http://127.0.0.1:5000"
    # What is no plain scheme or host[:port] is ignored, not written into a URL.
    assert origin("10.0.0.7", ["javascript"], ["evil.example/x?"]) == "http://127.0.0.1:5000"
    assert origin("10.0.0.7", ["https"], ["[::1]:8443"]) == "https://[::1]:8443"


def test_a_request_costs_its_texts_and_its_characters_are_bounded():
    access = Access(per_minute=4, char_limit=10, store=MemoryStore(clock=lambda: 0.0))
    assert request_size(["ab", "cde", 5]) == (3, 5) and request_size("abc") == (1, 3)
    assert request_size(None) == (1, 0) and request_size([]) == (1, 0)
    access.admit(None, "10.0.0.1", texts=["a", "b", "c"])
    with pytest.raises(RequestError) as refused:
        access.admit(None, "10.0.0.1", texts=["a", "b"])  # 1 of its 4 texts a minute left
    assert refused.value.status == 429
    access.admit(None, "10.0.0.1", texts="a")
    with pytest.raises(RequestError, match=r"request \(11\) exceeds text limit \(10, "
                                           "--char-limit\\)") as refused:
        access.admit(None, "10.0.0.2", texts=["abcdef", "ghijk"])
    assert refused.value.status == 400
    with pytest.raises(RequestError, match="5 texts is more than --req-limit 4") as refused:
        access.admit(None, "10.0.0.2", texts=list("abcde"))
    assert refused.value.status == 400


@pytest.mark.parametrize("line, named", [
    ("key-1 req_limit=ten", '"req_limit=ten"'), ("key-1 limit=5", '"limit=5"'),
    ("key-1 req_limit=-1", '"req_limit=-1"'), ("key-1 req_limit", '"req_limit"'),
    ("key-1 char_limit=1 char_limit=2", '"char_limit=2"'),
    ("key-1 req_limit=١", '"req_limit=١"')])
def test_a_malformed_keys_line_is_refused_naming_file_line_and_value(tmp_path, line, named):
    path = tmp_path / "keys.txt"
    path.write_text(f"# ours\nkey-0\n{line}\n")
    with pytest.raises(DataError) as refused:
        read_api_keys(path)
    assert str(refused.value).startswith(f"{path}:3: ") and named in str(refused.value)
    path.write_text("key-0\nkey-0 req_limit=5\n")
    with pytest.raises(DataError, match=":2: the key of line 1 again"):
        read_api_keys(path)


def test_a_key_s_own_limits_win_over_the_server_s():
    access = Access({"own": KeyLimits(req_limit=3, char_limit=20), "open": KeyLimits(req_limit=0),
                     "plain": KeyLimits()}, per_minute=1, char_limit=5,
                    store=MemoryStore(clock=lambda: 0.0))
    for _ in range(3):
        access.admit("own", "10.0.0.1", texts="x" * 20)
    with pytest.raises(RequestError, match=r"Slowdown: 3 per 1 minute \(this key's req_limit\)"):
        access.admit("own", "10.0.0.1", texts="x")
    with pytest.raises(RequestError, match=r"\(20, this key's char_limit\)"):
        access.admit("own", "10.0.0.2", texts="x" * 21)
    for _ in range(5):
        access.admit("open", "10.0.0.1", texts="x")  # req_limit=0: no limit of its own
    with pytest.raises(RequestError, match=r"\(5, --char-limit\)"):
        access.admit("open", "10.0.0.1", texts="x" * 6)
    access.admit("plain", "10.0.0.1", texts="x")
    with pytest.raises(RequestError, match=r"\(--req-limit\)"):
        access.admit("plain", "10.0.0.1", texts="x")


def refused(access: Access, *args, **kwargs) -> RequestError:
    with pytest.raises(RequestError) as refusal:
        access.admit(*args, **kwargs)
    return refusal.value


def test_a_client_refused_past_the_flood_threshold_is_banned_for_a_time():
    now = [0.0]
    access = Access({"key-1": KeyLimits()}, per_minute=1, flood=Flood(2, ban_s=600),
                    store=MemoryStore(clock=lambda: now[0]))
    access.admit("key-1", "10.0.0.1")
    assert [refused(access, "key-1", "10.0.0.1").status for _ in range(2)] == [429, 429]
    for key in ("made-up", None):  # refusals of an address, the two under its threshold
        assert refused(access, key, "10.0.0.2").status == 403
    now[0] = 61.0  # a new window: the address's two refusals forgotten
    assert refused(access, "made-up", "10.0.0.2").status == 403
    access.admit("key-1", "10.0.0.1")  # its bucket refilled; two refusals under the threshold
    assert refused(access, "key-1", "10.0.0.1").status == 429
    assert [refused(access, "key-1", "10.0.0.1").status for _ in range(2)] == [429, 429]
    ban = refused(access, "key-1", "10.0.0.9")  # its third: banned, from any address
    assert ban.status == 403 and ban.headers == {"Retry-After": "600"}
    assert "Too many request limits violations" in str(ban)
    assert "(--req-flood-threshold); the ban ends in 600 s, at " in str(ban)
    now[0] = 61.0 + 600
    access.admit("key-1", "10.0.0.1")
    with pytest.raises(DataError, match="--req-flood-threshold must be >= 1"):
        Flood(0, ban_s=600)
