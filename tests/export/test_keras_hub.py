"""`vtx export --format keras-hub`: a preset that keras-hub loads in a fresh process, whose
Seq2SeqLM generates what `vtx translate` gives."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.export.conftest import invoke, vtx_translate

keras_hub = pytest.importorskip("keras_hub")

# A keras-hub user's program: no vtx but the import that registers its classes.
GENERATE = """
import json, sys
import keras_hub
import vtx.hub  # noqa: F401
preset, lines = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
translations = {}
translator = keras_hub.models.Seq2SeqLM.from_preset(preset)
translations["default"] = [str(t) for t in translator.generate(lines)]
greedy = keras_hub.models.Seq2SeqLM.from_preset(preset, beam=1)
translations["beam 1"] = [str(t) for t in greedy.generate(lines)]
translations["class"] = type(translator).__name__
json.dump(translations, open(sys.argv[3], "w", encoding="utf-8"))
"""


@pytest.fixture(scope="module")
def preset(trained_checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("keras_hub") / "preset"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "keras-hub",
           "--output", output)
    return output


def source_lines(shared_data) -> list[str]:
    import gzip

    with gzip.open(shared_data / "multi30k" / "test_2016_flickr.en.gz", "rt",
                   encoding="utf-8") as handle:
        lines = [next(handle).rstrip("\n") for _ in range(200)]
    # Past the model's 64 positions: cut as `vtx translate` cuts it.
    return lines + ["", " ", "\u200b", " ".join(lines[:8])]


@pytest.mark.slow
def test_fresh_from_preset_generates_vtx_translate_lines(preset, trained_checkpoint,
                                                        shared_data, tmp_path):
    lines = source_lines(shared_data)
    (tmp_path / "lines.json").write_text(json.dumps(lines), encoding="utf-8")
    subprocess.run([sys.executable, "-c", GENERATE, str(preset), str(tmp_path / "lines.json"),
                    str(tmp_path / "out.json")], check=True, timeout=600)
    got = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert got["class"] == "TransformerSeq2SeqLM"
    expected = vtx_translate(trained_checkpoint, lines, tmp_path)  # beam 4, the paper's search
    assert len(set(expected)) >= 150, "the model should give varied translations"
    assert got["default"] == expected
    (tmp_path / "greedy").mkdir()
    assert got["beam 1"] == vtx_translate(trained_checkpoint, lines, tmp_path / "greedy",
                                          "--beam", "1")


@pytest.mark.slow
def test_preset_round_trips_the_weights_exactly(preset, trained_checkpoint):
    import vtx.hub  # noqa: F401
    from vtx import checkpoints

    translator = keras_hub.models.Seq2SeqLM.from_preset(str(preset))
    arrays = checkpoints.load(trained_checkpoint).model
    transformer = translator.backbone.transformer
    assert len(transformer.variables) == len(arrays)  # in the order the checkpoint keeps them
    weights = {id(weight) for weight in transformer.weights}  # dropout's seeds are not weights
    compared = [(variable, array) for variable, array in zip(transformer.variables, arrays)
                if id(variable) in weights]
    assert len(compared) == len(weights) > 0
    for variable, array in compared:
        assert np.array_equal(variable.numpy(), array), variable.path
    assert translator.decode_options.beam == 4
    assert translator.preprocessor.encoder_sequence_length == 64  # the model's positions


@pytest.mark.slow
def test_calling_the_task_gives_vtx_teacher_forced_logits(preset, trained_checkpoint):
    import vtx.hub  # noqa: F401
    from vtx import checkpoints
    from vtx.inference.loading import load_model

    translator = keras_hub.models.Seq2SeqLM.from_preset(str(preset))
    x, y, weights = translator.preprocessor({"encoder_text": ["A man is riding a bike.", "Hi."],
                                             "decoder_text": ["Ein Mann fährt Rad.", "Hallo."]})
    assert x["decoder_token_ids"].numpy()[:, 0].tolist() == [2, 2]  # <s> first
    assert 3 in y.numpy()[1] and 2 not in x["encoder_token_ids"].numpy()  # </s>; no source <s>
    model = load_model(checkpoints.load(trained_checkpoint))
    expected = model((x["encoder_token_ids"].numpy(), x["decoder_token_ids"].numpy())).numpy()
    real = x["decoder_padding_mask"].numpy()
    np.testing.assert_array_equal(translator(x).numpy()[real], expected[real])
    assert translator.preprocessor.tokenizer.proto == checkpoints.load(trained_checkpoint).vocab


@pytest.mark.slow
def test_search_options_are_baked_into_the_preset(trained_checkpoint, tmp_path):
    output = tmp_path / "preset"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "keras-hub",
           "--output", output, "--beam", "2", "--lenpen", "1.5", "--lenpen-formula", "fairseq",
           "--max-len-a", "0.5", "--max-len-b", "4", "--stop", "never")
    task = json.loads((output / "task.json").read_text(encoding="utf-8"))["config"]
    assert {key: task[key] for key in ("beam", "lenpen", "lenpen_formula", "max_len_a",
                                       "max_len_b", "stop")} == {
        "beam": 2, "lenpen": 1.5, "lenpen_formula": "fairseq", "max_len_a": 0.5,
        "max_len_b": 4, "stop": "never"}


@pytest.mark.slow
def test_preset_passes_upload_preset_checks(preset):
    metadata = json.loads((preset / "metadata.json").read_text(encoding="utf-8"))
    assert "Seq2SeqLM" in metadata["tasks"]
    # upload_preset checks the preset before it looks at the address, which no hub has.
    with pytest.raises(ValueError, match="Unknown URI"):
        keras_hub.upload_preset("nowhere://vtx", str(preset))
    (preset / "model.weights.h5").rename(preset / "moved.h5")
    try:
        with pytest.raises(FileNotFoundError, match="weights file is missing"):
            keras_hub.upload_preset("nowhere://vtx", str(preset))
    finally:
        (preset / "moved.h5").rename(preset / "model.weights.h5")


@pytest.mark.slow
def test_keras_hub_samplers_and_max_length_are_refused_naming_vtx_settings(preset):
    import vtx.hub  # noqa: F401

    translator = keras_hub.models.Seq2SeqLM.from_preset(str(preset))
    with pytest.raises(ValueError, match="vtx's beam search, not a keras-hub sampler"):
        translator.compile(sampler="top_k")
    with pytest.raises(ValueError, match=r"max_length=20: the output's limit is max_len_a"):
        translator.generate("A man.", max_length=20)
    with pytest.raises(ValueError, match="without a decoder prompt"):
        translator.generate({"encoder_text": ["A man."], "decoder_text": ["Ein"]})
    assert translator.generate({"encoder_text": ["A man."], "decoder_text": [""]}) == [
        translator.generate("A man.")]


def damaged_copy(preset, tmp_path, damage):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(preset, copy)
    damage(copy)
    return copy


def flip_a_weights_byte(copy):
    weights = bytearray((copy / "model.weights.h5").read_bytes())
    weights[len(weights) * 3 // 4] ^= 0xFF  # in the weights' data, past the HDF5 headers
    (copy / "model.weights.h5").write_bytes(bytes(weights))


def weights_linked_outside(copy):
    outside = copy.with_name("outside.h5")
    (copy / "model.weights.h5").rename(outside)
    (copy / "model.weights.h5").symlink_to(outside)


@pytest.mark.slow
@pytest.mark.parametrize("damage, said", [
    (flip_a_weights_byte, "/model.weights.h5 changed after it was written: its SHA-256 is "
                          "not the one "),
    (weights_linked_outside, "/model.weights.h5 is a symbolic link to "),
    (lambda copy: (copy / "model.weights.h5").unlink(),
     "/model.weights.h5 is missing: "),
])
def test_keras_hubs_from_preset_refuses_a_preset_that_changed_naming_the_file(
        preset, tmp_path, damage, said):
    """Damaged weights loaded and translated into empty lines; weights linked from outside
    the preset were read; missing weights were named as model.weights.json."""
    import vtx.hub  # noqa: F401

    copy = damaged_copy(preset, tmp_path, damage)
    with pytest.raises(ValueError, match=f"^{copy}{said}"):
        keras_hub.models.Seq2SeqLM.from_preset(str(copy))


@pytest.mark.slow
def test_a_preset_whose_config_does_not_parse_is_named(preset, tmp_path):
    """keras-hub's from_preset reads config.json before any vtx code runs: a bare
    JSONDecodeError. `vtx.hub.load_preset` checks the preset first."""
    import vtx.hub

    copy = damaged_copy(preset, tmp_path, lambda copy: (copy / "SHA256SUMS").unlink())
    (copy / "config.json").write_text('{"module": ', encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{copy}/config.json: not readable as JSON "):
        vtx.hub.load_preset(copy)
    # And with its manifest, as changed.
    copy = damaged_copy(preset, tmp_path / "kept", lambda copy: (
        copy / "config.json").write_text('{"module": ', encoding="utf-8"))
    with pytest.raises(ValueError, match=f"^{copy}/config.json changed after it was written"):
        vtx.hub.load_preset(copy)


@pytest.mark.slow
def test_an_export_verifies_with_sha256sum_as_the_docs_say(preset):
    """docs/export.md: `cd DIR && sha256sum -c --strict SHA256SUMS`, outside vtx."""
    import shutil

    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum (GNU coreutils) on this machine")
    checked = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=preset,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = {line.split("  ", 1)[1] for line in (preset / "SHA256SUMS").read_text().splitlines()}
    assert "model.weights.h5" in listed and "config.json" in listed
