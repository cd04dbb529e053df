"""LibreTranslate's API on `vtx serve`, called as real clients call it: libretranslatepy, and
raw requests shaped as Mastodon's, SearXNG's and Weblate's sources send them. Their
translations are `vtx translate`'s of the same sentences."""

import html
import json
import urllib.parse

import pytest

from tests.serve.test_server import translate_jsonl
from vtx.serve.process import ServerProcess, request

KEY = "3c7a-test-key"
SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman is cooking.",
             "A group of people are standing in front of a building."]
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def server(trained_checkpoint, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "api_keys.txt"
    keys.write_text(f"# the test's client\n{KEY}\n")
    process = ServerProcess("--checkpoint", trained_checkpoint, "--source-lang", "en",
                            "--target-lang", "de", "--api-keys", keys, "--batch-wait-ms", 1,
                            "--max-lines", 8, "--max-queue", 64, "--max-beam", 4)
    yield process
    if process.process.poll() is None:
        process.process.kill()


@pytest.fixture(scope="module")
def offline(trained_checkpoint, tmp_path_factory):
    """`vtx translate`'s best translation of each of SENTENCES."""
    records = translate_jsonl(trained_checkpoint, tmp_path_factory.mktemp("offline"), SENTENCES)
    return [record["hypotheses"][0]["text"] for record in records]


def form(fields: dict) -> bytes:
    """A body as Python's `requests` and `urllib` encode a form (Weblate, libretranslatepy)."""
    return urllib.parse.urlencode(fields).encode()


def test_libretranslatepy_translates_detects_and_lists_languages(server, offline):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url, api_key=KEY)
    assert client.translate(SENTENCES[0], "en", "de") == offline[0]
    # Several sentences in one text: each searched as its own line, joined back.
    assert client.translate(" ".join(SENTENCES[:2]), "en", "de") == " ".join(offline[:2])
    detected = client.detect("Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad.")
    assert detected[0]["language"] == "de" and 50 < detected[0]["confidence"] <= 100
    assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": []}]


def test_mastodon_s_html_request_keeps_the_markup(server, offline):
    # app/lib/translation_service/libre_translate.rb: JSON {q, source, target, format: "html",
    # api_key}; it reads translatedText.
    status_html = (f"<p>{SENTENCES[0]} {SENTENCES[1]}</p><p>{SENTENCES[2]}<br>"
                   f"<a href=\"https://example.org/@a?x=1&amp;y=2\" class=\"u-url\">"
                   f"{SENTENCES[3]}</a></p>")
    status, _, reply = request(server.url + "/translate", {
        "q": status_html, "source": "en", "target": "de", "format": "html", "api_key": KEY})
    assert status == 200, reply
    t = [html.escape(text, quote=False) for text in offline]
    assert reply == {"translatedText": (
        f"<p>{t[0]} {t[1]}</p><p>{t[2]}<br><a href=\"https://example.org/@a?x=1&amp;y=2\" "
        f"class=\"u-url\">{t[3]}</a></p>")}


def test_mastodon_gets_403_for_a_missing_or_unknown_key(server):
    body = {"q": "<p>A girl.</p>", "source": "en", "target": "de", "format": "html"}
    for key in ("", "not-a-key"):
        status, _, reply = request(server.url + "/translate", {**body, "api_key": key})
        assert status == 403, reply
    assert "api_key" in request(server.url + "/translate", body)[2]["error"]


def test_searxng_s_request_gets_vtx_translate_s_nbest_as_alternatives(
        server, trained_checkpoint, tmp_path):
    # searx/engines/libretranslate.py: JSON {q, source, target, alternatives: 3, api_key}.
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[1], "source": "en", "target": "de", "alternatives": 3, "api_key": KEY})
    assert status == 200, reply
    [record] = translate_jsonl(trained_checkpoint, tmp_path, SENTENCES[1:2], "--nbest", 4)
    texts = [hypothesis["text"] for hypothesis in record["hypotheses"]]
    assert reply["translatedText"] == texts[0]
    assert reply["alternatives"] == [t for t in dict.fromkeys(texts[1:]) if t != texts[0]]


def test_weblate_s_form_and_json_requests(server, offline):
    # weblate/machinery/libretranslate.py: GET /languages; a form POST (up to Weblate 4.x);
    # JSON with a list of texts (Weblate 5).
    status, _, languages = request(server.url + "/languages")
    assert status == 200 and [language["code"] for language in languages] == ["en", "de"]
    status, _, reply = request(server.url + "/translate", form({
        "api_key": KEY, "q": SENTENCES[2], "source": "en", "target": "de"}), headers=FORM)
    assert (status, reply) == (200, {"translatedText": offline[2]})
    status, _, reply = request(server.url + "/translate", {
        "api_key": KEY, "q": SENTENCES, "source": "en", "target": "de"})
    assert (status, reply) == (200, {"translatedText": offline})


def test_a_multipart_form_is_read_as_libretranslate_reads_it(server, offline):
    boundary = "vtxboundary"
    fields = {"q": SENTENCES[3], "source": "en", "target": "de", "api_key": KEY}
    body = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                   f"{value}\r\n" for name, value in fields.items()) + f"--{boundary}--\r\n"
    status, _, reply = request(server.url + "/translate", body.encode(), headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert (status, reply) == (200, {"translatedText": offline[3]})


def test_auto_source_says_the_detected_language(server, offline):
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[:2], "source": "auto", "target": "de", "api_key": KEY})
    assert status == 200, reply
    assert reply["translatedText"] == offline[:2]
    assert [d["language"] for d in reply["detectedLanguage"]] == ["en", "en"]
    assert all(0 < d["confidence"] <= 100 for d in reply["detectedLanguage"])
    status, _, reply = request(server.url + "/translate", {
        "q": "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad.", "source": "auto",
        "target": "de", "api_key": KEY})
    assert status == 400
    assert reply["error"].startswith("detected 'de' for source 'auto' and target 'de': this "
                                     "server translates 'en' (English) into 'de' (German) only")


def test_a_request_s_glossary_constrains_as_vtx_translate_s(server, trained_checkpoint,
                                                             tmp_path):
    pairs = [["snow", "Eis"], ["bike", "Rad"]]
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[:2], "source": "en", "target": "de", "api_key": KEY, "glossary": pairs})
    assert status == 200, reply
    (tmp_path / "glossary.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    offline = translate_jsonl(trained_checkpoint, tmp_path, SENTENCES[:2], "--glossary",
                              tmp_path / "glossary.tsv")
    assert reply["translatedText"] == [record["hypotheses"][0]["text"] for record in offline]
    assert "Eis" in reply["translatedText"][1]


@pytest.mark.parametrize("body, headers, status, reason", [
    ({"q": "A man.", "source": "fr", "target": "de"}, {}, 400,
     "source 'fr' and target 'de': this server translates 'en' (English) into 'de'"),
    ({"q": "A man.", "source": "en", "target": "es"}, {}, 400, "target 'es': this server"),
    ({"source": "en", "target": "de"}, {}, 400, "Invalid request: missing q parameter"),
    ({"q": "A man.", "source": "en", "target": "de", "format": "pdf"}, {}, 400,
     '"pdf" format is not supported'),
    ({"q": "A man.", "source": "en", "target": "de", "alternatives": 4}, {}, 400,
     "alternatives (4) exceeds the server's limit of 3"),
    # Nine sentences in one text: nine lines of the job, over --max-lines 8.
    ({"q": "A man. " * 9, "source": "en", "target": "de"}, {}, 400,
     "field \"q's sentences\": 9 lines, over the server's limit of 8"),
    ({"q": [""] * 9, "source": "en", "target": "de"}, {}, 400,
     "q holds 9 texts, over the server's limit of 8 (--max-lines)"),
    # A form is what a web page of another site can post: its Origin is refused.
    (form({"q": "A man.", "source": "en", "target": "de"}),
     {**FORM, "Origin": "http://evil.example"}, 403, "Origin 'http://evil.example' is another"),
    (b"q=A+man.&source=en&target=de", {"Content-Type": "text/plain"}, 415,
     "send 'application/json' or 'application/x-www-form-urlencoded' or"),
])
def test_a_bad_request_gets_libretranslate_s_error_shape(server, body, headers, status,
                                                          reason):
    if isinstance(body, dict):
        body = {**body, "api_key": KEY}
    elif headers.get("Content-Type") == FORM["Content-Type"]:
        body += f"&api_key={KEY}".encode()
    got, _, reply = request(server.url + "/translate", body, headers=headers)
    assert got == status and list(reply) == ["error"]
    assert reason in reply["error"], reply


def test_frontend_settings_name_the_pair(server):
    status, _, settings = request(server.url + "/frontend/settings")
    assert status == 200
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "de", "name": "German"}}
    assert settings["apiKeys"] is True and settings["keyRequired"] is True


def test_an_address_past_req_limit_gets_429_and_a_server_without_languages_says_so(
        trained_checkpoint):
    process = ServerProcess("--checkpoint", trained_checkpoint, "--req-limit", 2)
    try:
        for path in ("/languages", "/frontend/settings"):
            status, _, reply = request(process.url + path)
            assert status == 404 and "--source-lang and --target-lang" in reply["error"]
        status, _, reply = request(process.url + "/translate", {
            "q": "A man.", "source": "en", "target": "de"})
        assert status == 404 and "--source-lang" in reply["error"]
        detect = lambda: request(process.url + "/detect", form({"q": "Ein Mann fährt Rad."}),
                                 headers=FORM)
        assert [detect()[0] for _ in range(2)] == [200, 200]
        status, headers, reply = detect()
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert reply["error"].startswith("Slowdown: 2 per 1 minute")
    finally:
        assert process.stop() == 0
