"""Several language pairs in one `vtx serve`: requests routed by source and target, each pair
answering as `vtx translate` of its model (or ensemble), and the `--model` flag's refusals.

The tests' one model stands for every pair: en-de and de-fr are it alone, de-en an ensemble
of it twice (its file, and its save directory); which pair searched a request, /metrics says
(`vtx_pair_lines_total`). en into fr goes through de (`--pivot`).
"""

import pytest
from click.testing import CliRunner

from tests.serve.test_libre import translate_file
from tests.serve.test_server import assert_same_records, translate_jsonl
from vtx.serve.process import ServerProcess, request
from vtx_cli.main import main

SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow."]
GERMAN = "Zwei Hunde spielen im Schnee und ein Mann fährt Fahrrad."


@pytest.fixture(scope="module")
def server(trained_checkpoint):
    process = ServerProcess("--model", f"en-de={trained_checkpoint}", "--model",
                            f"de-en={trained_checkpoint}", "--model",
                            f"de-en={trained_checkpoint.parent}", "--model",
                            f"de-fr={trained_checkpoint}", "--batch-wait-ms", 1,
                            "--max-beam", 4)
    yield process
    if process.process.poll() is None:
        process.process.kill()


@pytest.fixture(scope="module")
def offline(trained_checkpoint, tmp_path_factory):
    """`vtx translate --output-format jsonl` of SENTENCES and GERMAN by each pair's model(s)."""
    lines = SENTENCES + [GERMAN]
    return {"en-de": translate_jsonl(trained_checkpoint, tmp_path_factory.mktemp("en-de"), lines),
            "de-en": translate_jsonl(trained_checkpoint, tmp_path_factory.mktemp("de-en"), lines,
                                     "--checkpoint", trained_checkpoint.parent)}


def test_v1_translate_is_routed_by_model_or_source_and_target(server, offline):
    before = pair_lines(server)
    by_model = request(server.url + "/v1/translate", {"text": SENTENCES, "model": "en-de"})
    assert pair_lines(server) == {**before, "en-de": before["en-de"] + len(SENTENCES)}
    by_codes = request(server.url + "/v1/translate", {"text": SENTENCES, "source": "de",
                                                      "target": "en"})
    assert pair_lines(server) == {"en-de": before["en-de"] + len(SENTENCES),
                                  "de-en": before["de-en"] + len(SENTENCES)}
    assert (by_model[0], by_codes[0]) == (200, 200), (by_model, by_codes)
    assert_same_records(by_model[2]["translations"], offline["en-de"][:2])
    assert_same_records(by_codes[2]["translations"], offline["de-en"][:2])


def pair_lines(server) -> dict[str, float]:
    """Each pair's lines searched (/metrics), its queue checked empty."""
    _, _, text = request(server.url + "/metrics", raw=True)
    counted = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
               if line.startswith("vtx_pair_")}
    assert [counted[f'vtx_pair_queue_lines{{pair="{p}"}}'] for p in ("en-de", "de-en")] == [0, 0]
    return {p: counted[f'vtx_pair_lines_total{{pair="{p}"}}'] for p in ("en-de", "de-en")}


@pytest.mark.parametrize("fields, reason", [
    ({}, "this server translates several pairs: give field 'model' (one of en-de, de-en, "
         "de-fr)"),
    ({"model": "fr-de"}, "source 'fr' and target 'de': this server translates 'en' (English) "
                         "into 'de' (German), 'de' (German) into 'en' (English), 'de' "
                         "(German) into 'fr' (French) only"),
    ({"model": "en-fr"}, "source 'en' and target 'fr'"),  # /v1 translates by one pair only
    ({"model": "english"}, "field 'model': 'english' is no language pair"),
    ({"model": "en-de", "source": "de"}, "disagree"),
    ({"source": "en"}, "give field 'model'"),
    ({"model": 7}, "field 'model': expected a string, got 7"),
])
def test_an_unknown_or_missing_pair_gets_400_listing_the_served_ones(server, fields, reason):
    status, _, reply = request(server.url + "/v1/translate", {"text": ["A man."], **fields})
    assert status == 400 and list(reply) == ["error"]
    assert reason in reply["error"], reply


def test_languages_info_and_the_log_list_every_pair(server):
    status, _, languages = request(server.url + "/languages")
    assert status == 200
    assert languages == [
        {"code": "en", "name": "English", "targets": ["de", "fr"], "pivots": {"fr": "de"}},
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "fr", "name": "French", "targets": []}]
    info = request(server.url + "/v1/info")[2]
    assert [(p["pair"], p["model"]["ensemble"]) for p in info["pairs"]] == [
        ("en-de", 1), ("de-en", 2), ("de-fr", 1)]
    assert info["pairs"][1]["limits"]["max_beam"] == 4 and info["limits"]["max_connections"]
    settings = request(server.url + "/frontend/settings")[2]
    assert settings["language"]["source"]["code"] == "en"
    log = "".join(server.stderr)
    for said in ("vtx serve: en-de: 1 checkpoint (", "vtx serve: de-en: 2 checkpoints ("):
        line = next(line for line in log.splitlines() if line.startswith(said))
        assert "parameters" in line and "loaded in" in line and "MiB resident" in line


def test_libretranslatepy_chooses_each_pair_and_auto_detects_among_them(server, offline):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    best = {pair: [r["hypotheses"][0]["text"] for r in records]
            for pair, records in offline.items()}
    assert client.translate(SENTENCES[0], "en", "de") == best["en-de"][0]
    assert client.translate(GERMAN, "de", "en") == best["de-en"][2]
    status, _, reply = request(server.url + "/translate", {"q": GERMAN, "source": "auto",
                                                           "target": "en"})
    assert status == 200, reply
    assert reply["translatedText"] == best["de-en"][2]
    assert reply["detectedLanguage"]["language"] == "de"
    status, _, reply = request(server.url + "/translate", {"q": GERMAN, "source": "auto",
                                                           "target": "de"})
    # In the target language already: answered as it is, as LibreTranslate does.
    assert (status, reply["translatedText"]) == (200, GERMAN)
    assert reply["detectedLanguage"]["language"] == "de"
    status, _, reply = request(server.url + "/translate", {"q": "A man.", "source": "en",
                                                           "target": "es"})
    assert (status, reply) == (400, {"error": "es is not supported"})  # LibreTranslate's words
    status, _, reply = request(server.url + "/translate", {"q": "A man.", "source": "fr",
                                                           "target": "en"})
    assert status == 400 and reply["error"].startswith(
        "English (en) is not available as a target language from French (fr)")


def test_through_a_middle_language_each_sentence_s_best_is_translated_on(server):
    # en into fr is en-de's best translation of each sentence, then de-fr's of it: what the two
    # pairs answer on their own for the same batches (in bfloat16 a line's output may depend on
    # its batch, so the expected answers are the server's own, not another process's).
    translate = lambda q, source, target, **fields: request(server.url + "/translate", {
        "q": q, "source": source, "target": target, **fields})
    legs = [translate(SENTENCES, "en", "de")]
    legs.append(translate(legs[0][2]["translatedText"], "de", "fr", alternatives=1))
    chained = translate(SENTENCES, "en", "fr", alternatives=1)
    assert [leg[0] for leg in legs] + [chained[0]] == [200, 200, 200], (legs, chained)
    assert chained[2] == legs[1][2]
    # A file too: its sentence through de.
    german = translate(SENTENCES[0], "en", "de")[2]["translatedText"]
    status, reply = translate_file(server.url, "a.txt", SENTENCES[0].encode(), {"target": "fr"})
    assert status == 200 and reply["translatedFileUrl"].endswith(".a_fr.txt"), reply
    _, _, text = request(reply["translatedFileUrl"], raw=True)
    assert text == translate(german, "de", "fr")[2]["translatedText"]
    status, _, reply = translate(SENTENCES[0], "en", "fr", glossary=[["man", "homme"]])
    assert status == 400 and "goes through de (two pairs)" in reply["error"], reply


def test_pairs_chain_through_the_first_middle_language_unless_pivots_are_off():
    from types import SimpleNamespace

    from vtx.serve.language import LanguagePair
    from vtx.serve.pairs import Pairs

    served = [SimpleNamespace(pair=LanguagePair(*codes)) for codes in (
        ("de", "en"), ("de", "it"), ("it", "fr"), ("en", "fr"), ("en", "es"))]
    pairs = Pairs(served)
    assert pairs.chain("de", "fr") == (served[0], served[3])  # --model order: en first
    assert pairs.chain("de", "en") is None  # a pair of its own
    assert pairs.chain("es", "fr") is None
    assert pairs.targets("de") == (["en", "it", "fr", "es"], {"fr": "en", "es": "en"})
    assert Pairs(served, pivot=False).chain("de", "fr") is None


@pytest.mark.parametrize("value, reason", [
    ("en-de", "'en-de': give PAIR=PATH"),
    ("=model.npz", "give PAIR=PATH"),
    ("ende={checkpoint}", "'ende' is no language pair"),
    ("en-de-fr={checkpoint}", "'en-de-fr' is no language pair"),
    ("pt-BR:en:de={checkpoint}", "'pt-BR:en:de' is no language pair"),
    ("en-en={checkpoint}", "the source and the target are both en"),
    ("e!-de={checkpoint}", "the source must be a language code such as 'en', got e!"),
    ("en-de=/no/such/run", "/no/such/run does not exist"),
])
def test_a_malformed_model_value_is_refused_naming_the_flag(trained_checkpoint, value, reason):
    value = value.format(checkpoint=trained_checkpoint)
    result = CliRunner().invoke(main, ["serve", "--model", value])
    assert result.exit_code == 2, result.output
    assert "--model" in result.output and reason in result.output, result.output


def test_flags_that_do_not_go_with_model_are_refused(trained_checkpoint):
    for flags, reason in (
            ([], "give --checkpoint PATH or --model PAIR=PATH"),
            (["--checkpoint", trained_checkpoint, "--model", f"en-de={trained_checkpoint}"],
             "not both"),
            (["--model", f"en-de={trained_checkpoint}", "--source-lang", "en", "--target-lang",
              "de"], "--model names each pair's languages")):
        result = CliRunner().invoke(main, ["serve", *map(str, flags)])
        assert result.exit_code == 2 and reason in result.output, result.output


def test_an_empty_save_dir_two_vocabularies_or_a_parser_or_glossary_beside_pairs_are_refused(
        trained_checkpoint, random_parser_checkpoint, tmp_path):
    (tmp_path / "glossary.tsv").write_text("snow\tEis\n")
    for flags, reason in (
            (["--model", f"en-de={trained_checkpoint}", "--model", f"de-en={tmp_path}"],
             f"--model de-en={tmp_path}: no checkpoint_*.npz in this directory"),
            (["--model", f"en-de={trained_checkpoint}", "--model", f"de-en={trained_checkpoint}",
              "--glossary", tmp_path / "glossary.tsv"],
             f"--glossary {tmp_path / 'glossary.tsv'}: a glossary is of one language pair"),
            (["--model", f"en-de={trained_checkpoint}", "--model",
              f"en-de={random_parser_checkpoint}"],
             f"--model en-de={trained_checkpoint} and --model en-de="
             f"{random_parser_checkpoint} have different vocabularies"),
            (["--model", f"en-de={trained_checkpoint}", "--model",
              f"en-ps={random_parser_checkpoint}"],
             f"--model en-ps={random_parser_checkpoint}: a parsing model")):
        result = CliRunner().invoke(main, ["serve", *map(str, flags)])
        assert result.exit_code == 1 and reason in result.output, result.output


def test_a_region_or_libretranslate_s_alias_names_the_served_language(server, offline):
    # en-US and de-AT are en and de (a region dropped); codes compared without case.
    status, _, reply = request(server.url + "/translate", {"q": SENTENCES[0], "source": "en-US",
                                                           "target": "DE-at"})
    assert (status, reply) == (200, {"translatedText": offline["en-de"][0]["hypotheses"][0][
        "text"]}), reply
    status, _, reply = request(server.url + "/translate", {"q": "A man.", "source": "en",
                                                           "target": "zh-Hans"})
    assert (status, reply) == (400, {"error": "zh-Hans is not supported"})


def test_served_codes_pair_names_and_the_detector_s_languages():
    from vtx.errors import ArgumentError
    from vtx.serve.language import Detector, LanguagePair, pair_of, served_code

    served = ["zh-Hans", "zt", "pt", "en", "nb"]
    assert [served_code(code, served) for code in ("zh", "ZH-cn", "zh-Hant", "zh-TW", "pt-BR",
                                                    "pt-PT", "EN-us", "es-419", "no", "fr")] == [
        "zh-Hans", "zh-Hans", "zt", "zt", "pt", "pt", "en", "es-419", "nb", "fr"]
    assert served_code("zh-Hant", ["zh"]) == "zh-Hant"  # a script is no region to drop
    assert served_code("pt-BR", ["pb", "pt"]) == "pb"  # LibreTranslate's former code first
    assert pair_of("en-de") == LanguagePair("en", "de")
    assert pair_of("pt-BR:en") == LanguagePair("pt-BR", "en")
    assert [LanguagePair("en", "de").name, LanguagePair("zh-Hans", "en").name] == [
        "en-de", "zh-Hans:en"]
    for name in ("en-de-fr", "pt-BR:en:de", "en:", "ende"):
        with pytest.raises(ArgumentError):
            pair_of(name)
    assert Detector(("zh-Hans", "pt-BR", "en")).languages == ("en", "pt", "zh")
