"""`vtx serve` against hostile and careless clients: one real server on 127.0.0.1, raw sockets
and real HTTP requests. Each test here failed on the server that ran everything on its event
loop, took any Host, Origin and Content-Type, and waited on slow clients."""

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable
from urllib.parse import urlsplit

import pytest

from vtx.serve.process import ServerProcess, request

LINE = "A man is riding a bike."


@pytest.fixture(scope="module")
def server(trained_checkpoint):
    # A glossary of many pairs allowed, so that checking one request is long work for the
    # test of the event loop; short read and request timeouts, a low connection cap.
    process = ServerProcess("--checkpoint", trained_checkpoint, "--max-glossary-pairs", 60_000,
                            "--max-line-chars", 500_000, "--read-timeout", 2,
                            "--max-connections", 24, "--request-timeout", 30,
                            "--allowed-host", "mt.example.org")
    yield process
    if process.process.poll() is None:
        process.process.kill()


def raw(url: str, data: bytes, half_close: bool = False, timeout: float = 60) -> bytes:
    """What the server answers to `data` sent on one connection, read until it closes."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def post(path: str, body: bytes, host: str = "127.0.0.1", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n").encode() + body


def test_health_answers_while_a_request_s_glossary_is_matched(server):
    # 25,000 terms over a line of 300,000 characters (under the 1 MiB a body may hold):
    # seconds of checking for one request, had it a regular expression of every term.
    terms = [[f"term{i}", f"Wort{i}"] for i in range(25_000)]
    body = {"text": [" " * 300_000 + "term7"], "glossary": terms}
    (status, _, reply), waits, seconds = health_during(
        server.url, lambda: request(server.url + "/v1/translate", body))
    assert status == 200, reply
    assert "Wort7" in reply["translations"][0]["hypotheses"][0]["text"]
    # On the event loop, each /health waited for the whole check (seconds); now none waits
    # for more than a small part of the request.
    assert waits and max(waits) < max(1.0, seconds / 4), waits


def health_during(url: str, heavy: Callable[[], object]) -> tuple[object, list[float], float]:
    """(what `heavy` returns, the seconds each GET /health of `url` took while it ran, the
    seconds it took)."""
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        running = pool.submit(heavy)
        time.sleep(0.3)
        waits = []
        while not running.done() and len(waits) < 20:
            asked = time.monotonic()
            assert request(url + "/health")[0] == 200
            waits.append(time.monotonic() - asked)
        return running.result(), waits, time.monotonic() - started


@pytest.mark.parametrize("body, reason", [
    ({"text": ["a " * 250] * 64, "beam": 16}, "over the server's limit of"),
    ({"text": [LINE], "constraints": [[f"w{i}" for i in range(2000)]]},
     "field 'constraints[0]': 2000 phrases, over the server's limit of 32 a line "
     "(--max-constraints)"),
    ({"text": [LINE], "constraints": [["ein " * 60]]},
     "pieces of phrases, but the output of that line holds at most"),
    ({"text": ["x" * 500_001]}, "field 'text[0]': 500001 characters"),
    ({"text": [LINE], "glossary": [["dog", "Hund" * 100]]},
     "field 'glossary[0]': 400 characters"),
    ({"text": ["\ud800"]}, "field 'text[0]'"),
    ({"text": [LINE], "prefix": ["Ein \udc00"]}, "field 'prefix[0]'"),
    ({"text": [LINE], "constraints": [["\ud83d"]]}, "field 'constraints[0][0]'"),
    ({"text": [LINE], "glossary": [["man", "\udfff"]]}, "field 'glossary[0][1]'"),
])
def test_a_costly_or_malformed_request_gets_400_before_any_search(server, body, reason):
    status, _, reply = request(server.url + "/v1/translate", body)
    assert status == 400, reply
    assert reason in reply["error"] and len(reply["error"]) < 400


@pytest.mark.parametrize("body, reason", [
    (b'{"text": ["a"], "seed": ' + b"9" * 5000 + b"}", "malformed JSON"),
    (b"[" * 10_000 + b"]" * 10_000, "malformed JSON: nested too deep"),
    (b'{"text": ["a"], "' + b"f" * 900_000 + b'": 1}', "unknown field 'fffff"),
    (b'{"text": ["\\ud800"]}', "a lone surrogate"),
])
def test_malformed_json_gets_a_short_400_never_a_500(server, body, reason):
    status, _, reply = request(server.url + "/v1/translate", body)
    assert status == 400 and reason in reply["error"], reply
    assert len(reply["error"]) < 400
    _, _, metrics = request(server.url + "/metrics", raw=True)
    assert 'status="500"' not in metrics


def test_a_web_page_of_another_site_gets_nothing(server):
    body = json.dumps({"text": [LINE]}).encode()
    # A form or fetch() without preflight: text/plain.
    status, _, reply = request(server.url + "/v1/translate", body,
                               headers={"Content-Type": "text/plain"})
    assert status == 415 and "Content-Type 'text/plain'" in reply["error"]
    status, _, reply = request(server.url + "/v1/translate", body,
                               headers={"Origin": "http://evil.example.com"})
    assert status == 403 and "Origin 'http://evil.example.com'" in reply["error"]
    # No --cors-origin: no preflight is granted, not even a browser extension's.
    preflight = urllib.request.Request(server.url + "/v1/translate", method="OPTIONS", headers={
        "Origin": "chrome-extension://abcdefghijklmnop", "Access-Control-Request-Method": "POST"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(preflight, timeout=60)
    assert refused.value.code == 405
    assert "Access-Control-Allow-Origin" not in refused.value.headers
    # DNS rebinding: the page's own name, resolved to this address.
    for path in ("/v1/info", "/v1/translate"):
        answer = raw(server.url, post(path, body, host="evil.example.com")
                     if path != "/v1/info" else
                     b"GET /v1/info HTTP/1.1\r\nHost: evil.example.com\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 421"), answer[:200]
        assert b"'evil.example.com' is not this server's: it serves loopback names, IP " \
               b"addresses and mt.example.org (--allowed-host); to serve this name too" in answer
        assert b"start it with --allowed-host evil.example.com" in answer
    assert "vtx serve: Host names served: loopback names, IP addresses and mt.example.org " \
           "(--allowed-host)\n" in server.stderr
    # Its own page, a named host and clients that are no web page are served.
    port = urlsplit(server.url).port
    assert request(server.url + "/v1/translate", body,
                   headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    assert raw(server.url, post("/v1/translate", body, host="mt.example.org")).startswith(
        b"HTTP/1.1 200")
    assert raw(server.url, post("/v1/translate", body, host=f"localhost:{port}")).startswith(
        b"HTTP/1.1 200")


def test_a_half_closed_client_gets_its_answer(server):
    body = json.dumps({"text": [LINE]}).encode()
    answer = raw(server.url, post("/v1/translate", body), half_close=True)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"translations"' in answer


def test_a_slow_body_gets_408_and_a_slow_header_is_closed(server):
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(post("/v1/translate", b"")[:-2].replace(b"Content-Length: 0",
                                                             b"Content-Length: 100") + b"\r\n{")
        started = time.monotonic()
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"--read-timeout" in answer and time.monotonic() - started < 20
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends its headers
        started = time.monotonic()
        assert sock.recv(65536) == b"" and time.monotonic() - started < 20


def test_a_connection_past_the_cap_closes_the_idlest_or_gets_503_when_none_idles(server):
    address = urlsplit(server.url)
    # 24 connections that never send a request: the cap's worth, all idle.
    idle = [socket.create_connection((address.hostname, address.port), timeout=30)
            for _ in range(24)]
    try:
        time.sleep(1.2)
        answers = [raw(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                   b"Connection: close\r\n\r\n") for _ in range(3)]
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
        assert idle[0].recv(100) == b""  # the idlest were closed for them
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    # 24 connections in their handlers (their bodies still coming): no room for one more.
    busy = [socket.create_connection((address.hostname, address.port), timeout=30)
            for _ in range(24)]
    try:
        for sock in busy:
            sock.sendall(post("/v1/translate", b"")[:-2].replace(
                b"Content-Length: 0", b"Content-Length: 100") + b"\r\n{")
        time.sleep(0.5)
        answer = raw(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"--max-connections" in answer
    finally:
        for sock in busy:
            sock.close()
    closed = time.monotonic()  # their bodies' --read-timeout ends them (408)
    while request(server.url + "/health")[0] != 200:
        assert time.monotonic() - closed < 10, "the busy connections were never let go"
        time.sleep(0.2)


def test_info_says_every_limit(server):
    limits = request(server.url + "/v1/info")[2]["limits"]
    assert limits["max_glossary_pairs"] == 60_000 and limits["read_timeout_s"] == 2
    for name in ("max_line_chars", "max_constraints", "max_term_chars", "max_request_cost",
                 "max_queue_cost", "request_timeout_s", "max_connections", "drain_s",
                 "max_body_bytes"):
        assert limits[name] > 0, name


def test_a_request_past_its_deadline_gets_504_and_leaves_the_queue(trained_checkpoint):
    # It waits (--batch-wait-ms 10 minutes) for others that never come.
    server = ServerProcess("--checkpoint", trained_checkpoint, "--batch-wait-ms", 600_000,
                           "--request-timeout", 1)
    try:
        status, _, reply = request(server.url + "/v1/translate", {"text": [LINE]})
        assert status == 504 and "--request-timeout" in reply["error"]
        assert server.metric("vtx_queue_lines") == 0
    finally:
        server.process.kill()


def test_sigterm_exits_within_the_drain_whatever_slow_clients_do(trained_checkpoint):
    server = ServerProcess("--checkpoint", trained_checkpoint, "--drain-seconds", 2,
                           "--read-timeout", 600)
    address = urlsplit(server.url)
    stop = threading.Event()

    def trickle():  # a body of 10,000 bytes, one byte a second
        with socket.create_connection((address.hostname, address.port)) as sock:
            sock.sendall(post("/v1/translate", b"")[:-2].replace(
                b"Content-Length: 0", b"Content-Length: 10000") + b"\r\n")
            while not stop.wait(1):
                try:
                    sock.sendall(b" ")
                except OSError:
                    return

    clients = [threading.Thread(target=trickle, daemon=True) for _ in range(20)]
    for client in clients:
        client.start()
    time.sleep(1)
    started = time.monotonic()
    try:
        assert server.stop(timeout=60) == 0
        assert time.monotonic() - started < 15
    finally:
        stop.set()


def test_a_second_sigterm_exits_at_once(trained_checkpoint):
    server = ServerProcess("--checkpoint", trained_checkpoint, "--batch-wait-ms", 600_000,
                           "--drain-seconds", 300)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(request, server.url + "/v1/translate", {"text": [LINE]})
        server.wait_for_metric("vtx_queue_lines", 1)
        server.process.terminate()
        time.sleep(1)
        started = time.monotonic()
        server.process.terminate()
        assert server.process.wait(30) == 128 + 15
        assert time.monotonic() - started < 10
        with pytest.raises(Exception):
            waiting.result()


def test_more_lines_a_request_than_the_queue_holds_is_refused_at_start(trained_checkpoint):
    result = subprocess.run([sys.executable, "-m", "vtx_cli.main", "serve", "--checkpoint",
                             str(trained_checkpoint), "--max-lines", "100", "--max-queue",
                             "50", "--port", "0"], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "--max-lines 100 is over --max-queue 50" in result.stderr
