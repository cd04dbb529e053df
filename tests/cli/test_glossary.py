"""`vtx translate --glossary`: the terms found in a line are its constraints."""

import json

import pytest
from click.testing import CliRunner

from vtx_cli.main import main


def translate(*args):
    result = CliRunner().invoke(main, ["translate", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def test_a_glossary_gives_the_constraints_of_the_terms_found(trained_checkpoint, tmp_path):
    (tmp_path / "source.en").write_text("Two dogs play in the snow.\nA man in the snowy street.\n"
                                        "A dog and a cat.\n")
    # With a byte order mark, as some editors write: it is not part of the first term.
    (tmp_path / "glossary.tsv").write_text("snow\tEis\ndog\tHund\ncat\tKatze\n",
                                           encoding="utf-8-sig")
    # What the glossary implies: "snowy" and "dogs" are other words.
    (tmp_path / "constraints.de").write_text("Eis\n\nHund\tKatze\n")
    common = ["--checkpoint", trained_checkpoint, "--input", tmp_path / "source.en",
              "--output-format", "jsonl"]
    glossed = translate(*common, "--glossary", tmp_path / "glossary.tsv").stdout
    assert glossed == translate(*common, "--constraints", tmp_path / "constraints.de").stdout
    best = [json.loads(line)["hypotheses"][0]["text"] for line in glossed.splitlines()]
    assert "Eis" in best[0] and "Hund" in best[2] and "Katze" in best[2]


@pytest.mark.parametrize("glossary, flags, message", [
    ("snow\tEis\nsun\n", [], "{path} line 2: expected a source term and a target term"),
    ("snow\tEis\nsun\t\u200b\n", [],
     "{path}: the target term '\\u200b' of 'sun' encodes to no pieces"),
    ("snow\tEis\n", ["--sampling"], "--glossary and --sampling exclude each other"),
])
def test_a_bad_glossary_line_or_sampling_is_refused_naming_it(trained_checkpoint, tmp_path,
                                                              glossary, flags, message):
    path = tmp_path / "glossary.tsv"
    path.write_text(glossary)
    result = CliRunner().invoke(main, ["translate", "--checkpoint", str(trained_checkpoint),
                                       "--glossary", str(path), *flags], input="A dog.\n")
    assert result.exit_code == 1
    assert message.format(path=path) in result.output
