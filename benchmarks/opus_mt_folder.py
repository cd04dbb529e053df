"""A MarianMT folder of Helsinki-NLP/opus-mt-en-de's configuration, for decoding speed at the
size OPUS-MT serves (`translate_speed.py --marian DIR --fixed-length N`).

Its config.json holds opus-mt-en-de's fields (d_model 512, 6 + 6 layers, 8 heads, FFN 2048,
swish, 58,101 ids, sinusoidal positions, tied embeddings, a final logits bias: 74M parameters);
its weights are Transformers' random initialization. No model host is reachable here, so no
trained OPUS-MT weights. A random model's output lengths are degenerate, so the folder's final
logits bias forbids </s> and every id that is not a piece of target.spm (-1e9): each line then
runs to the length limit on vtx and CTranslate2 alike, a fixed number of real German pieces,
and each step still scores all 58,101 ids. The pad row is zeros, as OPUS-MT's folders hold it.

source.spm and target.spm are real unigram SentencePiece models of `--pieces` pieces trained on
Multi30k's English and German; vocab.json is Marian's joint table (</s> 0, <unk> 1, the pieces
of both models, then unused fillers up to opus-mt-en-de's size, <pad> last).

Usage: python benchmarks/opus_mt_folder.py OUTPUT [--pieces 7000] [--sizes base|tiny]
(tiny: the same folder at d_model 64 and 2 + 2 layers, for the benchmark's tests)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("VTX_SHARED_DATA", ROOT.parent / "shared" / "data"))
VOCAB_SIZE = 58101  # opus-mt-en-de's vocab_size; its pad, the last id, is 58100
FORBIDDEN = -1e9  # the final logits bias of the ids never generated
SIZES = {"base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048,
                      decoder_ffn_dim=2048, encoder_attention_heads=8, decoder_attention_heads=8),
         "tiny": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128,
                      decoder_ffn_dim=128, encoder_attention_heads=4, decoder_attention_heads=4)}


def opus_mt_en_de_config(sizes: dict, vocab_size: int = VOCAB_SIZE) -> dict:
    """config.json of Helsinki-NLP/opus-mt-en-de, with `sizes` (its own: SIZES["base"]) and
    `vocab_size` ids, the last its pad."""
    pad = vocab_size - 1
    return dict(
        activation_dropout=0.0, activation_function="swish", add_bias_logits=False,
        add_final_layer_norm=False, architectures=["MarianMTModel"], attention_dropout=0.0,
        bad_words_ids=[[pad]], bos_token_id=0, classif_dropout=0.0, classifier_dropout=0.0,
        decoder_layerdrop=0.0, decoder_start_token_id=pad, decoder_vocab_size=vocab_size,
        dropout=0.1, encoder_layerdrop=0.0, eos_token_id=0, extra_pos_embeddings=vocab_size,
        forced_eos_token_id=0, init_std=0.02, is_encoder_decoder=True, max_length=512,
        max_position_embeddings=512, model_type="marian", normalize_before=False,
        normalize_embedding=False, num_beams=4, num_hidden_layers=sizes["encoder_layers"],
        pad_token_id=pad, scale_embedding=True, share_encoder_decoder_embeddings=True,
        static_position_embeddings=True, use_cache=True, vocab_size=vocab_size, **sizes)


def train_spm(language: str, pieces: int, path: Path) -> list[str]:
    """A unigram SentencePiece model of Multi30k's training side `language` written to `path`
    (SentencePiece's own special ids, as Marian's); returns its pieces, specials left out."""
    import sentencepiece as spm

    with gzip.open(DATA / "multi30k" / f"train.{language}.gz", "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    spm.set_random_generator_seed(1)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(path),
                                   vocab_size=pieces, model_type="unigram",
                                   character_coverage=1.0, minloglevel=2, num_threads=2)
    Path(f"{path}.model").rename(path)
    Path(f"{path}.vocab").unlink()
    processor = spm.SentencePieceProcessor(model_file=str(path))
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def joint_vocabulary(source: list[str], target: list[str]) -> dict[str, int]:
    """Marian's table: </s>, <unk>, both models' pieces (each once), fillers, <pad> last."""
    pieces = ["</s>", "<unk>"] + list(dict.fromkeys(source + target))
    if len(pieces) >= VOCAB_SIZE:
        raise SystemExit(f"--pieces: the two models hold {len(pieces)} pieces, more than "
                         f"opus-mt-en-de's {VOCAB_SIZE - 1} before its pad")
    pieces += [f"<unused{n}>" for n in range(VOCAB_SIZE - 1 - len(pieces))] + ["<pad>"]
    return {piece: index for index, piece in enumerate(pieces)}


def write_folder(output: Path, pieces: int, sizes: dict) -> None:
    """The folder (`save_pretrained`'s files and MarianTokenizer's) at `output`, written
    beside it first and renamed when whole."""
    import shutil

    import torch
    import transformers

    final, output = output, output.with_name(f"{output.name}.partial")
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir(parents=True)
    source = train_spm("en", pieces, output / "source.spm")
    target = train_spm("de", pieces, output / "target.spm")
    vocabulary = joint_vocabulary(source, target)
    (output / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False),
                                       encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(str(output / "source.spm"),
                                             str(output / "target.spm"), str(output / "vocab.json"))
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**opus_mt_en_de_config(sizes)))
    with torch.no_grad():
        bias = torch.full((VOCAB_SIZE,), FORBIDDEN)
        generated = torch.tensor([vocabulary[piece] for piece in set(target)])
        generator = torch.Generator().manual_seed(1)  # varied outputs among the allowed pieces
        bias[generated] = 0.5 * torch.randn(len(generated), generator=generator)
        model.final_logits_bias.copy_(bias[None, :])
        model.model.shared.weight[vocabulary["<pad>"]] = 0.0
    model.save_pretrained(str(output))
    tokenizer.save_pretrained(str(output))
    output.rename(final)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"{final}: opus-mt-en-de's config ({parameters:,} parameters, random weights), "
          f"{len(set(source))} + {len(set(target))} pieces, {VOCAB_SIZE} ids")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the folder to write (must not exist)")
    parser.add_argument("--pieces", type=int, default=7000,
                        help="pieces of each SentencePiece model")
    parser.add_argument("--sizes", choices=sorted(SIZES), default="base",
                        help="base: opus-mt-en-de's; tiny: for the tests")
    args = parser.parse_args()
    if args.output.exists():
        parser.error(f"{args.output} exists; nothing was written")
    write_folder(args.output, args.pieces, SIZES[args.sizes])


if __name__ == "__main__":
    main()
