import json
import subprocess
import sys

import pytest

from tests.export.conftest import invoke, vtx_translate

# Loads the SavedModel with TensorFlow and tensorflow-text only: importing vtx would fail.
LOAD_WITHOUT_VTX = """
import json, sys
sys.modules["vtx"] = None  # any `import vtx` now raises ImportError
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece op)
lines = json.load(open(sys.argv[2], encoding="utf-8"))
translate = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
output = translate(inputs=tf.constant(lines, tf.string))
print(json.dumps([t.decode("utf-8") for t in output["translations"].numpy().tolist()]))
"""


def translated_without_vtx(savedmodel, lines: list[str], tmp_path) -> list[str]:
    """The SavedModel's translations of `lines`, loaded in a process where vtx cannot load."""
    (tmp_path / "lines.json").write_text(json.dumps(lines), encoding="utf-8")
    loaded = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_VTX, str(savedmodel),
                             str(tmp_path / "lines.json")], capture_output=True, text=True,
                            timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    return json.loads(loaded.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("settings", [["--beam", "4", "--lenpen", "0.6"],
                                      ["--beam", "3", "--lenpen", "1.5", "--lenpen-formula",
                                       "fairseq", "--max-len-a", "0.5", "--max-len-b", "4"]])
def test_savedmodel_translates_like_vtx_translate(trained_checkpoint, test_sentences, tmp_path,
                                                  settings):
    lines = test_sentences + ["", " \u3000 ", "\u200b", "\ufeff", "Zwei Männer spielen Fußball."]
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, *settings)
    assert len(set(expected[:200])) >= 150, "the model should give varied translations"
    output = tmp_path / "savedmodel"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "savedmodel",
           "--output", output, *settings)
    assert (output / "saved_model.pb").is_file()
    assert not list(tmp_path.glob(".savedmodel.tmp-*"))
    translations = translated_without_vtx(output, lines, tmp_path)
    assert translations == expected
    # No pieces, no translation: blank lines, a zero-width space, a byte-order mark (a sentence
    # was made up for the last two, which changed with the other lines of the call).
    assert translations[200:204] == ["", "", "", ""]


@pytest.mark.slow
def test_an_int8_savedmodel_holds_int8_weights_and_translates_like_vtx_translate_int8(
        trained_checkpoint, tmp_path):
    lines = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman is cooking.",
             "A group of people are standing in front of a large building."]
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--precision", "float32",
                             "--quantize", "int8")
    output = tmp_path / "savedmodel"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "savedmodel", "--output",
           output, "--quantize", "int8")
    assert translated_without_vtx(output, lines, tmp_path) == expected
    import tensorflow as tf

    dtypes = tf.train.load_checkpoint(str(output / "variables" / "variables"))
    assert tf.int8 in dtypes.get_variable_to_dtype_map().values()


@pytest.mark.parametrize("flag, value", [("--quantize", "int8"), ("--precision", "bfloat16")])
def test_a_precision_for_another_format_than_savedmodel_is_refused(trained_checkpoint, tmp_path,
                                                                   flag, value):
    from click.testing import CliRunner

    from vtx_cli.main import main

    result = CliRunner().invoke(main, ["export", "--checkpoint", str(trained_checkpoint),
                                       "--format", "ctranslate2", "--output",
                                       str(tmp_path / "ct2"), flag, value])
    assert result.exit_code == 1
    assert f"{flag} {value} applies to a savedmodel only" in result.output
    assert not (tmp_path / "ct2").exists()


def test_a_blank_line_in_the_graph_is_one_that_pythons_strip_empties():
    import tensorflow as tf

    from vtx.export.savedmodel import BLANK_LINE

    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace()]
    lines = spaces + ["".join(spaces), "", "\u200b", "\ufeff", "a", " a ", "\x00"]
    matched = tf.strings.regex_full_match(tf.constant(lines), BLANK_LINE).numpy().tolist()
    assert matched == [not line.strip() for line in lines]
