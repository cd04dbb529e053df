"""`vtx serve` end to end: one server process on 127.0.0.1, real HTTP requests.

The server waits (--batch-wait-ms 10 minutes) until its queue holds --max-tokens source pieces:
so the three concurrent requests below are searched in one batch, whatever the machine's speed,
and a lone short request stays queued until SIGTERM makes the server search what it holds.
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from vtx import checkpoints
from vtx.inference.decoding import padded_batches
from vtx.inference.loading import checkpoint_vocabulary
from vtx.serve.process import ServerProcess, request

REQUESTS = [["A man is riding a bike.", "Two dogs play in the snow."],
            ["A girl.", ""],
            ["A woman is cooking.", "A group of people are standing in front of a building."]]
LINES = [line for lines in REQUESTS for line in lines]


@pytest.fixture(scope="module")
def server(trained_checkpoint):
    vocab = checkpoint_vocabulary(checkpoints.load(trained_checkpoint), trained_checkpoint)
    tokens = sum(len(vocab.encode(line)) for line in LINES)
    # --request-timeout past every wait below: no request leaves the queue by its deadline.
    process = ServerProcess("--checkpoint", trained_checkpoint, "--max-tokens", tokens,
                            "--batch-wait-ms", 600_000, "--max-lines", 8, "--max-queue", 8,
                            "--max-beam", 4, "--request-timeout", 600)
    yield process
    if process.process.poll() is None:
        process.process.kill()


def translate_jsonl(checkpoint, tmp_path, lines, *flags):
    """`vtx translate --output-format jsonl` of `lines` (in this process)."""
    from click.testing import CliRunner

    from vtx_cli.main import main

    source = tmp_path / "source.txt"
    source.write_text("".join(line + "\n" for line in lines))
    result = CliRunner().invoke(main, ["translate", "--checkpoint", str(checkpoint), "--input",
                                       str(source), "--output-format", "jsonl",
                                       *map(str, flags)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def assert_same_records(served, offline):
    """Equal records; scores equal to the rounding of a batch's matrix products."""
    strip = lambda record: {**record, "hypotheses": [
        {k: v for k, v in h.items() if k not in ("score", "positional_scores")}
        for h in record["hypotheses"]]}
    assert [strip(r) for r in served] == [strip(r) for r in offline]
    for ours, theirs in zip(served, offline):
        for a, b in zip(ours["hypotheses"], theirs["hypotheses"]):
            np.testing.assert_allclose(a["score"], b["score"], rtol=1e-5)
            np.testing.assert_allclose(a["positional_scores"], b["positional_scores"],
                                       rtol=1e-4, atol=1e-5)


def test_concurrent_requests_share_a_batch_and_get_vtx_translate_s_output(
        server, trained_checkpoint, tmp_path):
    batches, searched = (server.metric(f"vtx_batch_lines_{kind}") for kind in ("count", "sum"))
    with ThreadPoolExecutor(len(REQUESTS)) as pool:
        replies = list(pool.map(lambda lines: request(server.url + "/v1/translate", {
            "text": lines, "nbest": 2}), REQUESTS))
    assert [status for status, _, _ in replies] == [200] * len(REQUESTS)
    offline = translate_jsonl(trained_checkpoint, tmp_path, LINES, "--nbest", "2")
    start = 0
    for lines, (_, _, reply) in zip(REQUESTS, replies):
        expected = [{**record, "id": record["id"] - start}
                    for record in offline[start:start + len(lines)]]
        assert_same_records(reply["translations"], expected)
        start += len(lines)
    assert reply["translations"][1]["source"] == LINES[-1]
    # The lines of all three in vtx's padded batches, one of them holding lines of several.
    vocab = checkpoint_vocabulary(checkpoints.load(trained_checkpoint), trained_checkpoint)
    encoded = [vocab.encode(line) for line in LINES]
    shared = [rows for rows, _ in padded_batches(encoded, sum(map(len, encoded)), pad_rows=False)]
    owner = [number for number, lines in enumerate(REQUESTS) for _ in lines]
    assert any(len({owner[row] for row in rows}) > 1 for rows in shared)
    assert server.metric("vtx_batch_lines_count") == batches + len(shared)
    assert server.metric("vtx_batch_lines_sum") == searched + len(LINES)


def test_a_sampled_request_draws_vtx_translate_s_samples(server, trained_checkpoint, tmp_path):
    # LINES alone fill --max-tokens: searched at once.
    status, _, reply = request(server.url + "/v1/translate", {
        "text": LINES, "sampling": True, "nbest": 2, "seed": 5, "sampling_topk": 20})
    assert status == 200, reply
    offline = translate_jsonl(trained_checkpoint, tmp_path, LINES, "--sampling", "--nbest", "2",
                              "--seed", "5", "--sampling-topk", "20")
    assert_same_records(reply["translations"], offline)


def test_a_request_s_glossary_constrains_as_vtx_translate_s(server, trained_checkpoint,
                                                             tmp_path):
    pairs = [["snow", "Eis"], ["woman", "Frau"], ["bike", "Rad"]]
    status, _, reply = request(server.url + "/v1/translate", {"text": LINES, "glossary": pairs})
    assert status == 200, reply
    (tmp_path / "glossary.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    offline = translate_jsonl(trained_checkpoint, tmp_path, LINES, "--glossary",
                              tmp_path / "glossary.tsv")
    assert_same_records(reply["translations"], offline)
    assert "Eis" in reply["translations"][1]["hypotheses"][0]["text"]


def test_a_prefix_too_long_for_its_line_is_refused_before_it_is_queued(server):
    # "A woman is cooking." may have an output of at most 5 + 50 tokens with EOS.
    status, _, error = request(server.url + "/v1/translate", {
        "text": LINES[3:], "prefix": ["", "a " * 80, ""]})
    assert status == 400
    assert error["error"].startswith("field 'prefix[1]': 80 pieces, but the output of that line "
                                     "holds at most")
    assert server.metric("vtx_queue_lines") == 0


@pytest.mark.parametrize("body, reason", [
    (b'{"text": ["A man."', "malformed JSON: Expecting ',' delimiter"),
    (b'["A man."]', "the body must be a JSON object, got [\"A man.\"]"),
    ({"text": ["A man."], "bean": 2}, "unknown field 'bean'"),
    ({"text": "A man."}, "field 'text': expected a list of strings, got \"A man.\""),
    ({"text": ["A man."], "beam": "4"}, "field 'beam': expected an integer, got \"4\""),
    ({"text": ["A man."], "alignment": 1}, "field 'alignment': expected a boolean, got 1"),
    ({"text": ["A man."], "beam": 5}, "field 'beam': 5, over the server's limit of 4"),
    ({"text": ["A man."], "nbest": 9}, "field 'nbest': 9, over the server's limit of 4"),
    ({"text": ["A man."], "beam": 2, "nbest": 3}, "need 1 <= 'nbest' <= 'beam', got 3 and 2"),
    ({"text": ["a"] * 9}, "field 'text': 9 lines, over the server's limit of 8"),
    ({"text": ["a " * 70]}, "field 'text[0]': 70 source pieces, over the server's limit of 64"),
    ({"text": ["A man.\nA dog."]}, "field 'text[0]': \"A man.\\nA dog.\" holds a line break"),
    ({"text": ["A man."], "seed": 3}, "field 'seed' needs 'sampling': true"),
    ({"text": ["A man."], "prefix": ["Ein", "Zwei"]}, "field 'prefix': 2 entries for 1 lines"),
    ({"beam": 2}, "field 'text' is missing"),
    ({"text": ["A"], "glossary": [["dog", " "]]}, "field 'glossary[0]': the target term is empty"),
    ({"text": ["A"], "glossary": [["dog"]]}, "field 'glossary': expected a list of [source, "),
    ({"text": ["A"], "glossary": [["dog", "\u200b"]]}, "field 'glossary': the target term "
                                                      "'\\u200b' of 'dog' encodes to no pieces"),
    ({"text": ["A"], "constraints": [["\u200b"]]}, "field 'constraints[0]': the phrase \"\u200b\" "
                                                  "encodes to no pieces"),
])
def test_a_bad_request_gets_a_400_naming_the_field_and_value(server, body, reason):
    status, _, reply = request(server.url + "/v1/translate", body)
    assert status == 400
    assert reason in reply["error"] and "\n" not in reply["error"]


def test_info_health_and_an_unknown_route(server):
    status, _, info = request(server.url + "/v1/info")
    assert status == 200
    assert info["limits"]["max_beam"] == 4 and info["limits"]["max_line_tokens"] == 64
    assert info["settings"]["beam"] == 4 and not info["model"]["parser"]
    assert "/" not in "".join(info["model"]["checkpoints"])  # no server path
    assert request(server.url + "/health")[:1] == (200,)
    status, headers, text = request(server.url + "/metrics", raw=True)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'vtx_requests_total{route="/health",status="200"} ' in text
    assert "# TYPE vtx_request_seconds histogram" in text
    assert request(server.url + "/v1/parse", {"text": ["A man ."]})[0] == 404
    assert request(server.url + "/nowhere")[:3:2] == (404, {"error": "no such route: /nowhere"})
    status, headers, reply = request(server.url + "/v1/info", {})
    assert status == 405 and reply["error"].startswith("POST /v1/info: use GET")


def test_a_request_whose_client_disconnects_leaves_the_queue(server):
    """The client resets its connection (a close with SO_LINGER 0; a kernel also resets one
    closed with data unread). A plain close reads as the half-close that `nc -N` sends before
    reading its answer, so such a request stays queued until its --request-timeout."""
    import socket
    import struct
    from urllib.parse import urlsplit

    body = json.dumps({"text": ["A girl."]}).encode()
    address = urlsplit(server.url)
    with socket.create_connection((address.hostname, address.port)) as connection:
        connection.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body))
        server.wait_for_metric("vtx_queue_lines", 1)  # fewer pieces than --max-tokens: held
        # Linger on, 0 s: the close resets the connection.
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.wait_for_metric("vtx_queue_lines", 0, timeout=30)  # well before --request-timeout


def test_a_full_queue_gets_503_and_sigterm_answers_what_is_queued_then_exits_0(server):
    with ThreadPoolExecutor(1) as pool:
        # Fewer pieces than --max-tokens: it waits in the queue.
        waiting = pool.submit(request, server.url + "/v1/translate", {"text": ["A girl."]})
        server.wait_for_metric("vtx_queue_lines", 1)
        status, headers, reply = request(server.url + "/v1/translate", {"text": ["a"] * 8})
        assert status == 503 and headers["Retry-After"] == "1"
        assert "the queue is full: 1 lines wait, at most 8" in reply["error"]
        assert server.stop() == 0
        status, _, reply = waiting.result()
    assert status == 200
    assert reply["translations"][0]["hypotheses"][0]["text"]
    log = "".join(server.stderr)
    assert "vtx serve: stopped" in log
    # The default --search-threads 2, each with its share of the cores.
    cores = len(os.sched_getaffinity(0))  # the server inherits this process's
    assert f"vtx serve: 2 search threads, each operation on {max(1, cores // 2)} of the " \
        f"{cores} cores" in log


def resident_bytes(pid: int) -> int:
    """VmRSS of process `pid`."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_a_client_cycling_through_settings_traces_nothing_new_and_holds_no_more_memory(
        trained_checkpoint):
    """Each new lenpen, nbest, seed, temperature, top-k or top-p once cost a trace of its own
    (seconds) and memory never given back; now the search of each beam size, of sampling and
    of constraints is traced once, and the settings are fed to it at each call."""
    process = ServerProcess("--checkpoint", trained_checkpoint, "--batch-wait-ms", 0)
    try:
        def translate(index: int, kind: str) -> None:
            body = {"text": LINES[:2], "nbest": 1 + index % 3}
            if kind == "sampling":
                body.update(sampling=True, seed=index, temperature=0.5 + index / 16,
                            sampling_topk=index % 5, sampling_topp=1 - index / 128)
            else:
                body.update(lenpen=round(0.1 + index / 32, 4))
            if kind == "constraints":
                body.update(constraints=[["Hund"], []])
            status, _, reply = request(process.url + "/v1/translate", body)
            assert status == 200, reply

        kinds = ("beam", "sampling", "constraints")
        for index in range(3):  # the first of each kind traces
            translate(index, kinds[index])
        traces = process.metric("vtx_search_traces_total")
        assert traces > 0
        for index in range(3, 30):  # and the memory takes its size
            translate(index, kinds[index % 3])
        memory = resident_bytes(process.process.pid)
        for index in range(30, 120):
            translate(index, kinds[index % 3])
        assert process.metric("vtx_search_traces_total") == traces
        assert resident_bytes(process.process.pid) < 1.1 * memory
    finally:
        process.stop()


def test_a_bug_s_500_is_said_in_json_and_its_traceback_logged(trained_checkpoint):
    import asyncio

    import aiohttp
    from aiohttp import web

    from vtx.inference.decoding import DecodeOptions
    from vtx.serve.app import build_service, make_app
    from vtx.serve.requests import Limits

    logged = []
    app = make_app(build_service({None: [trained_checkpoint]}, DecodeOptions(), Limits()),
                   logged.append)

    async def bug(request):  # a route of the real app that fails as a bug would
        return {"answer": 1 / 0}

    app.router.add_get("/bug", bug)

    async def get() -> tuple[int, dict]:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{runner.addresses[0][1]}/bug") as reply:
                    return reply.status, await reply.json()
        finally:
            await runner.cleanup()

    assert asyncio.run(get()) == (500, {"error": "internal error: ZeroDivisionError"})
    [message] = logged
    assert message.startswith("vtx serve: internal error answering GET /bug:\nTraceback")
    assert "1 / 0" in message and message.endswith("ZeroDivisionError: division by zero")


def test_a_refused_request_s_body_is_freed_without_the_cycle_collector(trained_checkpoint):
    # A refusal raised in a check thread and awaited through futures: its traceback's frames
    # hold the parsed body in a cycle, which only a full collection (holding the event loop
    # for a tenth of a second with a served model's objects) would free.
    import asyncio
    import gc

    import aiohttp
    from aiohttp import web

    from vtx.inference.decoding import DecodeOptions
    from vtx.serve.app import build_service, make_app
    from vtx.serve.requests import Limits

    app = make_app(build_service({None: [trained_checkpoint]}, DecodeOptions(), Limits()),
                   print)
    body = {"text": ["A man."], "glossary": [[f"t{i}", f"W{i}"] for i in range(25_000)]}

    async def post() -> int:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://127.0.0.1:{runner.addresses[0][1]}"
                                        "/v1/translate", json=body) as reply:
                    await reply.read()
                    return reply.status
        finally:
            await runner.cleanup()

    gc.collect()
    gc.disable()
    try:
        assert asyncio.run(post()) == 400  # over --max-glossary-pairs
        collected = gc.collect()
    finally:
        gc.enable()
    assert collected < 5_000, collected  # the body alone: 25,000 lists
