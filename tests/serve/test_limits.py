"""The limits of `vtx serve` as a LibreTranslate operator sets them, over HTTP: the client
behind a trusted proxy (`--trusted-proxy`), a request's cost in texts,
`--char-limit`, a key's own limits in the keys file, bans (`--req-flood-threshold`)."""

import urllib.parse

from vtx.serve.process import ServerProcess, request

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def detect(server: ServerProcess, headers: dict | None = None, **fields) -> tuple[int, dict]:
    """(status, reply) of a POST /detect of the form `fields` (a German text unless given)."""
    body = urllib.parse.urlencode({"q": "Ein Mann fährt Rad.", **fields}).encode()
    status, _, reply = request(server.url + "/detect", body, headers={**FORM, **(headers or {})})
    return status, reply


def file_url(server: ServerProcess, headers: dict) -> str:
    """The translatedFileUrl of a POST /translate_file sent with `headers`."""
    import requests

    reply = requests.post(server.url + "/translate_file", headers=headers, timeout=300,
                          files={"file": ("a.txt", b"A man.")},
                          data={"source": "en", "target": "de"})
    assert reply.status_code == 200, reply.text
    return reply.json()["translatedFileUrl"]


def test_x_forwarded_headers_count_only_from_a_trusted_proxy(trained_checkpoint, started):
    """X-Forwarded-For buys a bucket, X-Forwarded-Proto and -Host make the file URLs."""
    untrusted = started(trained_checkpoint, "--req-limit", 3)
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "mt.example.org"}
    assert file_url(untrusted, forwarded).startswith(untrusted.url + "/download_file/")
    forged = [detect(untrusted, {"X-Forwarded-For": f"198.51.100.{i}"})[0] for i in range(3)]
    assert forged == [200, 200, 429]  # one bucket: 127.0.0.1's
    behind = started(trained_checkpoint, "--req-limit", 2, "--trusted-proxy", "127.0.0.1")
    url = file_url(behind, {**forwarded, "X-Forwarded-For": "198.51.100.9"})
    assert url.startswith("https://mt.example.org/download_file/") and url.endswith(".a_de.txt")
    sent = lambda address: detect(behind, {"X-Forwarded-For": f"6.6.6.6, {address}"})[0]
    assert [sent("198.51.100.1") for _ in range(3)] == [200, 200, 429]
    assert sent("198.51.100.2") == 200
    assert detect(behind)[0] == 200  # no header: the proxy's own address


def test_a_request_costs_its_texts_and_char_limit_bounds_its_characters(trained_checkpoint,
                                                                        started):
    server = started(trained_checkpoint, "--req-limit", 4, "--char-limit", 30)
    assert request(server.url + "/frontend/settings")[2]["charLimit"] == 30
    assert request(server.url + "/detect", {"q": ["Ein Mann.", "Ein Hund.", "Schnee."]}
                   )[0] == 200
    status, _, reply = request(server.url + "/detect", {"q": ["Ein Mann.", "Ein Hund."]})
    assert status == 429 and reply["error"].startswith("Slowdown: 4 per 1 minute (--req-limit)")
    assert request(server.url + "/v1/translate", {"text": ["A man."] * 2})[0] == 429
    status, reply = detect(server, {"X-Forwarded-For": "198.51.100.1"}, q="x" * 31)
    assert (status, reply) == (400, {"error": "Invalid request: request (31) exceeds text "
                                              "limit (30, --char-limit)"})
    assert detect(server, q="Ein Mann.")[0] == 200  # its last text of the minute
    assert request(server.url + "/translate", {
        "q": ["A man.", "A dog."], "source": "en", "target": "de"})[0] == 429


def test_a_server_without_char_limit_says_minus_one(trained_checkpoint, started):
    server = started(trained_checkpoint)
    assert request(server.url + "/frontend/settings")[2]["charLimit"] == -1


def test_a_key_s_own_limits_from_the_keys_file(trained_checkpoint, started, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# plain: the server's limits\nplain\nbig req_limit=3 char_limit=40\n")
    server = started(trained_checkpoint, "--api-keys", keys, "--req-limit", 1,
                     "--char-limit", 10)
    assert [detect(server, api_key="big")[0] for _ in range(4)] == [200, 200, 200, 429]
    assert detect(server, api_key="big")[1]["error"].startswith(
        "Slowdown: 3 per 1 minute (this key's req_limit)")
    assert detect(server, api_key="plain", q="x" * 11)[1]["error"].endswith(
        "(10, --char-limit)")
    assert [detect(server, api_key="plain", q="Ein Mann.")[0] for _ in range(2)] == [200, 429]
    status, _, reply = request(server.url + "/translate", {
        "q": "x" * 41, "source": "en", "target": "de", "api_key": "big"})
    assert (status, reply) == (400, {"error": "Invalid request: request (41) exceeds text "
                                              "limit (40, this key's char_limit)"})


def test_a_client_refused_past_req_flood_threshold_is_banned(trained_checkpoint, started,
                                                              tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("good\n")
    server = started(trained_checkpoint, "--api-keys", keys, "--req-flood-threshold", 2,
                     "--req-flood-ban", 30, "--trusted-proxy", "127.0.0.1")
    flooder = {"X-Forwarded-For": "198.51.100.1"}
    assert [detect(server, flooder, api_key=f"guess-{i}")[0] for i in range(3)] == [403] * 3
    body = urllib.parse.urlencode({"q": "Ein Mann.", "api_key": "good"}).encode()
    status, headers, reply = request(server.url + "/detect", body, headers={**FORM, **flooder})
    assert status == 403 and 1 <= int(headers["Retry-After"]) <= 30
    assert reply["error"].startswith("Too many request limits violations: banned for more "
                                     "than 2 refusals within 60 s (--req-flood-threshold); "
                                     "the ban ends in ")
    assert detect(server, {"X-Forwarded-For": "198.51.100.2"}, api_key="good")[0] == 200
