"""An OPUS-MT-shaped MarianMT folder, built once per test session: Helsinki-NLP/opus-mt-en-de's
config.json with small sizes, two real SentencePiece models (English, German) trained on
Multi30k, a vocab.json built as Marian builds its vocabulary, and weights trained a few hundred
updates in Transformers on real pairs, so that outputs vary with the input."""

import gzip
import importlib.util
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import built_once

_SPEC = importlib.util.spec_from_file_location(
    "opus_mt_folder", Path(__file__).resolve().parents[2] / "benchmarks" / "opus_mt_folder.py")
OPUS_MT_FOLDER = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(OPUS_MT_FOLDER)
TRAIN_PAIRS = 3000
PIECES = 600  # each SentencePiece model's
SIZES = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128,
             decoder_ffn_dim=128, encoder_attention_heads=4, decoder_attention_heads=4)
UPDATES = 400
# An opus-mt-tc-big model's differences at the same small width: 16 heads, an FFN 4 x wider than
# d_model, ReLU (Marian's transformer-big), 1024 positions, a target-language token before every
# source, and its </s> amid the pieces.
TC_BIG = dict(encoder_ffn_dim=256, decoder_ffn_dim=256, encoder_attention_heads=16,
              decoder_attention_heads=16, activation_function="relu",
              max_position_embeddings=1024)
# Its </s> lies amid the pieces, not at 0 (opus-mt-tc-big-fr-en: eos_token_id 43311 of 53017,
# pad 53016 last): the id `marian_folder` gives it, as a share of the vocabulary.
TC_BIG_EOS_AT = 0.8
TC_BIG_CODES = (">>deu<<", ">>nld<<")  # the target tokens of its vocab.json; >>deu<< is used


def multi30k(shared_data: Path, split: str, language: str, count: int) -> list[str]:
    with gzip.open(shared_data / "multi30k" / f"{split}.{language}.gz", "rt",
                   encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def train_spm(lines: list[str], path: Path) -> None:
    """A unigram model with SentencePiece's own special ids (unk 0, bos 1, eos 2, no pad), as
    Marian trains its source.spm and target.spm."""
    import sentencepiece as spm

    spm.set_random_generator_seed(1)  # the same models in every session
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(path),
                                   vocab_size=PIECES, model_type="unigram",
                                   character_coverage=1.0, minloglevel=2, num_threads=1)
    Path(f"{path}.model").rename(path)


def marian_vocabulary(folder: Path, sources: list[str], targets: list[str],
                      codes: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's joint vocabulary (`marian-vocab` over both sides' pieces): </s> 0, <unk> 1,
    then the pieces the training text holds, most frequent first (ties by piece), the target
    tokens `codes` among them (a source's leading `>>xxx<<` is one piece), and the pad that
    Transformers' converter appends last. Pieces of a model that no text uses are not in it
    (they read as <unk>)."""
    import sentencepiece as spm

    counts = Counter({code: 1 for code in codes})
    for model, lines in (("source.spm", sources), ("target.spm", targets)):
        processor = spm.SentencePieceProcessor(model_file=str(folder / model))
        for line in lines:
            first = line.split(" ", 1)[0]
            code = [first] if first in codes else []
            counts.update(code + processor.encode(line[len(first):] if code else line,
                                                  out_type=str))
    ordered = sorted(counts, key=lambda piece: (-counts[piece], piece))
    pieces = ["</s>", "<unk>"] + [p for p in ordered if p not in ("</s>", "<unk>")] + ["<pad>"]
    return {piece: index for index, piece in enumerate(pieces)}


def opus_mt_config(vocab_size: int, **changes) -> dict:
    """opus-mt-en-de's config.json fields (benchmarks/opus_mt_folder.py's), its sizes replaced
    by `SIZES`, then `changes`."""
    return {**OPUS_MT_FOLDER.opus_mt_en_de_config(SIZES, vocab_size), **changes}


def train_briefly(model, tokenizer, sources: list[str], targets: list[str]) -> None:
    """A few hundred Adam updates on real pairs (encoded once), so that the outputs vary."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains several times faster on one thread
    encoded = tokenizer(sources, text_target=targets)
    pad = tokenizer.pad_token_id
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    rng = np.random.default_rng(0)
    for _ in range(UPDATES):
        rows = rng.choice(len(sources), 32, replace=False)
        source = padded([encoded["input_ids"][i] for i in rows], pad)
        labels = padded([encoded["labels"][i] for i in rows], -100)
        loss = model(input_ids=source, attention_mask=source != pad, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    torch.set_num_threads(threads)


def padded(rows: list[list[int]], value: int):
    """int64 [B, L] tensor of `rows`, each padded with `value` to the longest."""
    import torch

    array = np.full((len(rows), max(map(len, rows))), value, np.int64)
    for index, row in enumerate(rows):
        array[index, :len(row)] = row
    return torch.from_numpy(array)


@pytest.fixture(scope="session")
def opus_mt_folder(shared_data, tmp_path_factory) -> Path:
    """The folder `save_pretrained` writes (config.json, model.safetensors, generation config)
    with MarianTokenizer's files (source.spm, target.spm, vocab.json); one for all workers."""
    name = "opus-mt-en-de-small"
    return built_once(tmp_path_factory, "opus_mt",
                      lambda root: marian_folder(shared_data, root / name)) / name


@pytest.fixture(scope="session")
def tc_big_folder(shared_data, tmp_path_factory) -> Path:
    """As `opus_mt_folder`, of an opus-mt-tc-big configuration (`TC_BIG`), every source led by
    `>>deu<<`."""
    name = "opus-mt-tc-big-small"
    return built_once(tmp_path_factory, "tc_big", lambda root: marian_folder(
        shared_data, root / name, TC_BIG, TC_BIG_CODES, TC_BIG_EOS_AT)) / name


def marian_folder(shared_data: Path, folder: Path, changes: dict | None = None,
                  codes: tuple[str, ...] = (), eos_at: float = 0.0) -> Path:
    """A MarianMT folder of opus-mt-en-de's config with `changes`, trained on Multi30k en-de
    pairs (sources led by `codes[0]` where codes are given), its </s> moved to the id at the
    share `eos_at` of its vocabulary (0: opus-mt-en-de's 0)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder.mkdir()
    sources = multi30k(shared_data, "train", "en", TRAIN_PAIRS)
    targets = multi30k(shared_data, "train", "de", TRAIN_PAIRS)
    train_spm(sources, folder / "source.spm")
    train_spm(targets, folder / "target.spm")
    sources = [f"{codes[0]} {line}" for line in sources] if codes else sources
    vocabulary = marian_vocabulary(folder, sources, targets, codes)
    if eos_at:
        pieces = sorted(vocabulary, key=vocabulary.get)
        pieces.insert(int(eos_at * len(pieces)), pieces.pop(vocabulary["</s>"]))
        vocabulary = {piece: index for index, piece in enumerate(pieces)}
    eos = vocabulary["</s>"]
    changes = {**(changes or {}), "eos_token_id": eos, "forced_eos_token_id": eos}
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False),
                                       encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(str(folder / "source.spm"),
                                             str(folder / "target.spm"),
                                             str(folder / "vocab.json"))
    config = transformers.MarianConfig(**opus_mt_config(len(vocabulary), **changes))
    torch.manual_seed(0)  # the initial weights
    model = transformers.MarianMTModel(config)
    with torch.no_grad():  # Marian's output layer has a bias (decoder_ff_logit_out_b)
        generator = torch.Generator().manual_seed(1)
        model.final_logits_bias.copy_(0.5 * torch.randn(model.final_logits_bias.shape,
                                                        generator=generator))
    train_briefly(model, tokenizer, sources, targets)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def imported(folder: Path, tmp_path_factory) -> Path:
    """`vtx import` of the module's `folder` fixture: the checkpoint written."""
    from tests.export.conftest import invoke

    checkpoint = tmp_path_factory.mktemp("imported") / f"{folder.name}.npz"
    invoke("import", folder, "--output", checkpoint)
    return checkpoint


@pytest.fixture(scope="module")
def marian(folder: Path):
    """(MarianMTModel, MarianTokenizer, id -> piece) of the module's `folder` fixture, as
    Transformers loads it."""
    transformers = pytest.importorskip("transformers")
    model = transformers.MarianMTModel.from_pretrained(str(folder), local_files_only=True)
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(folder), local_files_only=True)
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    return model.eval(), tokenizer, {index: piece for piece, index in vocabulary.items()}
