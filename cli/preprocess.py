"""`vtx preprocess`: raw parallel text -> joint SentencePiece vocabulary + binarized shards."""

import click
from click.core import ParameterSource

from vtx_cli.options import FiniteFloat, creatable_folder


def _summary(meta: dict) -> list[str]:
    vocab = meta["vocab"]
    origin = f"trained ({vocab['model_type']})" if vocab["trained"] else "given"
    lines = [f"vocabulary: {vocab['size']} ids, {origin}"]
    for name, split in meta["splits"].items():
        filtered = split["filtered"]
        dropped = ", ".join(f"{reason} {count}" for reason, count in filtered.items())
        lines.append(f"{name}: {split['sentences']} pairs kept, {split['source_tokens']} source + "
                     f"{split['target_tokens']} target tokens, {len(split['shards'])} shards; "
                     f"filtered {sum(filtered.values())} ({dropped})")
    return lines


@click.command()
@click.option("--source-lang", "-s", required=True, help="Source language suffix, e.g. en.")
@click.option("--target-lang", "-t", required=True, help="Target language suffix, e.g. de.")
@click.option("--trainpref", help="Training files PREFIX (PREFIX.LANG or PREFIX.LANG.gz).")
@click.option("--validpref", help="Validation files PREFIX; never filtered.")
@click.option("--testpref", help="Test files PREFIX[,PREFIX...] -> splits test, test1, ...; "
                                 "never filtered.")
@click.option("--destdir", required=True, type=click.Path(), callback=creatable_folder,
              help="Output data directory.")
@click.option("--vocab-size", type=int, default=37000, show_default=True,
              help="Joint vocabulary size, special ids included (ignored with --spm-model; "
                   "refused with --vocab-from).")
@click.option("--model-type", type=click.Choice(["bpe", "unigram"]), default="bpe",
              show_default=True, help="SentencePiece model type.")
@click.option("--spm-model", type=click.Path(), help="Reuse this SentencePiece model "
              "(must have pad=0 unk=1 bos=2 eos=3).")
@click.option("--vocab-from", type=click.Path(dir_okay=False), metavar="CHECKPOINT",
              help="Reuse the vocabulary this checkpoint carries (an imported model's or a "
                   "run's), to fine-tune it on this data: `vtx train --finetune-from "
                   "CHECKPOINT`.")
@click.option("--whole-word-symbols", type=click.Path(dir_okay=False),
              help="File of tokens, one a line, each kept as one piece where it stands as a word "
                   "(e.g. brackets.txt from `vtx prepare-parse`).")
@click.option("--sample-lines", type=int, default=2_000_000, show_default=True,
              help="Random lines (both languages) the vocabulary is trained on, at most.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Encoding processes.")
@click.option("--max-positions", type=int, default=1024, show_default=True,
              help="Drop training pairs with more ids than this (target with eos); a longer "
                   "validation or test pair is an error (they are never dropped).")
@click.option("--max-length-ratio", type=FiniteFloat(min=1), default=9.0,
              show_default=True,
              help="Drop training pairs whose longer side has more than this x the ids of the "
                   "shorter.")
@click.option("--shard-size", type=int, default=100_000, show_default=True,
              help="Input pairs per shard.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=1, show_default=True,
              help="Seed of the vocabulary's line sample (same seed, same vocabulary).")
@click.option("--keep-train-text", is_flag=True,
              help="Also keep the kept training pairs' text beside their ids, for `vtx train "
                   "--subword-alpha` (subword regularization), which segments it anew each "
                   "epoch.")
@click.option("--force", is_flag=True, help="Replace a non-empty --destdir.")
def preprocess(source_lang, target_lang, trainpref, validpref, testpref, destdir, vocab_size,
               model_type, spm_model, vocab_from, whole_word_symbols, sample_lines, workers,
               max_positions, max_length_ratio, shard_size, seed, keep_train_text, force):
    """Train a joint SentencePiece vocabulary and binarize parallel text into DESTDIR."""
    from pathlib import Path

    from vtx.data.preprocess import PreprocessConfig, preprocess as run_preprocess
    from vtx.errors import DataError

    context = click.get_current_context()
    for name in ("vocab_size", "model_type"):
        if vocab_from and context.get_parameter_source(name) is not ParameterSource.DEFAULT:
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} {context.params[name]} shapes a new vocabulary; "
                                   f"--vocab-from {vocab_from} gives its checkpoint's")
    try:
        config = PreprocessConfig(
            source_lang=source_lang, target_lang=target_lang, destdir=Path(destdir),
            trainpref=trainpref, validpref=validpref,
            testprefs=tuple(p for p in (testpref or "").split(",") if p),
            vocab_size=vocab_size, model_type=model_type,
            spm_model=Path(spm_model) if spm_model else None,
            vocab_from=Path(vocab_from) if vocab_from else None,
            whole_word_symbols=Path(whole_word_symbols) if whole_word_symbols else None,
            sample_lines=sample_lines,
            workers=workers, max_positions=max_positions, max_length_ratio=max_length_ratio,
            shard_size=shard_size, seed=seed, keep_train_text=keep_train_text, force=force)
        meta = run_preprocess(config, log=lambda line: click.echo(line, err=True))
    except (DataError, OSError) as err:  # OSError: a file it cannot read or write, named
        raise click.ClickException(str(err)) from None
    for line in _summary(meta):
        click.echo(line)
    click.echo(f"wrote {destdir} in {meta['seconds']} s")
