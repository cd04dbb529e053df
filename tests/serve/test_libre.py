"""LibreTranslate's API on `vtx serve`, called as real clients call it: libretranslatepy,
deep-translator, curl, and raw requests shaped as Mastodon's, SearXNG's, Weblate's and
Nextcloud's sources send them. Their translations are `vtx translate`'s of the same sentences,
both searched in float32 (in bfloat16 a line's output may depend on its batch partners)."""

import html
import io
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pytest

from tests.serve.test_files import FILES, contents, replaced
from tests.serve.test_hostile import health_during
from tests.serve.test_server import translate_jsonl
from vtx.serve.files import FORMATS
from vtx.serve.process import ServerProcess, request
from vtx.serve.requests import shown

KEY = "3c7a-test-key"
SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman is cooking.",
             "A group of people are standing in front of a building."]
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
FLOAT32 = ("--precision", "float32")


@pytest.fixture(scope="module")
def suggestions(tmp_path_factory):
    """The --suggestions file of `server` (not made yet)."""
    return tmp_path_factory.mktemp("suggestions") / "suggestions.jsonl"


@pytest.fixture(scope="module")
def server(trained_checkpoint, tmp_path_factory, suggestions):
    keys = tmp_path_factory.mktemp("keys") / "api_keys.txt"
    keys.write_text(f"# the test's client\n{KEY}\n")
    process = ServerProcess("--checkpoint", trained_checkpoint, "--source-lang", "en",
                            "--target-lang", "de", "--api-keys", keys, "--batch-wait-ms", 1,
                            "--suggestions", suggestions,
                            "--max-lines", 8, "--max-queue", 64, "--max-beam", 4, *FLOAT32,
                            "--keyless-origin", "http://127.0.0.1:*", "--cors-origin",
                            "moz-extension://*", "--cors-origin", "chrome-extension://*")
    yield process
    if process.process.poll() is None:
        process.process.kill()


@pytest.fixture(scope="module")
def offline(trained_checkpoint, tmp_path_factory):
    """`vtx translate`'s best translation of each of SENTENCES."""
    records = translate_jsonl(trained_checkpoint, tmp_path_factory.mktemp("offline"), SENTENCES,
                              *FLOAT32)
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


def test_api_keys_guard_v1_translate_and_spare_the_keyless_origin(server, offline):
    url, body = server.url + "/v1/translate", {"text": SENTENCES[:1]}
    status, _, reply = request(url, body)
    assert status == 403 and "'Authorization: Bearer KEY'" in reply["error"]
    for sent, headers in (({**body, "api_key": KEY}, {}),
                          (body, {"Authorization": f"Bearer {KEY}"}),
                          (body, {"Origin": server.url})):  # the page's own origin
        status, _, reply = request(url, sent, headers=headers)
        assert status == 200, (headers, reply)
        assert reply["translations"][0]["hypotheses"][0]["text"] == offline[0]
    assert request(url, {**body, "api_key": "not-a-key"})[2] == {"error": "invalid api key"}
    assert request(url, body, headers={"Authorization": "Bearer not-a-key"})[0] == 403
    assert request(url, {**body, "api_key": 5})[2] == {
        "error": "field 'api_key': expected a string, got 5"}
    # LibreTranslate's routes take the header too.
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[0], "source": "en", "target": "de"},
        headers={"Authorization": f"Bearer {KEY}"})
    assert (status, reply) == (200, {"translatedText": offline[0]})


def test_searxng_s_request_gets_vtx_translate_s_nbest_as_alternatives(
        server, trained_checkpoint, tmp_path):
    # searx/engines/libretranslate.py: JSON {q, source, target, alternatives: 3, api_key}.
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[1], "source": "en", "target": "de", "alternatives": 3, "api_key": KEY})
    assert status == 200, reply
    [record] = translate_jsonl(trained_checkpoint, tmp_path, SENTENCES[1:2], "--nbest", 4,
                               *FLOAT32)
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


def test_deep_translator_posts_its_fields_in_the_query_string(server, offline):
    # deep_translator/libre.py: requests.post(url + "translate", params={q, source, target,
    # format, api_key}): no body, no Content-Type.
    from deep_translator import LibreTranslator

    client = LibreTranslator(source="en", target="de", api_key=KEY, custom_url=server.url + "/")
    assert client.translate(SENTENCES[0]) == offline[0]
    assert client.translate_batch(SENTENCES[1:3]) == offline[1:3]


def test_a_form_s_query_field_wins_and_a_json_body_s_field_wins(server, offline):
    """As LibreTranslate: `request.values` puts a form's query string first; beside a JSON
    body it reads no query (vtx takes the query's fields that the body lacks)."""
    import requests

    query = {"q": SENTENCES[0], "source": "en", "target": "de", "api_key": KEY}
    for body, expected in (({"json": {"q": SENTENCES[1]}}, offline[1]),
                           ({"data": {"q": SENTENCES[1]}}, offline[0]),
                           ({"files": {"q": (None, SENTENCES[1])}}, offline[0])):
        reply = requests.post(server.url + "/translate", params=query, timeout=300, **body)
        assert (reply.status_code, reply.json()) == (200, {"translatedText": expected}), body
    # Nextcloud's detection: q in the query string of a bodiless POST.
    reply = requests.post(server.url + "/detect", params={
        "q": "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad.", "api_key": KEY},
        timeout=60)
    assert reply.status_code == 200 and reply.json()[0]["language"] == "de"


def test_curl_s_multipart_form_of_non_ascii_text_is_read_as_utf_8(
        server, trained_checkpoint, tmp_path):
    # Nextcloud's LibreTranslate app posts multipart forms from PHP's curl: parts that declare
    # no charset, as `curl -F` sends them.
    text = "Grüße aus der Straße am Fluß."
    [record] = translate_jsonl(trained_checkpoint, tmp_path, [text], *FLOAT32)
    answer = subprocess.run(
        ["curl", "-sS", "-F", f"q={text}", "-F", "source=en", "-F", "target=de", "-F",
         f"api_key={KEY}", server.url + "/translate"], capture_output=True, check=True,
        timeout=300).stdout
    assert json.loads(answer) == {"translatedText": record["hypotheses"][0]["text"]}


def multipart(*parts: tuple[str, str, bytes]) -> tuple[bytes, dict]:
    """A multipart form of (name, the part's own headers, value) parts, and its headers."""
    body = b"".join(f"--vtxboundary\r\nContent-Disposition: form-data; name=\"{name}\""
                    f"\r\n{headers}\r\n".encode() + value + b"\r\n"
                    for name, headers, value in (("source", "", b"en"), ("target", "", b"de"),
                                                 ("api_key", "", KEY.encode()), *parts))
    return body + b"--vtxboundary--\r\n", {
        "Content-Type": "multipart/form-data; boundary=vtxboundary"}


@pytest.mark.parametrize("part, reason", [
    (("q", "Content-Type: text/plain; charset=x-klingon\r\n", b"A man."),
     "form field \"q\": charset \"x-klingon\" is unknown"),
    (("q", "Content-Type: text/plain; charset=utf-8\r\n", b"A \xff man."),
     "form field \"q\" is no utf-8 text"),
    (("q", "Content-Type: multipart/mixed; boundary=inner\r\n",
      b"--inner\r\nContent-Type: text/plain\r\n\r\nA man.\r\n--inner--"),
     "form field \"q\" is a multipart/mixed part"),
    (("q", "Content-Type: application/octet-stream\r\n", b"A man."),
     "form field \"q\" is a file"),
])
def test_a_multipart_part_of_an_unknown_charset_or_kind_gets_400(server, part, reason):
    body, headers = multipart(part)
    status, _, reply = request(server.url + "/translate", body, headers=headers)
    assert status == 400 and reply["error"].startswith(reason), reply
    # A part of a charset Python knows is read in it.
    body, headers = multipart(("q", "Content-Type: text/plain; charset=latin-1\r\n",
                               SENTENCES[0].encode("latin-1")))
    assert request(server.url + "/translate", body, headers=headers)[0] == 200


def test_a_post_is_routed_before_its_content_type_is_checked(server):
    import requests

    reply = requests.post(server.url + "/languages", timeout=60)
    assert reply.status_code == 405 and reply.headers["Allow"] == "GET,HEAD"
    assert reply.json() == {"error": "POST /languages: use GET, HEAD"}
    reply = requests.post(server.url + "/translat", data={"q": "A man."}, timeout=60)
    assert reply.status_code == 404 and reply.json() == {"error": "no such route: /translat"}
    # /v1's routes take JSON only, bodiless or not.
    assert requests.post(server.url + "/v1/translate", timeout=60).status_code == 415


def test_auto_source_says_the_detected_language(server, offline):
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[:2], "source": "auto", "target": "de", "api_key": KEY})
    assert status == 200, reply
    assert reply["translatedText"] == offline[:2]
    assert [d["language"] for d in reply["detectedLanguage"]] == ["en", "en"]
    assert all(0 < d["confidence"] <= 100 for d in reply["detectedLanguage"])
    status, _, reply = request(server.url + "/translate", {
        "q": "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad.", "source": "auto",
        "target": "en", "api_key": KEY})
    assert status == 400
    assert reply["error"].startswith("detected 'de' for source 'auto' and target 'en': this "
                                     "server translates 'en' (English) into 'de' (German) only")


def test_detect_takes_a_list_of_texts_as_libretranslate_does(server):
    german = "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad."
    status, _, reply = request(server.url + "/detect", {
        "q": [german, german, SENTENCES[3]], "api_key": KEY})
    assert status == 200, reply
    assert reply[0]["language"] == "de" and "en" in [item["language"] for item in reply]
    assert all(0 < item["confidence"] <= 100 for item in reply)
    assert len({item["language"] for item in reply}) == len(reply)  # each language once
    status, _, reply = request(server.url + "/detect", {"q": ["A man."] * 9, "api_key": KEY})
    assert status == 400 and "q holds 9 texts, over the server's limit of 8" in reply["error"]


def test_a_text_in_the_target_language_or_of_no_letter_is_answered_as_it_is(server, offline):
    german = "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad."
    texts = [german, "😀 🎉", SENTENCES[3], "42 !"]  # each over 40 characters, or of no letter
    status, _, reply = request(server.url + "/translate", {
        "q": texts, "source": "auto", "target": "de", "api_key": KEY, "alternatives": 2})
    assert status == 200, reply
    assert reply["translatedText"] == [german, "😀 🎉", offline[3], "42 !"]
    assert reply["alternatives"][:2] == [[], []] and reply["alternatives"][3] == []
    assert [d["language"] for d in reply["detectedLanguage"]] == ["de", "de", "en", "de"]
    assert reply["detectedLanguage"][1] == {"confidence": 0.0, "language": "de"}
    for source, target in (("de", "de"), ("en", "EN")):  # as LibreTranslate: identity
        status, _, reply = request(server.url + "/translate", {
            "q": [german, "<p>A man.</p>"], "source": source, "target": target,
            "api_key": KEY})
        assert (status, reply) == (200, {"translatedText": [german, "<p>A man.</p>"]})
    status, _, reply = request(server.url + "/translate", {
        "q": "Un homme.", "source": "fr", "target": "fr", "api_key": KEY})
    assert (status, reply) == (400, {"error": "fr is not supported"})
    # An emoji-only text with a source named is not searched either.
    status, _, reply = request(server.url + "/translate", {
        "q": "😀", "source": "en", "target": "de", "api_key": KEY, "glossary": [["a", "b"]]})
    assert (status, reply) == (200, {"translatedText": "😀"})


def test_a_request_s_glossary_constrains_as_vtx_translate_s(server, trained_checkpoint,
                                                             tmp_path):
    pairs = [["snow", "Eis"], ["bike", "Rad"]]
    status, _, reply = request(server.url + "/translate", {
        "q": SENTENCES[:2], "source": "en", "target": "de", "api_key": KEY, "glossary": pairs})
    assert status == 200, reply
    (tmp_path / "glossary.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    offline = translate_jsonl(trained_checkpoint, tmp_path, SENTENCES[:2], "--glossary",
                              tmp_path / "glossary.tsv", *FLOAT32)
    assert reply["translatedText"] == [record["hypotheses"][0]["text"] for record in offline]
    assert "Eis" in reply["translatedText"][1]


@pytest.mark.parametrize("body, headers, status, reason", [
    # LibreTranslate's words, which its API tests read.
    ({"q": "A man.", "source": "fr", "target": "de"}, {}, 400, "fr is not supported"),
    ({"q": "A man.", "source": "en", "target": "zz"}, {}, 400, "zz is not supported"),
    ({"q": "A man.", "source": "de", "target": "en"}, {}, 400,
     "English (en) is not available as a target language from German (de): this server "
     "translates 'en' (English) into 'de' (German) only"),
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
    ({"q": ["<b>A man.</b>" * 2500] * 2 + ["<p>"], "source": "en", "target": "de",
      "format": "html"}, {}, 400,
     "q's html holds 10001 tags ('<'), over the server's limit of 10000 (--max-html-tags)"),
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


@pytest.mark.parametrize("field, value", [
    *(("alternatives", value) for value in (
        None, [], {}, [1], "x", True, 1.5, -1, 10 ** 30, -10 ** 30, "-2", 1e300)),
    *(("q", value) for value in ({"a": 1}, 5, 1.5, True, [1, 2], [None], [["A man."]],
                                 ["A man.", {}])),
    *((name, value) for name in ("source", "target") for value in (5, ["en"], {"a": 1}, True)),
    *(("format", value) for value in (5, ["html"], {"a": "text"}, True, "pdf")),
    *(("api_key", value) for value in (5, [KEY], {"key": KEY}, True)),
    *(("glossary", value) for value in (None, "x", 5, {"a": "b"}, [["a"]], [[1, 2]],
                                        [["a", "b", "c"]], [None], "[[\"a\", \"b\"]]")),
])
def test_a_json_field_of_the_wrong_shape_gets_400_naming_it(server, field, value):
    body = {"q": "A man.", "source": "en", "target": "de", "api_key": KEY, field: value}
    status, _, reply = request(server.url + "/translate", body)
    assert status == 400 and list(reply) == ["error"], reply
    assert field in reply["error"] and shown(value) in reply["error"], reply
    if field == "q":
        status, _, reply = request(server.url + "/detect", {"q": value, "api_key": KEY})
        assert status == 400 and "'q'" in reply["error"] and shown(value) in reply["error"]


@pytest.mark.parametrize("field, value", [
    ("alternatives", "x"), ("alternatives", "1.5"), ("alternatives", "-1"),
    ("alternatives", "1e3"), ("alternatives", "9" * 5000), ("alternatives", ""),
    ("glossary", "not json"), ("glossary", "[[1, 2]]"), ("glossary", "{\"a\": \"b\"}"),
    ("glossary", "[" * 100_000), ("format", "pdf"),
])
def test_a_form_field_of_the_wrong_shape_gets_400_naming_it(server, field, value):
    body = form({"q": "A man.", "source": "en", "target": "de", "api_key": KEY, field: value})
    status, _, reply = request(server.url + "/translate", body, headers=FORM)
    assert status == 400 and list(reply) == ["error"], reply
    assert field in reply["error"] and value[:40] in reply["error"], reply


def preflight(url: str, origin: str) -> tuple[int, dict]:
    """A browser's CORS preflight of a JSON POST with an api key header, from `origin`."""
    reply = urllib.request.urlopen(urllib.request.Request(url, method="OPTIONS", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"}), timeout=60)
    return reply.status, dict(reply.headers)


def test_a_browser_extension_s_origin_gets_cors_and_another_site_s_nothing(server, offline):
    # translate-tools' Linguist and Chrome's LibreTranslate extensions: fetch() from
    # moz-extension:// or chrome-extension:// pages, preflighted for JSON and Authorization.
    origin = "moz-extension://0b5e7c2a-4d1f-4f3e-9c55-1d2e3f4a5b6c"
    status, headers = preflight(server.url + "/translate", origin)
    assert status == 204 and headers["Access-Control-Allow-Origin"] == origin
    assert headers["Access-Control-Allow-Methods"] == "POST"
    assert {"Authorization", "Content-Type"} <= {
        name.strip() for name in headers["Access-Control-Allow-Headers"].split(",")}
    for origin in (origin, "chrome-extension://abcdefghijklmnopabcdefghijklmnop"):
        status, headers, reply = request(server.url + "/translate", {
            "q": SENTENCES[0], "source": "en", "target": "de"}, headers={
            "Origin": origin, "Authorization": f"Bearer {KEY}"})
        assert (status, reply) == (200, {"translatedText": offline[0]})
        assert headers["Access-Control-Allow-Origin"] == origin and headers["Vary"] == "Origin"
        # A refusal is readable too, and so are the GET routes.
        status, headers, reply = request(server.url + "/translate", {"q": "A man."},
                                         headers={"Origin": origin})
        assert status == 403 and headers["Access-Control-Allow-Origin"] == origin
        status, headers, _ = request(server.url + "/languages", headers={"Origin": origin})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == origin
    # Another site's page: no preflight granted, no answer readable, its POST refused.
    with pytest.raises(urllib.error.HTTPError) as refused:
        preflight(server.url + "/translate", "https://evil.example")
    assert refused.value.code == 405
    assert "Access-Control-Allow-Origin" not in refused.value.headers
    status, headers, _ = request(server.url + "/translate", {
        "q": "A man.", "source": "en", "target": "de", "api_key": KEY},
        headers={"Origin": "https://moz-extension.evil.example"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers


def test_frontend_settings_name_the_pair(server):
    status, _, settings = request(server.url + "/frontend/settings")
    assert status == 200
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "de", "name": "German"}}
    assert settings["apiKeys"] is True and settings["keyRequired"] is True
    assert settings["suggestions"] is True  # --suggestions


def test_an_address_past_req_limit_gets_429_and_a_server_without_languages_says_so(
        trained_checkpoint, monkeypatch):
    # Its files translation turned off from the environment, as a compose file would.
    monkeypatch.setenv("VTX_SERVE_DISABLE_FILES_TRANSLATION", "1")
    process = ServerProcess("--checkpoint", trained_checkpoint, "--req-limit", 2)
    try:
        assert translate_file(process.url, "a.txt", b"A man.") == (
            403, {"error": "Files translation are disabled on this server."})
        for path in ("/languages", "/frontend/settings"):
            status, _, reply = request(process.url + path)
            assert status == 404 and "--source-lang and --target-lang" in reply["error"]
        status, _, reply = request(process.url + "/translate", {
            "q": "A man.", "source": "en", "target": "de"})
        assert status == 404 and "--source-lang" in reply["error"]
        # Without a keys file every key is made up: each buys no bucket of its own.
        detect = lambda key: request(process.url + "/detect", form({
            "q": "Ein Mann fährt Rad.", "api_key": key}), headers=FORM)
        assert [detect(f"made-up-{i}")[0] for i in range(2)] == [200, 200]
        status, headers, reply = detect("made-up-2")
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert reply["error"].startswith("Slowdown: 2 per 1 minute")
        assert request(process.url + "/v1/translate", {"text": ["A man."]})[0] == 429
    finally:
        assert process.stop() == 0


def test_with_api_keys_optional_a_keyless_client_translates_under_req_limit(
        trained_checkpoint, tmp_path, monkeypatch):
    # As LibreTranslate with --api-keys: a key is asked of no one, a made-up one is refused.
    keys = tmp_path / "api_keys.txt"
    keys.write_text(f"{KEY} req_limit=10\n")
    monkeypatch.setenv("VTX_SERVE_API_KEYS_OPTIONAL", "1")  # as a compose file would
    process = ServerProcess("--checkpoint", trained_checkpoint, "--source-lang", "en",
                            "--target-lang", "de", "--api-keys", keys, "--req-limit", 2)
    try:
        settings = request(process.url + "/frontend/settings")[2]
        assert (settings["apiKeys"], settings["keyRequired"]) == (True, False)
        body = {"q": "A man.", "source": "en", "target": "de"}
        assert [request(process.url + "/translate", body)[0] for _ in range(3)] == [
            200, 200, 429]
        assert request(process.url + "/translate", {**body, "api_key": KEY})[0] == 200
        assert request(process.url + "/translate", {**body, "api_key": "made-up"})[2] == {
            "error": "invalid api key"}
    finally:
        assert process.stop() == 0


FILE_TTL = 3  # seconds the open server keeps a translated file


@pytest.fixture(scope="module")
def open_server(trained_checkpoint):
    """A server of no api keys, as LibreTranslate's own tests start theirs."""
    process = ServerProcess("--checkpoint", trained_checkpoint, "--source-lang", "en",
                            "--target-lang", "de", "--batch-wait-ms", 1, "--file-ttl", FILE_TTL)
    yield process
    if process.process.poll() is None:
        process.process.kill()


# LibreTranslate 1.9.6's API tests (libretranslate/tests/test_api/), sent over HTTP as its
# Flask test client sends them; its pair en-es is this server's en-de.
TRANSLATE = {"q": "Hello", "source": "en", "target": "de", "format": "text"}
LIBRETRANSLATE_API_TESTS = {
    "test_api_detect_language": ("POST", "/detect", {"data": {"q": "Hello"}}, 200,
                                 lambda reply: {"confidence", "language"} <= set(reply[0])),
    "test_api_detect_language_must_fail_without_parameters": (
        "POST", "/detect", {}, 400, lambda reply: "error" in reply),
    "test_api_detect_language_must_fail_bad_request_type": ("GET", "/detect", {}, 405, None),
    "test_api_get_frontend_settings": ("GET", "/frontend/settings", {}, 200, None),
    "test_api_get_languages": ("GET", "/languages", {}, 200,
                               lambda reply: {"code", "name"} <= set(reply[0])),
    "test_api_get_languages_must_fail_bad_request_type": ("POST", "/languages", {}, 405, None),
    "test_api_get_health": ("GET", "/health", {}, 200, lambda reply: reply == {"status": "ok"}),
    "test_api_health_must_fail_bad_request_type": ("POST", "/health", {}, 405, None),
    "test_api_translate": ("POST", "/translate", {"data": TRANSLATE}, 200,
                           lambda reply: "translatedText" in reply),
    "test_api_translate_batch": (
        "POST", "/translate", {"json": {**TRANSLATE, "q": ["Hello", "World"]}}, 200,
        lambda reply: isinstance(reply["translatedText"], list)
        and len(reply["translatedText"]) == 2),
    "test_api_translate_unsupported_language": (
        "POST", "/translate", {"data": {**TRANSLATE, "target": "zz"}}, 400,
        lambda reply: reply["error"] == "zz is not supported"),
    "test_api_translate_missing_parameter": (
        "POST", "/translate", {"data": {**TRANSLATE, "q": None}}, 400,
        lambda reply: reply["error"] == "Invalid request: missing q parameter"),
    "test_api_get_spec": ("GET", "/spec", {}, 200, lambda reply: reply["swagger"] == "2.0"),
    "test_api_get_spec_must_fail_bad_request_type": ("POST", "/spec", {}, 405, None),
}


@pytest.mark.parametrize("name", LIBRETRANSLATE_API_TESTS)
def test_libretranslate_s_own_api_tests_pass(open_server, name):
    import requests

    method, path, sent, status, check = LIBRETRANSLATE_API_TESTS[name]
    reply = requests.request(method, open_server.url + path, timeout=300, **sent)
    assert reply.status_code == status, reply.text
    assert check is None or check(reply.json()), reply.text


SUGGESTION = {"q": "A man.", "s": "Ein Mann.", "source": "en", "target": "de"}


def test_suggest_is_disabled_without_the_flag(open_server):
    status, _, reply = request(open_server.url + "/suggest", SUGGESTION)
    assert (status, reply) == (403, {"error": "Suggestions are disabled on this server."})
    assert request(open_server.url + "/frontend/settings")[2]["suggestions"] is False


def test_suggestions_are_appended_as_json_lines_behind_the_keys(server, suggestions):
    url = server.url + "/suggest"
    assert request(url, SUGGESTION)[0] == 403  # no key
    for headers in ({}, {"Authorization": f"Bearer {KEY}"}):
        status, _, reply = request(url, {**SUGGESTION, "api_key": KEY} if not headers
                                   else SUGGESTION, headers=headers)
        assert (status, reply) == (200, {"success": True})
    status, _, reply = request(url, form({**SUGGESTION, "q": "Zwei Hunde.", "s": "Two dogs.",
                                          "source": "de", "target": "en", "api_key": KEY}),
                               headers=FORM)
    assert (status, reply) == (200, {"success": True})
    for body, reason in (({**SUGGESTION, "s": 5}, "field 's': expected a string, got 5"),
                         ({**SUGGESTION, "s": ""}, "Invalid request: missing s parameter"),
                         ({**SUGGESTION, "target": "fr"}, '"fr" is not supported'),
                         ({**SUGGESTION, "q": "a" * 10_001}, "field 'q': 10001 characters")):
        status, _, reply = request(url, {**body, "api_key": KEY})
        assert status == 400 and reply["error"].startswith(reason), reply
    lines = [json.loads(line) for line in suggestions.read_text(encoding="utf-8").splitlines()]
    assert [{k: v for k, v in line.items() if k != "time"} for line in lines] == [
        SUGGESTION, SUGGESTION, {"q": "Zwei Hunde.", "s": "Two dogs.", "source": "de",
                                 "target": "en"}]
    assert all(set(line) == {*SUGGESTION, "time"} and line["time"].endswith("Z")
               for line in lines)


# A request that holds every required field of a route, each of its kind.
REQUIRED = {"/translate": {"q": "A man.", "source": "en", "target": "de"},
            "/detect": {"q": "A man."}, "/suggest": SUGGESTION,
            "/v1/translate": {"text": ["A man."]}}


def test_spec_declares_every_route_and_the_fields_the_routes_read(server):
    status, _, spec = request(server.url + "/spec")
    assert status == 200 and spec["swagger"] == "2.0"
    assert {(path, method) for path, methods in spec["paths"].items() for method in methods} == {
        ("/", "get"), ("/v1/translate", "post"), ("/v1/parse", "post"), ("/v1/info", "get"),
        ("/translate", "post"), ("/detect", "post"), ("/suggest", "post"),
        ("/translate_file", "post"), ("/download_file/{name}", "get"), ("/languages", "get"),
        ("/frontend/settings", "get"), ("/health", "get"),
        ("/metrics", "get"), ("/spec", "get")}
    for path, fields in REQUIRED.items():
        parameters = spec["paths"][path]["post"]["parameters"]
        if parameters[0]["in"] == "body":
            schema = parameters[0]["schema"]
            required, names = schema["required"], list(schema["properties"])
        else:
            required = [p["name"] for p in parameters if p["required"]]
            names = [p["name"] for p in parameters]
        assert sorted(required) == sorted(fields), path
        # Each required field missing gets 400 naming it; all of them, an answer.
        for name in required:
            body = {key: value for key, value in fields.items() if key != name}
            status, _, reply = request(server.url + path, {**body, "api_key": KEY})
            assert status == 400 and name in reply["error"], (path, name, reply)
        assert request(server.url + path, {**fields, "api_key": KEY})[0] == 200, path
        if path == "/v1/translate":  # the fields it takes are the spec's
            reply = request(server.url + path, {**fields, "api_key": KEY, "x": 1})[2]
            assert reply["error"].split("the fields are: ")[1].split(", ") == names


def translate_file(url: str, name: str, data: bytes, fields: dict | None = None,
                   **sent) -> tuple[int, dict]:
    """POST /translate_file of `data` named `name`, en to de, as LibreTranslate's page sends it
    (a multipart form, by `requests`)."""
    import requests

    reply = requests.post(url + "/translate_file", files={"file": (name, data)}, timeout=300,
                          data={"source": "en", "target": "de", **(fields or {})}, **sent)
    return reply.status_code, reply.json()


@pytest.mark.parametrize("extension", FILES)
def test_a_file_is_translated_as_translate_translates_its_sentences(server, offline, extension):
    import requests

    data = FILES[extension]()
    status, reply = translate_file(server.url, "report" + extension, data, {"api_key": KEY})
    assert status == 200 and list(reply) == ["translatedFileUrl"], reply
    url = reply["translatedFileUrl"]  # of the Host the request named; no path of the server
    assert url.startswith(server.url + "/download_file/") and url.endswith(
        ".report_de" + extension)
    download = requests.get(url, timeout=60)
    assert download.status_code == 200
    assert download.headers["Content-Type"] == FORMATS[extension][0]
    assert download.headers["Content-Disposition"].startswith(
        f'attachment; filename="report_de{extension}"')
    escape = (lambda text: html.escape(text, quote=False)) if extension == ".html" else str
    translations = {sentence: escape(text) for sentence, text in zip(SENTENCES, offline)}
    assert contents(extension, download.content) == replaced(contents(extension, data),
                                                             translations)


def multipart_fields(**fields) -> dict:
    """`requests`' `files` of form fields that are no file."""
    return {name: (None, value) for name, value in fields.items()}


def test_a_bad_file_request_gets_libretranslate_s_error(server):
    import requests

    zip_bomb = io.BytesIO()
    with zipfile.ZipFile(zip_bomb, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("word/document.xml", b"\0" * (50 << 20))
    for name, data, reason in [
            ("a.pdf", b"%PDF", "Invalid request: file format not supported"),
            ("a", b"x", "Invalid request: file format not supported"),
            ("", b"x", "Invalid request: empty file"),
            ("a.docx", zip_bomb.getvalue(), "times, over the server's limit of 100"),
            ("a.txt", b"a" * ((10 << 20) + 1), "over the server's limit of 10485760 "
                                                "(--max-file-bytes)"),
            ("a.txt", b"A man. " * 9, "field \"file's sentences\": 9 lines, over the server's "
                                      "limit of 8")]:
        status, reply = translate_file(server.url, name, data, {"api_key": KEY})
        assert status == 400 and reason in reply["error"], (name, reply)
    for files, reason in [(multipart_fields(source="en", target="de"), "missing file parameter"),
                          ({"file": ("a.txt", b"A man."), **multipart_fields(source="en")},
                           "missing target parameter")]:
        reply = requests.post(server.url + "/translate_file", timeout=60,
                              files={**files, **multipart_fields(api_key=KEY)})
        assert reply.status_code == 400 and reason in reply.json()["error"], reply.text
    status, _, reply = request(server.url + "/translate_file", {"file": "a"})
    assert status == 415 and "'multipart/form-data'" in reply["error"]


def test_api_keys_guard_translate_file(server):
    for fields, error in [({}, "this server asks for an api key"),
                          ({"api_key": "not-a-key"}, "invalid api key")]:
        status, reply = translate_file(server.url, "a.txt", b"A man.", fields)
        assert status == 403 and error in reply["error"], reply
    status, reply = translate_file(server.url, "a.txt", b"A man.",
                                   headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200, reply


def test_a_sent_name_s_folders_are_dropped(server):
    import requests

    status, reply = translate_file(server.url, "../../etc/cron.d/a.txt", b"A man.",
                                   {"api_key": KEY})
    assert status == 200 and ".." not in reply["translatedFileUrl"]
    download = requests.get(reply["translatedFileUrl"], timeout=60)
    assert download.headers["Content-Disposition"].startswith('attachment; filename="a_de.txt"')


def test_frontend_settings_list_the_file_formats(server):
    settings = request(server.url + "/frontend/settings")[2]
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".docx", ".pptx", ".odt",
                                                ".odp"]


def test_a_translated_file_is_gone_after_its_ttl(open_server):
    import requests

    status, reply = translate_file(open_server.url, "a.txt", b"A man.")
    assert status == 200, reply
    started = time.monotonic()
    assert requests.get(reply["translatedFileUrl"], timeout=60).status_code == 200
    time.sleep(max(0.0, FILE_TTL + 0.5 - (time.monotonic() - started)))
    gone = requests.get(reply["translatedFileUrl"], timeout=60)
    assert gone.status_code == 404 and "--file-ttl 3 s" in gone.json()["error"]
    assert requests.get(open_server.url + "/download_file/made-up", timeout=60).status_code \
        == 404


def test_health_answers_while_a_large_file_is_read(server):
    import random

    # 150,000 paragraphs of digits (no letter: kept): seconds of reading and writing, under
    # --max-file-bytes and the zip's limits.
    digits = random.Random(0)
    paragraphs = "".join(f"<w:p><w:r><w:t>{digits.randrange(10 ** 12)}</w:t></w:r></w:p>"
                         for _ in range(150_000))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("word/document.xml", f'<w:document xmlns:w="http://schemas.'
                         f'openxmlformats.org/wordprocessingml/2006/main"><w:body>{paragraphs}'
                         f'</w:body></w:document>')
    (status, reply), waits, seconds = health_during(
        server.url, lambda: translate_file(server.url, "a.docx", out.getvalue(),
                                           {"api_key": KEY}))
    assert status == 200, reply
    assert waits and max(waits) < max(1.0, seconds / 4), waits
