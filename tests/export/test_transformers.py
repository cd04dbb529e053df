"""`vtx export --format transformers`: a MarianMTModel directory that Transformers loads offline
and that computes what vtx computes."""

import gzip
import json

import numpy as np
import pytest

from tests.export.conftest import invoke, vtx_translate
from vtx.inference.decoding import DecodeOptions

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
MAX_POSITIONS = 64  # the suite's translation model's (tests/conftest.py)


def multi30k_lines(shared_data, language: str, count: int = 200) -> list[str]:
    """The first `count` lines of Multi30k test_2016 in `language`."""
    with gzip.open(shared_data / "multi30k" / f"test_2016_flickr.{language}.gz", "rt",
                   encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def exported(trained_checkpoint, tmp_path_factory):
    """(MarianMTModel, tokenizer, directory) from `vtx export`, loaded offline as a
    Transformers user loads them (`AutoTokenizer`)."""
    output = tmp_path_factory.mktemp("marian") / "model"
    invoke("export", "--checkpoint", trained_checkpoint, "--format", "transformers",
           "--output", output)
    model = transformers.MarianMTModel.from_pretrained(str(output), local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(output), local_files_only=True)
    return model.eval(), tokenizer, output


@pytest.fixture(scope="module")
def vtx_model(trained_checkpoint):
    """(vtx Transformer, Vocabulary) of the same checkpoint."""
    from vtx import checkpoints
    from vtx.inference.loading import checkpoint_vocabulary, load_model

    checkpoint = checkpoints.load(trained_checkpoint)
    return load_model(checkpoint), checkpoint_vocabulary(checkpoint, trained_checkpoint)


@pytest.mark.slow
def test_directory_holds_marian_files_with_vtx_special_ids(exported):
    names = {path.name for path in exported[2].iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "source.spm",
            "target.spm", "vocab.json", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((exported[2] / "config.json").read_text(encoding="utf-8"))
    assert (config["model_type"], config["activation_function"], config["scale_embedding"]) == (
        "marian", "relu", True)
    generation = exported[0].generation_config
    assert (generation.decoder_start_token_id, generation.eos_token_id,
            generation.pad_token_id) == (2, 3, 0)
    assert sorted(generation.suppress_tokens) == [0, 2]
    vocabulary = json.loads((exported[2] / "vocab.json").read_text(encoding="utf-8"))
    assert [piece for piece, _ in sorted(vocabulary.items(), key=lambda item: item[1])][:4] == [
        "<pad>", "<unk>", "<s>", "</s>"]


@pytest.mark.slow
def test_tokenizer_gives_vtx_source_ids_by_default(exported, vtx_model, shared_data):
    tokenizer, vocab = exported[1], vtx_model[1]
    lines = multi30k_lines(shared_data, "en", 50) + ["", "\u200b", "  two  spaces ", "café ☃ 𝔘"]
    for line in lines:
        assert tokenizer(line)["input_ids"] == vocab.encode(line)
        assert tokenizer.decode(vocab.encode(line)) == vocab.decode(vocab.encode(line))
    marian = transformers.MarianTokenizer.from_pretrained(str(exported[2]), local_files_only=True)
    assert all(marian(line)["input_ids"] == vocab.encode(line) + [3] for line in lines[:5])


@pytest.mark.slow
def test_default_tokenizer_call_and_greedy_generate_equal_vtx_translate_beam_1(
        exported, trained_checkpoint, shared_data, tmp_path):
    """What a Transformers user types (docs/export.md), on lines whose vtx outputs stop on EOS
    well within the limit that one `generate()` call gives the whole batch."""
    model, tokenizer = exported[0], exported[1]
    lines = multi30k_lines(shared_data, "en", 40)
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--beam", "1")
    batch = tokenizer(lines, truncation=True, padding=True, return_tensors="pt")
    limit = min(batch["input_ids"].shape[1] + 50, model.config.max_position_embeddings)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1, max_length=limit + 1)
    got = tokenizer.batch_decode(out, skip_special_tokens=True)
    assert sum(a == b for a, b in zip(got, expected)) >= 39


def target_log_probs(exported, vtx_model, sources, targets):
    """Per sentence pair, the log-probabilities of the target's tokens and EOS by vtx and by
    the MarianMTModel, all pairs in one padded batch: a list of (vtx [T], Marian [T])."""
    model, vocab = vtx_model
    source_ids = [vocab.encode(line)[:MAX_POSITIONS] for line in sources]
    target_ids = [vocab.encode(line)[:MAX_POSITIONS - 1] for line in targets]
    source = np.zeros((len(sources), max(map(len, source_ids))), np.int64)  # PAD 0: [B, S]
    decoder_in = np.zeros((len(targets), max(map(len, target_ids)) + 1), np.int64)  # [B, T]
    for row, (ids, target) in enumerate(zip(source_ids, target_ids)):
        source[row, :len(ids)] = ids
        decoder_in[row, :len(target) + 1] = [2] + target
    logits = model((source, decoder_in)).numpy().astype(np.float64)  # [B, T, V]
    ours = logits - logits.max(-1, keepdims=True)
    ours -= np.log(np.exp(ours).sum(-1, keepdims=True))
    with torch.no_grad():
        theirs = exported[0](input_ids=torch.tensor(source),
                             attention_mask=torch.tensor(source != 0),
                             decoder_input_ids=torch.tensor(decoder_in)).logits
    theirs = theirs.log_softmax(-1).numpy()
    pairs = []
    for row, target in enumerate(target_ids):  # later pad positions see no earlier change
        positions, wanted = np.arange(len(target) + 1), target + [3]
        pairs.append((ours[row, positions, wanted], theirs[row, positions, wanted]))
    return pairs


@pytest.mark.slow
def test_forward_log_probs_of_targets_agree_with_vtx(exported, vtx_model, shared_data):
    sources, targets = multi30k_lines(shared_data, "en"), multi30k_lines(shared_data, "de")
    gaps = [np.abs(ours - theirs).max()
            for ours, theirs in target_log_probs(exported, vtx_model, sources, targets)]
    # Marian's layer norms' epsilon (1e-5 against vtx's 1e-6) is the one difference left.
    assert max(gaps) < 3e-4
    epsilons = [module.eps for module in exported[0].modules()
                if isinstance(module, torch.nn.LayerNorm)]
    assert set(epsilons) == {1e-5}
    try:  # with vtx's epsilon the converted model is vtx's, to float32 rounding
        for module in exported[0].modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.eps = vtx_model[0].config.layer_norm_epsilon
        gaps = [np.abs(ours - theirs).max()
                for ours, theirs in target_log_probs(exported, vtx_model, sources, targets)]
    finally:
        for module in exported[0].modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.eps = 1e-5
    assert max(gaps) < 1e-4 and np.median(gaps) < 1e-5


@pytest.mark.slow
def test_greedy_generate_equals_vtx_translate_beam_1(exported, trained_checkpoint, shared_data,
                                                     tmp_path):
    from vtx.export.marian import translate_lines

    lines = multi30k_lines(shared_data, "en")
    lines += ["", "\u200b", " ".join(lines[:8])]  # the last: past the model's 64 positions
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--beam", "1")
    assert len(set(expected)) >= 150, "the model should give varied translations"
    got = translate_lines(exported[0], exported[1], lines, DecodeOptions(beam=1))
    assert got[-3:-1] == ["", ""]
    assert sum(a == b for a, b in zip(got, expected)) >= 0.99 * len(lines)


@pytest.mark.slow
def test_beam_search_equals_vtx_with_fairseq_penalty_and_stop(exported, trained_checkpoint,
                                                              shared_data, tmp_path):
    """Transformers' beam search is vtx's with |Y|^alpha and stopping once `beam` hypotheses
    have finished (`early_stopping=True`)."""
    from vtx.export.marian import translate_lines

    lines = multi30k_lines(shared_data, "en")
    expected = vtx_translate(trained_checkpoint, lines, tmp_path, "--beam", "4", "--lenpen",
                             "0.6", "--lenpen-formula", "fairseq", "--stop", "fairseq")
    got = translate_lines(exported[0], exported[1], lines,
                          DecodeOptions(beam=4, lenpen=0.6, lenpen_formula="fairseq",
                                        stop="fairseq"))
    assert sum(a == b for a, b in zip(got, expected)) >= 0.99 * len(lines)


@pytest.mark.slow
def test_beam_search_under_another_penalty_or_stop_rule_is_refused(exported):
    from vtx.export.marian import translate_lines

    with pytest.raises(ValueError, match="not gnmt and fairseq"):
        translate_lines(exported[0], exported[1], ["A man."], DecodeOptions(stop="fairseq"))
    with pytest.raises(ValueError, match="not fairseq and exact"):
        translate_lines(exported[0], exported[1], ["A man."],
                        DecodeOptions(lenpen_formula="fairseq"))


def test_a_weight_of_another_shape_fails_naming_it_and_both_shapes():
    import dataclasses

    from vtx.config import TINY
    from vtx.export.marian import load_state, marian_config, marian_state_dict
    from vtx.models.transformer import build

    config = dataclasses.replace(TINY, vocab_size=32, max_positions=16)
    marian = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(config)))
    state = marian_state_dict(build(config))
    name = "model.decoder.layers.1.fc1.weight"
    state[name] = state[name].T.copy()
    with pytest.raises(ValueError, match=rf"{name}: vtx gives \(64, 128\), MarianMTModel "
                                         rf"expects \(128, 64\)"):
        load_state(marian, state)
    del state[name]
    with pytest.raises(ValueError, match=rf"{name}: no vtx weight for it"):
        load_state(marian, state)


def test_converted_random_model_computes_vtx_logits():
    """The conversion alone (permuted residual stream, transposed kernels), on random weights
    and Marian's layer-norm epsilon given to vtx's model."""
    import dataclasses

    from vtx.config import TINY
    from vtx.export.marian import (MARIAN_LAYER_NORM_EPSILON, load_state, marian_config,
                                   marian_state_dict)
    from vtx.models.transformer import build

    config = dataclasses.replace(TINY, vocab_size=40, max_positions=16,
                                 layer_norm_epsilon=MARIAN_LAYER_NORM_EPSILON)
    model = build(config)
    marian = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(config)))
    load_state(marian, marian_state_dict(model))
    source, target = np.array([[5, 9, 30, 7, 0, 0]]), np.array([[2, 11, 12, 13]])
    ours = model((source, target)).numpy()
    with torch.no_grad():
        theirs = marian.eval()(input_ids=torch.tensor(source),
                               attention_mask=torch.tensor(source != 0),
                               decoder_input_ids=torch.tensor(target)).logits.numpy()
    np.testing.assert_allclose(theirs, ours, atol=2e-5)


@pytest.mark.slow
def test_reading_the_export_back_gives_the_checkpoint_exactly(exported, trained_checkpoint):
    from vtx import checkpoints
    from vtx.export.marian import read_marian

    original = checkpoints.load(trained_checkpoint)
    back = read_marian(exported[2])
    assert back.meta["model_config"] == original.meta["model_config"]
    assert back.vocab == original.vocab
    assert len(back.model) == len(original.model)
    weights = [(a, b) for a, b in zip(back.model, original.model) if a.dtype.kind == "f"]
    assert len(weights) > 0  # dropout's int64 seed states are no weights
    assert all(np.array_equal(a, b) for a, b in weights)


@pytest.mark.slow
def test_reading_back_an_export_that_changed_is_refused_naming_the_file(exported, tmp_path):
    import shutil

    from vtx.errors import ManifestError
    from vtx.export.marian import read_marian

    copy = tmp_path / "copy"
    shutil.copytree(exported[2], copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    (copy / "config.json").write_text(json.dumps({**config, "d_model": 32}), encoding="utf-8")
    with pytest.raises(ManifestError, match=f"^{copy}/config.json changed after it was written"):
        read_marian(copy)


@pytest.mark.slow
def test_reading_a_marian_model_of_another_architecture_is_refused(exported, tmp_path):
    import shutil

    from vtx.export.marian import read_marian

    copy = tmp_path / "gelu"
    shutil.copytree(exported[2], copy)
    (copy / "SHA256SUMS").unlink()  # a model made elsewhere has no manifest to fail
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config.update(activation_function="gelu", pad_token_id=5)
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a MarianMTModel of vtx's architecture: "
                                         r"activation_function 'gelu' \(vtx needs 'relu'\); "
                                         r"pad_token_id 5 \(vtx needs 0\)"):
        read_marian(copy)
