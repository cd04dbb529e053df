"""Raw parallel text -> a data directory: joint SentencePiece vocabulary, shards, `meta.json`.

Layout of the directory (see `vtx.data.binarize` for the shard format):
    spm.model                the joint vocabulary (trained here, or a copy of `spm_model`)
    pair_vocab.bin           instead, the pair vocabulary of `vocab_from`'s checkpoint (an
                             imported model's: `vtx.data.pair_vocab`)
    SPLIT.NNNNN.bin/.idx     shards of each split: train, valid, test, test1, ...
    train.NNNNN.txt          with `keep_train_text`: the training shards' text, which `vtx train
                             --subword-alpha` segments anew each epoch (`vtx.data.subword`)
    meta.json                languages, vocabulary, shard format, per split the counts kept and
                             filtered (by reason) and its shards; written last

Everything is written into a sibling temporary directory which replaces `destdir` only at the
end, so an interrupted or failed run leaves nothing that looks complete.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vtx import atomic, locking, manifest
from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from vtx.data.binarize import Encoder, PairFilter, binarize_split, token_dtype
from vtx.data.text import decode_line, lines_in_file, read_parallel, resolve_path
from vtx.data.vocab import MODEL_TYPES, Vocabulary, train_sentencepiece
from vtx.data.vocab import load as load_vocabulary
from vtx.errors import DataError, VocabularyTooSmallError
from vtx.progress_lines import LineProgress

FORMAT = "vtx-shards-1"
META_FILE = "meta.json"
SPM_FILE = "spm.model"
PAIR_VOCAB_FILE = "pair_vocab.bin"
# SentencePiece refuses an input_sentence_size of 1 to 100 (its `--sample-lines`).
MIN_SAMPLE_LINES = 100


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """What `vtx preprocess` was asked to do (flag names as in fairseq-preprocess)."""

    source_lang: str  # file suffix of the source side, e.g. "en"
    target_lang: str  # file suffix of the target side, e.g. "de"
    destdir: Path  # the data directory to create
    trainpref: str | None = None  # PREFIX of the training files (PREFIX.LANG[.gz])
    validpref: str | None = None  # PREFIX of the validation files, never filtered
    testprefs: tuple[str, ...] = ()  # test sets: splits test, test1, test2, ...; never filtered
    vocab_size: int = 37000  # pieces of the joint vocabulary, special ids included
    model_type: str = "bpe"  # "bpe" (the paper) or "unigram"
    spm_model: Path | None = None  # reuse this SentencePiece model instead of training one
    # Reuse the vocabulary this checkpoint carries (an imported model's pair vocabulary, or a
    # vtx run's SentencePiece model): the data a `vtx train --finetune-from` of it trains on.
    vocab_from: Path | None = None
    whole_word_symbols: Path | None = None  # file of tokens kept as single pieces, one a line
    sample_lines: int = 2_000_000  # at most this many random lines train the vocabulary
    workers: int = 1  # encoding processes
    max_positions: int = 1024  # training pairs longer (ids, + eos) are dropped, others refused
    max_length_ratio: float = 9.0  # training pairs whose length ratio exceeds this are dropped
    shard_size: int = 100_000  # input pairs per shard
    seed: int = 1  # seed of the vocabulary's line sample
    # Also keep the kept training pairs' text beside their ids (`SPLIT.NNNNN.txt`): what
    # subword regularization (`vtx train --subword-alpha`) segments anew each epoch.
    keep_train_text: bool = False
    force: bool = False  # replace a non-empty destdir

    def __post_init__(self) -> None:
        if self.trainpref is None and self.trains_vocabulary:
            raise DataError("--trainpref is needed to train a vocabulary (or give --spm-model "
                            "or --vocab-from)")
        if self.spm_model is not None and self.vocab_from is not None:
            raise DataError(f"--spm-model {self.spm_model} and --vocab-from {self.vocab_from} "
                            f"each give the vocabulary: leave one out")
        if self.whole_word_symbols is not None and self.vocab_from is not None:
            raise DataError("--whole-word-symbols shapes a new vocabulary; it cannot change "
                            f"--vocab-from {self.vocab_from}")
        if not (self.trainpref or self.validpref or self.testprefs):
            raise DataError("nothing to do: give --trainpref, --validpref or --testpref")
        if self.source_lang == self.target_lang:
            raise DataError(f"--source-lang and --target-lang are both {self.source_lang!r}")
        if self.model_type not in MODEL_TYPES:
            raise DataError(f"--model-type {self.model_type!r} is not one of {MODEL_TYPES}")
        for name in ("vocab_size", "sample_lines", "workers", "max_positions", "shard_size"):
            if getattr(self, name) <= 0:
                raise DataError(f"--{name.replace('_', '-')} must be positive, got "
                                f"{getattr(self, name)}")
        if self.sample_lines <= MIN_SAMPLE_LINES:  # else SentencePiece's internal check failed
            raise DataError(f"--sample-lines {self.sample_lines}: SentencePiece trains on more "
                            f"than {MIN_SAMPLE_LINES} lines; give at least "
                            f"{MIN_SAMPLE_LINES + 1}")
        if self.vocab_size <= EOS_ID + 1:
            raise DataError(f"--vocab-size {self.vocab_size} leaves no room beside the 4 "
                            f"special ids")
        if self.whole_word_symbols is not None and self.spm_model is not None:
            raise DataError("--whole-word-symbols shapes a new vocabulary; it cannot change "
                            f"--spm-model {self.spm_model}")
        if self.max_length_ratio < 1.0:
            raise DataError(f"--max-length-ratio must be >= 1, got {self.max_length_ratio}")

    @property
    def trains_vocabulary(self) -> bool:
        """Whether the vocabulary is trained here (neither --spm-model nor --vocab-from)."""
        return self.spm_model is None and self.vocab_from is None

    def splits(self) -> dict[str, str]:
        """Split name -> file prefix, in processing order."""
        named = {"train": self.trainpref, "valid": self.validpref}
        for i, prefix in enumerate(self.testprefs):
            named["test" if i == 0 else f"test{i}"] = prefix
        return {name: prefix for name, prefix in named.items() if prefix}


def _split_files(config: PreprocessConfig) -> dict[str, tuple[Path, Path]]:
    """Resolve every split's two files up front, so a missing one fails before any work."""
    return {name: (resolve_path(prefix, config.source_lang),
                   resolve_path(prefix, config.target_lang))
            for name, prefix in config.splits().items()}


def _check_destdir(destdir: Path, force: bool) -> None:
    if destdir.exists() and not destdir.is_dir():
        raise DataError(f"--destdir {destdir} exists and is not a directory")
    ancestor = next(p for p in destdir.absolute().parents if p.exists())
    if not ancestor.is_dir():
        raise DataError(f"--destdir {destdir}: {ancestor} is not a directory")
    if destdir.is_dir() and any(destdir.iterdir()) and not force:
        raise DataError(f"--destdir {destdir} exists and is not empty (use --force to "
                        f"replace it)")


def _check_replaced(destdir: Path) -> None:
    """With --force, refuse a non-empty `destdir` that is not a data directory, or holds
    checkpoints: the finished directory replaces it whole, deleting what it held."""
    if not destdir.is_dir() or not any(destdir.iterdir()):
        return
    runs = sorted(path.name for path in destdir.glob("checkpoint*.npz"))
    if runs:
        raise DataError(f"--destdir {destdir} holds checkpoints ({', '.join(runs[:3])}"
                        f"{', ...' if len(runs) > 3 else ''}): --force would delete them; "
                        f"choose another --destdir")
    if not (destdir / META_FILE).is_file():
        raise DataError(f"--destdir {destdir} is not a data directory of `vtx preprocess` (no "
                        f"{META_FILE}): --force replaces only those, deleting the folder whole; "
                        f"choose another --destdir, or empty it first")


def _check_inputs_outside(destdir: Path, config: PreprocessConfig,
                          files: dict[str, tuple[Path, Path]]) -> None:
    """Refuse a --destdir that holds an input file: the finished directory replaces it whole
    (with --force), which would delete the text it was built from."""
    flags = {"train": "--trainpref", "valid": "--validpref"}
    inputs = [(flags.get(name, "--testpref"), path) for name, pair in files.items()
              for path in pair]
    inputs += [(flag, Path(path)) for flag, path in (("--spm-model", config.spm_model),
               ("--vocab-from", config.vocab_from),
               ("--whole-word-symbols", config.whole_word_symbols)) if path is not None]
    folder = destdir.resolve()
    for flag, path in inputs:
        if folder in path.resolve().parents:
            raise DataError(f"--destdir {destdir} holds the input {path} ({flag}): the new data "
                            f"directory replaces the folder whole, which would delete it; "
                            f"write it into another folder")


def _no_training_pairs(config: PreprocessConfig, source: Path, target: Path,
                       filtered: dict[str, int]) -> None:
    """Raise DataError: every training pair was dropped (a data directory with nothing to
    train on would only make `vtx train` fail later)."""
    flags = {"empty": "empty", "too_long": f"longer than --max-positions {config.max_positions}",
             "length_ratio": f"past --max-length-ratio {config.max_length_ratio}"}
    reasons = ", ".join(f"{count:,} {flags.get(reason, reason)}"
                        for reason, count in filtered.items() if count)
    raise DataError(f"--trainpref: every pair of {source} and {target} was dropped ({reasons}): "
                    f"nothing to train on")


def _check_training_text(source: Path, target: Path) -> None:
    """Refuse training files without one non-blank line (SentencePiece's error would not say)."""
    if not any(src.strip() or tgt.strip() for src, tgt in read_parallel(source, target)):
        raise DataError(f"--trainpref: {source} and {target} hold no text (empty, or blank "
                        f"lines only)")


def _check_evaluation_text(flag: str, source: Path, target: Path) -> None:
    """Refuse empty validation or test files: a split of no pairs would have `vtx train`
    validate on nothing, logging loss 0 and perplexity 1 as its best."""
    if next(read_parallel(source, target), None) is None:
        raise DataError(f"{flag}: {source} and {target} are empty (no pair to evaluate on); "
                        f"give other files, or leave the flag out")


def _training_text(source: Path, target: Path) -> Iterator[str]:
    """Both sides of the training pairs as str, checked for UTF-8 and equal line counts."""
    for number, (src, tgt) in enumerate(read_parallel(source, target), start=1):
        yield decode_line(src, source, number)
        yield decode_line(tgt, target, number)


def read_symbols(path: Path) -> list[str]:
    """Tokens of a whole-word symbols file: one a line, blank lines and repeats skipped.

    A repeated symbol is harmless (e.g. the brackets of two treebanks merged into one file), but
    SentencePiece refuses a symbol defined twice, so only the first of each is kept.

    Raises:
        DataError: the file is missing, not UTF-8, or a line holds two tokens (file and line named).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"--whole-word-symbols {path}: cannot read it: {err}") from None
    symbols = []
    for number, line in enumerate(lines, start=1):
        tokens = line.split()
        if len(tokens) > 1:
            raise DataError(f"{path}, line {number}: one symbol a line, got {line!r}")
        symbols.extend(token for token in tokens if token not in symbols)
    return symbols


def _vocabulary(config: PreprocessConfig, files: dict, workdir: Path) -> Vocabulary:
    model_path = workdir / SPM_FILE
    if config.vocab_from is not None:
        return _checkpoint_vocabulary(config.vocab_from, workdir)
    if config.spm_model is not None:
        Vocabulary(config.spm_model)  # validates the file and its special ids first
        shutil.copyfile(config.spm_model, model_path)
        return Vocabulary(model_path)
    symbols = read_symbols(config.whole_word_symbols) if config.whole_word_symbols else []
    try:
        return train_sentencepiece(_training_text(*files["train"]), model_path,
                                   config.vocab_size, config.model_type, config.sample_lines,
                                   config.seed, num_threads=config.workers, whole_words=symbols)
    except VocabularyTooSmallError as err:  # SentencePiece's words name its own flags
        raise DataError(_too_small_message(err, len(symbols))) from None


def _checkpoint_vocabulary(path: Path, workdir: Path) -> Vocabulary:
    """The vocabulary the checkpoint `path` carries, written into `workdir` (spm.model, or
    pair_vocab.bin for a pair vocabulary) and checked against its model's embeddings.

    Raises:
        DataError: the checkpoint does not load, carries no vocabulary, or one of another size
            than its model's ids (`--vocab-from` and the file named).
    """
    from vtx import checkpoints
    from vtx.data import pair_vocab
    from vtx.errors import CheckpointError

    try:
        checkpoint = checkpoints.load(path)
    except (CheckpointError, OSError, ValueError) as err:
        raise DataError(f"--vocab-from {path}: {err}") from None
    if checkpoint.vocab is None:
        raise DataError(f"--vocab-from {path}: the checkpoint carries no vocabulary")
    name = PAIR_VOCAB_FILE if pair_vocab.is_pair_vocabulary(checkpoint.vocab) else SPM_FILE
    (workdir / name).write_bytes(checkpoint.vocab)
    vocab = load_vocabulary(workdir / name, f"the vocabulary of --vocab-from {path}")
    size = checkpoint.meta["model_config"]["vocab_size"]
    if vocab.size != size:
        raise DataError(f"--vocab-from {path}: its vocabulary has {vocab.size} ids, its model "
                        f"{size}")
    return vocab


def vocabulary_file(vocab: Vocabulary) -> str:
    """The data directory's file name of `vocab` (a pair vocabulary's or SentencePiece's)."""
    from vtx.data.pair_vocab import PairVocabulary

    return PAIR_VOCAB_FILE if isinstance(vocab, PairVocabulary) else SPM_FILE


def _too_small_message(err: VocabularyTooSmallError, num_symbols: int) -> str:
    """The refusal in vtx's flags; SentencePiece's minimum counts one piece per symbol too."""
    if not num_symbols:
        return (f"--vocab-size {err.vocab_size} is too small for the characters of the training "
                f"text: SentencePiece needs at least {err.minimum} pieces for them; raise "
                f"--vocab-size to at least {err.minimum}")
    return (f"--vocab-size {err.vocab_size} is too small for the characters of the training "
            f"text and the --whole-word-symbols: SentencePiece needs at least {err.minimum} "
            f"pieces for them, {num_symbols} of them for the {num_symbols} symbols; raise "
            f"--vocab-size to at least {err.minimum}")


def _meta(config: PreprocessConfig, vocab: Vocabulary, files: dict, splits: dict) -> dict:
    return {
        "format": FORMAT,
        "source_lang": config.source_lang,
        "target_lang": config.target_lang,
        "vocab": {"model": vocabulary_file(vocab), "size": vocab.size,
                  "trained": config.trains_vocabulary,
                  "model_type": config.model_type if config.trains_vocabulary else None,
                  "whole_word_symbols": (str(config.whole_word_symbols)
                                         if config.whole_word_symbols else None),
                  "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}},
        "token_dtype": token_dtype(vocab.size),
        "max_positions": config.max_positions,
        "max_length_ratio": config.max_length_ratio,
        "keep_train_text": config.keep_train_text,
        "splits": {name: {"source_file": str(files[name][0]), "target_file": str(files[name][1]),
                          **stats} for name, stats in splits.items()},
    }


def preprocess(config: PreprocessConfig,
               log: Callable[[str], None] = lambda line: None) -> dict:
    """Build the data directory `config.destdir`; return its meta (as written to meta.json).
    `log` is told what is under way: the vocabulary's training, then each split's pairs encoded
    (at most a line every 10 s, with the time left).

    Raises:
        DataError: any bad input (missing file, unequal line counts, invalid UTF-8, non-empty
            destdir without `force`, bad model); nothing is left in `destdir` then.
        OutputLockedError: another process writes `destdir` (`vtx.locking`).
    """
    # Checked and written under the lock: else a second run could pass the checks while the
    # first works, then replace its output without --force.
    with locking.output_lock(config.destdir, "--destdir"):
        return _preprocess(config, log)


def _preprocess(config: PreprocessConfig, log: Callable[[str], None]) -> dict:
    destdir = Path(config.destdir)
    _check_destdir(destdir, config.force)
    files = _split_files(config)
    _check_inputs_outside(destdir, config, files)
    _check_replaced(destdir)
    for name, (source, target) in files.items():
        if name == "train":
            _check_training_text(source, target)
        else:
            _check_evaluation_text("--validpref" if name == "valid" else "--testpref", source,
                                   target)
    try:
        destdir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"--destdir {destdir}: cannot create its parent folder ({err})") from None
    with atomic.new_directory(destdir) as workdir:
        started = time.perf_counter()
        if config.trains_vocabulary:
            log(f"training the vocabulary (SentencePiece {config.model_type}, "
                f"{config.vocab_size:,} pieces) on up to {config.sample_lines:,} random lines "
                f"of {files['train'][0].name} and {files['train'][1].name}")
        vocab = _vocabulary(config, files, workdir)
        if config.trains_vocabulary:
            log(f"vocabulary trained in {time.perf_counter() - started:.1f} s")
        splits = {}
        train_filter = PairFilter(config.max_positions, config.max_length_ratio)
        length_check = PairFilter(config.max_positions, config.max_length_ratio, drop=False)
        with Encoder(workdir / vocabulary_file(vocab), config.workers) as encoder:
            for name, (source, target) in files.items():
                progress = LineProgress(log, f"{name}: encoded", lines_in_file(source),
                                        words=False)
                splits[name] = binarize_split(
                    encoder, source, target, workdir / name, vocab.size, config.shard_size,
                    train_filter if name == "train" else length_check, progress,
                    keep_text=config.keep_train_text and name == "train")
                if name == "train" and not splits[name]["sentences"]:
                    _no_training_pairs(config, source, target, splits[name]["filtered"])
        meta = _meta(config, vocab, files, splits)
        meta["seconds"] = round(time.perf_counter() - started, 3)
        (workdir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        manifest.write(workdir)  # last: it lists every other file
    return meta
