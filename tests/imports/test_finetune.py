"""`vtx train --finetune-from` an imported MarianMT model: data preprocessed with its pair
vocabulary (`vtx preprocess --vocab-from`), its model configuration kept, validation BLEU said,
and the fine-tuned checkpoint translating; what cannot work is refused, naming flag and value."""

import dataclasses

import pytest
from click.testing import CliRunner

from tests.export.conftest import invoke
from tests.imports.conftest import multi30k

pytest.importorskip("transformers")
PAIRS = {"train": (200, 3000), "valid": (20, 0)}  # (pairs, first line) of Multi30k's files


@pytest.fixture(scope="module")
def folder(opus_mt_folder):
    return opus_mt_folder


@pytest.fixture(scope="module")
def user_text(shared_data, tmp_path_factory):
    """A user's own parallel text: Multi30k pairs the fixture's model was not trained on."""
    root = tmp_path_factory.mktemp("user_text")
    for split, (count, first) in PAIRS.items():
        name = "train" if split == "train" else "val"
        for language in ("en", "de"):
            lines = multi30k(shared_data, name, language, first + count)[first:]
            (root / f"{split}.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def user_data(imported, user_text, tmp_path_factory):
    data = tmp_path_factory.mktemp("user_data") / "data"
    invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", user_text / "train",
           "--validpref", user_text / "valid", "--destdir", data, "--vocab-from", imported)
    return data


def test_the_data_reads_as_the_imported_vocabulary_reads_text(imported, user_data,
                                                              user_text):
    from vtx import checkpoints
    from vtx.data import pipeline
    from vtx.data.directory import DataDirectory
    from vtx.inference.loading import checkpoint_vocabulary

    data = DataDirectory.open(user_data)
    assert data.vocabulary_path.read_bytes() == checkpoints.load(imported).vocab
    vocab = checkpoint_vocabulary(checkpoints.load(imported), imported)
    sources = (user_text / "valid.en").read_text(encoding="utf-8").splitlines()
    targets = (user_text / "valid.de").read_text(encoding="utf-8").splitlines()
    pairs = [(list(s), list(t)) for s, t in pipeline.split_pairs(data, "valid")]
    # Sources end with </s>, as MarianTokenizer's; targets get it from the batches.
    assert pairs == [(vocab.encode_source(s), vocab.encode(t)) for s, t in zip(sources, targets)]


def test_finetuning_an_imported_model_keeps_its_model_and_translates(
        imported, user_data, user_text, tmp_path):
    from vtx import checkpoints

    save = tmp_path / "run"
    output = invoke("train", user_data, "--save-dir", save, "--finetune-from", imported,
                    "--max-steps", 3, "--max-tokens", 512, "--warmup-steps", 2,
                    "--validate-interval-steps", 3, "--save-interval-minutes", 0,
                    "--eval-bleu", "--eval-beam", 1, "--no-jit")
    assert any(line.startswith("valid step 3 | BLEU") for line in output.splitlines()), output
    before = checkpoints.load(imported).meta["model_config"]
    after = checkpoints.load(checkpoints.checkpoint_path(save, 3))
    assert after.meta["model_config"] == before  # activation, epsilon, positions, logits bias
    assert after.vocab == checkpoints.load(imported).vocab
    translated = tmp_path / "out.txt"
    invoke("translate", "--checkpoint", checkpoints.checkpoint_path(save, 3), "--input",
           user_text / "valid.en", "--output", translated, "--beam", 2)
    assert len(translated.read_text(encoding="utf-8").splitlines()) == PAIRS["valid"][0]


def run(*args):
    from vtx_cli.main import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_data_of_another_vocabulary_is_refused_naming_the_flag(imported, multi30k_small,
                                                               tmp_path):
    result = run("train", multi30k_small / "data", "--save-dir", tmp_path / "run",
                 "--finetune-from", imported, "--max-steps", 1)
    assert result.exit_code != 0
    assert f"--finetune-from {imported} has a vocabulary of" in result.output, result.output
    assert f"vtx preprocess --vocab-from {imported}" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag,value", [("--vocab-size", 8000), ("--model-type", "unigram")])
def test_a_new_vocabularys_flag_is_refused_with_vocab_from(imported, user_text, tmp_path,
                                                            flag, value):
    result = run("preprocess", "-s", "en", "-t", "de", "--trainpref", user_text / "train",
                 "--destdir", tmp_path / "data", "--vocab-from", imported, flag, value)
    assert result.exit_code == 2
    assert f"{flag} {value} shapes a new vocabulary; --vocab-from {imported}" in result.output
    assert not (tmp_path / "data").exists()


def test_vocab_from_a_checkpoint_without_vocabulary_is_refused(imported, user_text,
                                                               tmp_path):
    from vtx import checkpoints

    bare = tmp_path / "bare.npz"
    checkpoints.save(bare, dataclasses.replace(checkpoints.load(imported), vocab=None))
    result = run("preprocess", "-s", "en", "-t", "de", "--trainpref", user_text / "train",
                 "--destdir", tmp_path / "data", "--vocab-from", bare)
    assert result.exit_code == 1
    assert f"--vocab-from {bare}: the checkpoint carries no vocabulary" in result.output
