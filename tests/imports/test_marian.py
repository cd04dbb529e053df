"""`vtx import` of an OPUS-MT-shaped MarianMT folder: vtx translates it as Transformers does,
token for token, with the same log-probabilities; folders vtx cannot represent are refused."""

import json
import shutil

import numpy as np
import pytest

from tests.export.conftest import invoke
from tests.export.test_transformers import multi30k_lines

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
LIMIT = 40  # tokens a translation holds, EOS included: --max-len-a 0 --max-len-b 40
LINES = 100


@pytest.fixture(scope="module")
def folder(opus_mt_folder):
    return opus_mt_folder


def vtx_hypotheses(checkpoint, lines, tmp_path, *options) -> list[dict]:
    """`vtx translate --output-format jsonl` in float32: each line's best hypothesis."""
    source, target = tmp_path / "source.txt", tmp_path / "vtx.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke("translate", "--checkpoint", checkpoint, "--input", source, "--output", target,
           "--precision", "float32", "--max-len-a", "0", "--max-len-b", LIMIT,
           "--output-format", "jsonl", *options)
    records = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    return [record["hypotheses"][0] for record in records]


def marian_pieces(marian, lines, **search) -> list[tuple[list[str], bool]]:
    """Transformers' `generate` of `lines` (MarianTokenizer's ids: each source ends with
    </s>): the pieces of each output, without the start token, </s> and padding, and whether
    it ended with </s>."""
    model, tokenizer, pieces = marian
    config = model.config
    batch = tokenizer(lines, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, max_length=LIMIT + 1, forced_eos_token_id=None,
                             bad_words_ids=[[config.pad_token_id]], do_sample=False, **search)
    outputs = []
    for row in out.tolist():
        ids, finished = row[1:], config.eos_token_id in row[1:]
        ids = ids[:ids.index(config.eos_token_id)] if finished else ids
        outputs.append(([pieces[i] for i in ids if i != config.pad_token_id], finished))
    return outputs


def marian_log_probs(marian, line: str, pieces: list[str], finished: bool) -> np.ndarray:
    """Transformers' log-probabilities of `pieces` (then </s> where `finished`) after `line`."""
    model, tokenizer, by_id = marian
    ids = {piece: index for index, piece in by_id.items()}
    target = [ids[piece] for piece in pieces] + ([model.config.eos_token_id] if finished else [])
    decoder_in = [model.config.decoder_start_token_id] + target[:-1] if target else []
    with torch.no_grad():
        logits = model(**tokenizer([line], return_tensors="pt"),
                       decoder_input_ids=torch.tensor([decoder_in])).logits[0]
    return logits.log_softmax(-1).numpy()[np.arange(len(target)), target]


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_vtx_translates_the_imported_model_as_transformers_generates(
        imported, marian, shared_data, tmp_path, beam):
    """The same tokens and log-probabilities. Where a beam's best output reached the length
    limit unfinished, the searches differ by rule, not by model: at the limit Transformers ranks
    its live beams with the finished ones, vtx (as fairseq) keeps a finished one."""
    assert_translates_as_transformers(imported, marian, multi30k_lines(shared_data, "en", LINES),
                                      tmp_path, beam)


def assert_translates_as_transformers(imported, marian, lines, tmp_path, beam,
                                      compared_share=0.8):
    """`vtx translate` of `lines` by the checkpoint `imported` gives the tokens and
    log-probabilities of `marian`'s `generate` (lines whose best beam reached the limit
    unfinished left out; at least `compared_share` of the lines compared)."""
    penalty = ["--lenpen", "1.0", "--lenpen-formula", "fairseq", "--stop", "fairseq"]
    found = vtx_hypotheses(imported, lines, tmp_path, "--beam", beam, *penalty)
    search = dict(num_beams=beam) if beam == 1 else dict(num_beams=beam, length_penalty=1.0,
                                                         early_stopping=True)
    expected = marian_pieces(marian, lines, **search)
    # A randomly initialized model gives one output for every line; this one must not.
    assert len({" ".join(pieces) for pieces, _ in expected}) >= 0.8 * len(lines), "must vary"
    compared = [(hypothesis, pieces) for hypothesis, (pieces, finished) in zip(found, expected)
                if finished or beam == 1]
    assert len(compared) >= compared_share * len(lines)
    assert [hypothesis["tokens"] for hypothesis, _ in compared] == [p for _, p in compared]
    gaps = [np.abs(np.array(hypothesis["positional_scores"])
                   - marian_log_probs(marian, line, hypothesis["tokens"],
                                      hypothesis["finished"])).max()
            for line, hypothesis in zip(lines[:20], found)]
    assert max(gaps) < 2e-5


@pytest.mark.slow
def test_the_imported_vocabulary_reads_text_as_marian_tokenizer(imported, marian, shared_data):
    from vtx import checkpoints
    from vtx.imports.marian import MarianIds
    from vtx.inference.loading import checkpoint_vocabulary

    _, tokenizer, _ = marian
    vocab = checkpoint_vocabulary(checkpoints.load(imported), imported)
    config = marian[0].config
    ids = MarianIds(config.vocab_size, config.pad_token_id, 1, config.eos_token_id,
                    config.decoder_start_token_id)
    lines = multi30k_lines(shared_data, "en", 50) + ["", "Ünïcödé ☃ unseen"]
    for line in lines:
        assert ids.marian_of[vocab.encode_source(line)].tolist() == tokenizer(line)["input_ids"]
    for line in multi30k_lines(shared_data, "de", 50):
        marian_ids = tokenizer(text_target=line)["input_ids"]
        assert ids.marian_of[vocab.encode(line)].tolist() + [config.eos_token_id] == marian_ids
        assert vocab.decode(vocab.encode(line)) == tokenizer.decode(marian_ids,
                                                                    skip_special_tokens=True)


def copied(folder, tmp_path):
    target = tmp_path / "folder"
    shutil.copytree(folder, target)
    return target


def edit_config(folder, **changes):
    path = folder / "config.json"
    values = json.loads(path.read_text())
    values.update(changes)
    path.write_text(json.dumps(values))


def refused(folder, tmp_path, message, *options):
    from click.testing import CliRunner

    from vtx_cli.main import main

    output = tmp_path / "out.npz"
    result = CliRunner().invoke(main, ["import", str(folder), "--output", str(output),
                                       *options])
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output
    assert not output.exists()


@pytest.mark.parametrize("change,message", [
    (dict(activation_function="tanh"), "config.json: activation_function 'tanh' is not one of"),
    (dict(normalize_before=True), "config.json: normalize_before True (vtx's model needs False)"),
    (dict(model_type="bart"), "config.json: model_type 'bart' is not 'marian'"),
    (dict(share_encoder_decoder_embeddings=False),
     "share_encoder_decoder_embeddings False (vtx's model needs True)"),
    (dict(decoder_layers=3), "decoder_layers 3 differs from encoder_layers 2")])
def test_a_config_vtx_cannot_represent_is_refused_naming_field_and_value(
        opus_mt_folder, tmp_path, change, message):
    folder = copied(opus_mt_folder, tmp_path)
    edit_config(folder, **change)
    refused(folder, tmp_path, message)


def test_a_missing_file_is_refused_naming_it(opus_mt_folder, tmp_path):
    folder = copied(opus_mt_folder, tmp_path)
    (folder / "target.spm").unlink()
    refused(folder, tmp_path, f"{folder / 'target.spm'}: no such file; nothing was written")


def test_a_vocabulary_of_another_size_is_refused(opus_mt_folder, tmp_path):
    folder = copied(opus_mt_folder, tmp_path)
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocabulary["▁extra"] = len(vocabulary)
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    refused(folder, tmp_path, f"vocab.json: {len(vocabulary)} pieces, but the weights have "
                              f"{len(vocabulary) - 1} embeddings")


def test_weights_are_read_without_unpickling_where_safetensors_exist(opus_mt_folder, tmp_path,
                                                                     monkeypatch):
    """A pytorch_model.bin beside model.safetensors is never opened; alone, it is read with
    `weights_only=True`, which refuses a pickle that would run code."""
    from vtx.imports.marian import read_weights

    folder = copied(opus_mt_folder, tmp_path)
    (folder / "pytorch_model.bin").write_bytes(b"never read")
    from_safetensors = read_weights(folder)
    (folder / "model.safetensors").rename(tmp_path / "aside.safetensors")
    refused(folder, tmp_path, "pytorch_model.bin: does not read as tensors alone")

    class Exploit:
        def __reduce__(self):
            return (print, ("unpickled code ran",))

    torch.save({"model.shared.weight": Exploit()}, folder / "pytorch_model.bin")
    refused(folder, tmp_path, "pytorch_model.bin: does not read as tensors alone")
    torch.save({name: torch.from_numpy(array) for name, array in from_safetensors.items()},
               folder / "pytorch_model.bin")
    from_pickle = read_weights(folder)
    assert all(np.array_equal(from_pickle[name], array)
               for name, array in from_safetensors.items())


def test_a_pickled_only_folder_is_refused_where_safetensors_are_required(opus_mt_folder,
                                                                         tmp_path):
    from vtx.imports.marian import read_weights

    folder = copied(opus_mt_folder, tmp_path)
    tensors = read_weights(folder)
    (folder / "model.safetensors").unlink()
    torch.save({name: torch.from_numpy(array) for name, array in tensors.items()},
               folder / "pytorch_model.bin")
    refused(folder, tmp_path, f"{folder / 'pytorch_model.bin'}: the folder's weights are a "
                              f"PyTorch pickle only, no model.safetensors, and "
                              f"--require-safetensors reads no pickle; nothing was written",
            "--require-safetensors")
    invoke("import", folder, "--output", tmp_path / "from-pickle.npz")  # read without the flag
    (folder / "pytorch_model.bin").unlink()
    (folder / "model.safetensors").write_bytes(b"")  # safetensors alone: read, not refused
    refused(folder, tmp_path, "model.safetensors: does not read", "--require-safetensors")


def test_an_imported_model_is_refused_by_exports_that_map_the_papers_model(imported, tmp_path):
    from vtx.export import export

    with pytest.raises(ValueError, match="activation 'swish'"):
        export(imported, tmp_path / "ct2", "ctranslate2")


@pytest.mark.slow
def test_a_savedmodel_of_an_imported_model_translates_as_vtx_translate(imported, shared_data,
                                                                      tmp_path):
    """Its pair vocabulary read in the graph: a leading target-language token, characters the
    source model lacks, lines of no pieces but the </s> suffix (blank, a zero-width space)."""
    from tests.export.conftest import vtx_translate
    from tests.export.test_savedmodel import translated_without_vtx

    lines = multi30k_lines(shared_data, "en", 60) + [
        "", " \u3000 ", "\u200b", ">>deu<< A dog runs.", "Zwei Männer spielen Fußball. ∂"]
    expected = vtx_translate(imported, lines, tmp_path, "--beam", "4")
    assert len(set(expected[:60])) >= 40, "outputs must vary"
    assert expected[60:63] == ["", "", ""]
    output = tmp_path / "savedmodel"
    invoke("export", "--checkpoint", imported, "--format", "savedmodel", "--output", output,
           "--beam", "4")
    assert translated_without_vtx(output, lines, tmp_path) == expected


@pytest.mark.slow
def test_vtx_score_gives_transformers_log_probabilities_of_references(
        imported, marian, shared_data, tmp_path):
    from click.testing import CliRunner

    from vtx_cli.main import main

    sources, targets = (multi30k_lines(shared_data, language, 30) for language in ("en", "de"))
    (tmp_path / "source.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "target.txt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, [
        "score", "--checkpoint", str(imported), "--input", str(tmp_path / "source.txt"),
        "--target", str(tmp_path / "target.txt"), "--precision", "float32",
        "--output-format", "jsonl"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    model, tokenizer, _ = marian
    for source, target, record in zip(sources, targets, records):
        labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"]  # ends </s>
        decoder_in = torch.cat([torch.tensor([[model.config.decoder_start_token_id]]),
                                labels[:, :-1]], 1)
        with torch.no_grad():
            logits = model(**tokenizer([source], return_tensors="pt"),
                           decoder_input_ids=decoder_in).logits[0]
        expected = logits.log_softmax(-1).numpy()[np.arange(labels.shape[1]), labels[0]]
        np.testing.assert_allclose(record["positional_scores"], expected, atol=2e-5)


@pytest.mark.slow
def test_vtx_serve_translates_with_the_imported_model_as_vtx_translate(
        imported, shared_data, tmp_path):
    from tests.serve.test_server import assert_same_records, translate_jsonl
    from vtx.serve.process import ServerProcess, request

    lines = multi30k_lines(shared_data, "en", 6)
    offline = translate_jsonl(imported, tmp_path, lines, "--precision", "float32")
    server = ServerProcess("--model", f"en-de={imported}", "--precision", "float32",
                           "--batch-wait-ms", 1)
    try:
        status, _, reply = request(server.url + "/v1/translate", {"text": lines})
        assert status == 200, reply
        assert_same_records(reply["translations"], offline)
        status, _, reply = request(server.url + "/translate",
                                   {"q": lines[0], "source": "en", "target": "de"})
        assert (status, reply) == (200, {"translatedText": offline[0]["hypotheses"][0]["text"]})
        status, _, languages = request(server.url + "/languages")
        assert {entry["code"]: entry["targets"] for entry in languages}["en"] == ["de"]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("change,message", [
    (lambda t: {**t, "lm_head.weight": t["model.shared.weight"] + 1},
     "lm_head.weight differs from model.shared.weight: untied embeddings"),
    (lambda t: {**t, "model.encoder.layer_norm.weight": t["final_logits_bias"][0, :64]},
     "tensors of no vtx weight: model.encoder.layer_norm.weight"),
    (lambda t: {k: v for k, v in t.items() if k != "model.decoder.layers.1.fc2.weight"},
     "no tensor model.decoder.layers.1.fc2.weight")])
def test_weights_vtx_cannot_represent_are_refused_naming_the_tensor(opus_mt_folder, tmp_path,
                                                                    change, message):
    from safetensors.numpy import save_file

    from vtx.imports.marian import read_weights

    folder = copied(opus_mt_folder, tmp_path)
    tensors = change(read_weights(folder))
    save_file({name: np.ascontiguousarray(array) for name, array in tensors.items()},
              str(folder / "model.safetensors"))
    refused(folder, tmp_path, f"model.safetensors: {message}")
