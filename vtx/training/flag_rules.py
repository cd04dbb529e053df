"""The rules between `vtx train`'s flags, and between them and the data, in one place: each
refusal names the flags (and the data directory) it concerns. A `FlagError` is a usage error of
the command; no TensorFlow import."""

from __future__ import annotations

from typing import Callable

from vtx.config import TrainConfig
from vtx.errors import FlagError


def check_command(dry_run: bool, finetune_from, vocab_size: int | None, data_dir,
                  save_dir) -> None:
    """Refuse `vtx train` flags that the kind of command (a dry run, or a run) excludes or
    needs.

    Raises:
        FlagError: the first such flag.
    """
    if finetune_from and dry_run:
        raise FlagError("--dry-run builds a preset's model; --finetune-from trains the "
                        "checkpoint's (leave one out)")
    if dry_run:
        return
    if vocab_size is not None:  # said, not ignored: training takes the data's vocabulary
        raise FlagError(f"--vocab-size {vocab_size} goes with --dry-run: a run trains on the "
                        f"data directory's vocabulary")
    if not data_dir or not save_dir:
        raise FlagError("DATA_DIR and --save-dir are required (or use --dry-run)")


def check_xla_cache(jit_compile: bool, xla_cache_dir) -> None:
    """Refuse --xla-cache-dir without XLA (--jit, given or by default).

    Raises:
        FlagError: it is.
    """
    if xla_cache_dir and not jit_compile:
        raise FlagError("--xla-cache-dir goes with --jit")


def eval_metric(bleu: bool, gold: str | None) -> str | None:
    """The task metric of each validation: "bleu" (--eval-bleu), "f1" (--eval-f1 GOLD) or None.

    Raises:
        FlagError: both asked for.
    """
    if bleu and gold:
        raise FlagError("--eval-bleu and --eval-f1 exclude each other (one task metric)")
    return "bleu" if bleu else "f1" if gold else None


def check_flags(metric: str | None, beam: int | None, lenpen: float | None,
                constrain_trees: bool, train_options: dict) -> None:
    """Refuse flags that act on another flag not given, before a `TrainConfig` is made of
    `train_options` (its fields' values).

    Raises:
        FlagError: the first such flag, with the flag it goes with.
    """
    for flag, value in (("--eval-beam", beam), ("--eval-lenpen", lenpen)):
        if value is not None and not metric:
            raise FlagError(f"{flag} {value} goes with --eval-bleu or --eval-f1 (the search of "
                            f"each validation's metric)")
    for flag, key in (("--ema-start-step", "ema_start_step"),
                      ("--validate-with-ema", "validate_ema")):
        if train_options.get(key) and train_options.get("ema_decay") is None:
            raise FlagError(f"{flag} goes with --ema-decay (the average it acts on)")
    if (train_options.get("subword_nbest") is not None
            and train_options.get("subword_alpha") is None):
        raise FlagError("--subword-nbest goes with --subword-alpha (the sampling it bounds)")
    if constrain_trees and metric != "f1":
        raise FlagError("--eval-constrain-trees goes with --eval-f1")


def check_validation(data, train_config: TrainConfig, metric: str | None,
                     log: Callable[[str], None]) -> bool:
    """Whether the run validates: `data` (a `DataDirectory`) has a validation split of some
    pairs. Warns when the run would validate but there is none.

    Raises:
        ValueError: no training pairs, or a flag that needs validations (--patience, --eval-*,
            the best checkpoint by BLEU or F1) without them (named).
    """
    data_splits = data.splits
    if not data_splits.get("train", {}).get("sentences"):
        found = "0 pairs kept" if "train" in data_splits else "no train split"
        raise ValueError(f"{data} holds no training pairs (its meta.json: {found}): "
                         f"`vtx preprocess --trainpref` writes them")
    # A split of 0 pairs is none: validating on it would log loss 0, perplexity 1, as the best.
    has_valid = bool(data_splits.get("valid", {}).get("sentences"))
    best = train_config.best_checkpoint_metric
    if best != "loss" and best != metric:
        raise ValueError(f"the best checkpoint by {best} needs {best} computed at each "
                         f"validation (--eval-{'bleu' if best == 'bleu' else 'f1'})")
    validates = has_valid and train_config.validate_interval_steps
    interval = (f"a validation split in {data} and --validate-interval-steps above 0 (now "
                f"{train_config.validate_interval_steps})")
    if metric and not validates:
        raise ValueError(f"--eval-{metric}: {metric} at each validation needs {interval}")
    if train_config.patience and not validates:
        raise ValueError(f"--patience {train_config.patience} counts validations: it needs "
                         f"{interval}")
    if train_config.validate_ema and not validates:
        raise ValueError(f"--validate-with-ema scores the averaged weights at each validation: "
                         f"it needs {interval}")
    if not has_valid and train_config.validate_interval_steps:
        log(f"warning: {data} has no validation split (`vtx preprocess --validpref`): this "
            f"run does not validate, so it keeps no checkpoint_best")
    return has_valid
