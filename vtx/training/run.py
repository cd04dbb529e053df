"""`vtx train` as a library call: a preprocessed data directory in, checkpoints out."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from vtx import atomic, checkpoints, config
from vtx.config import ModelConfig, TrainConfig
from vtx.training import finetune

if TYPE_CHECKING:  # the data modules are imported where used, as below
    from vtx.data.directory import DataDirectory

CONFIG_FILE = "config.json"


def resolve_model_config(data_dir, arch: str, overrides: dict,
                         vocab_size: int | None = None) -> ModelConfig:
    """The preset `arch` with `vocab_size` (default: the data's, else the preset's) and
    `overrides` (None values ignored)."""
    if vocab_size is None and data_dir:
        from vtx.data.directory import opened

        vocab_size = opened(data_dir).vocab_size
    return config.preset(arch, vocab_size=vocab_size, **overrides)


def dry_run(data_dir, arch: str, overrides: dict,
            vocab_size: int | None = None) -> tuple[ModelConfig, int]:
    """The model `train` would build (see `resolve_model_config`) and its parameter count."""
    from vtx.models import transformer

    model_config = resolve_model_config(data_dir, arch, overrides, vocab_size)
    return model_config, transformer.build(model_config).count_params()


def check_run_config(save_dir: Path, model_config: ModelConfig) -> None:
    """Refuse a save dir whose config.json describes another model (reads, writes nothing).

    Raises:
        ValueError: config.json unreadable (the path named).
        checkpoints.ArchitectureError: config.json describes another model (a ValueError).
    """
    path = save_dir / CONFIG_FILE
    if not path.exists():
        return
    try:
        previous = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error}); move it away to start over") from error
    recorded = previous.get("model") if isinstance(previous, dict) else None
    if not isinstance(recorded, dict):
        found = (f"its model {recorded!r:.60}" if isinstance(previous, dict)
                 else f"{previous!r:.60}")
        raise ValueError(f"{path}: not the configuration `vtx train` writes ({found}, not a "
                         f"JSON object of the model's settings); move it away to start over")
    checkpoints.check_architecture(model_config.to_dict(), recorded, path,
                                   "use a new --save-dir or the same model flags")


def write_run_config(save_dir: Path, data_dir, arch: str | None, model_config: ModelConfig,
                     train_config: TrainConfig, finetuned_from: str | None = None) -> None:
    """Save the resolved configuration beside the checkpoints (once `check_run_config` passed);
    `arch` None: a fine-tuning's model, the checkpoint's (`finetuned_from`)."""
    path = save_dir / CONFIG_FILE
    record = {"arch": arch, "data_dir": str(Path(data_dir).resolve()),
              "model": model_config.to_dict(), "train": train_config.to_dict(),
              "finetuned_from": finetuned_from}
    save_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def train(data_dir, save_dir, arch: str, overrides: dict, train_config: TrainConfig,
          devices: list[str] | None = None, tensorboard_dir: str | None = None,
          log: Callable[[str], None] = print, eval_metric: str | None = None,
          eval_options: dict | None = None, prefetch: int = 2,
          profile: tuple[int, int] | None = None,
          finetune_from: str | Path | None = None) -> int | None:
    """Train (or resume) on `data_dir`, writing to `save_dir`.

    Args:
        arch: the preset; None with `finetune_from` (the checkpoint's model).
        finetune_from: a checkpoint whose weights a new run starts from, with a fresh optimizer,
            schedule and data position (`vtx.training.finetune`); ignored (said) where
            `save_dir` holds checkpoints, which the run resumes from.
        prefetch: training batches read and placed on the devices ahead (`Trainer`).
        profile: (first, last): updates traced by TensorFlow's profiler (`Trainer`).
        eval_metric: "bleu" or "f1": decode and score the validation set at each validation
            (`vtx.training.validation`); `eval_options` go to its scorer (gold_path, beam,
            lenpen).

    Returns:
        None when max_steps was reached (or the time budget or patience ran out), else the
        signal number that stopped training.

    Raises:
        ValueError: a bad configuration, data directory or gold file (named).
        TrainingError: training cannot go on (out of memory, diverged, another worker gone).
    """
    from vtx.training.distribute import make_strategy, topology
    from vtx.training.loop import peer_failures_said

    # First: MultiWorkerMirroredStrategy must precede other TF ops.
    strategy = make_strategy(devices, log=log)
    # The workers agree from the Trainer's start (precision, resume): one gone fails a collective.
    with peer_failures_said(topology(strategy).num_workers):
        return _train(strategy, data_dir, save_dir, arch, overrides, train_config,
                      tensorboard_dir, log, eval_metric, eval_options, prefetch, profile,
                      finetune_from)


def _train(strategy, data_dir, save_dir, arch, overrides, train_config, tensorboard_dir, log,
           eval_metric, eval_options, prefetch, profile, finetune_from) -> int | None:
    from vtx.data.directory import DataDirectory

    save_dir = Path(save_dir)
    data = DataDirectory.open(data_dir)  # names a missing or damaged meta.json
    model_config, start = (
        _finetuned_model(save_dir, finetune_from, data, arch, overrides, log) if finetune_from
        else (resolve_model_config(data, arch, overrides), None))
    _check_outside_data(save_dir, data)
    # Nothing is written into save_dir before the configuration, the data and the checkpoints
    # agree: a refused run must not block a later correct one.
    check_run_config(save_dir, model_config)
    has_valid = _has_validation(data, train_config, eval_metric, log)
    with _subword_sampling(data, train_config, save_dir, log) as sampler:
        return _train_on(strategy, data, sampler, save_dir, arch, model_config, start, has_valid,
                         train_config, tensorboard_dir, log, eval_metric, eval_options, prefetch,
                         profile, finetune_from)


def _train_on(strategy, data, sampler, save_dir, arch, model_config, start, has_valid,
              train_config, tensorboard_dir, log, eval_metric, eval_options, prefetch, profile,
              finetune_from) -> int | None:
    """`_train` from the batch shapes on: chosen over `sampler`'s view of the data where the
    training text is sampled anew each epoch (`vtx.data.subword`), else over `data`."""
    from vtx.data import pipeline
    from vtx.training.trainer import Trainer

    splits = ("train", "valid") if has_valid else ("train",)
    shaped = sampler.shapes_view(model_config.max_positions) if sampler else data
    boundaries = pipeline.bucket_boundaries_for(
        shaped, splits, **pipeline.shape_policy(train_config.jit_compile,
                                                    train_config.max_shapes),
        max_tokens=train_config.max_tokens)
    for split in splits:
        pipeline.check_positions(shaped, split, model_config.max_positions)
        pipeline.check_max_tokens(shaped, split, train_config.max_tokens, boundaries)
    vocab = data.vocabulary_path.read_bytes()
    trainer = Trainer(model_config, train_config, save_dir, strategy=strategy, log=log,
                      vocab=vocab, tensorboard_dir=tensorboard_dir, prefetch=prefetch,
                      profile=profile)
    score_valid = None
    if eval_metric:
        from vtx.training import validation

        score_valid = validation.make_scorer(
            trainer.model, data, eval_metric, max_tokens=train_config.max_tokens,
            warn=lambda message: log(f"warning: validation: {message}"), **(eval_options or {}))
    packed = _packing(shaped, train_config, model_config, boundaries, splits, log)
    trainer.state.training_data = data.training_data()
    trainer.resume()
    if finetune_from and trainer.checkpointer.resumed_from is None:
        _start_finetuning(trainer, finetune_from, start, data)
    del start  # the weights are on the devices: the host's copy is not kept for the run
    # Kept lengths are checked against the deterministic pairs: sampled ones they do not hold
    # fall back to those.
    boundaries = _resumed_boundaries(trainer, boundaries, data, splits, log)
    packed = _resumed_packing(trainer, packed, log)
    # One writer: workers may share the save dir (hosts and pids apart, their temporaries could
    # meet or be taken for a dead process's). A run with nothing to train keeps the record of the
    # run that trained.
    if trainer.engine.topology.is_chief and not trainer.nothing_to_train():
        write_run_config(save_dir, data, arch, model_config, train_config,
                         trainer.state.finetuned_from)
    shards, shard = trainer.engine.topology.num_workers, trainer.engine.topology.worker_index
    said = arch if arch else f"fine-tuned from {trainer.state.finetuned_from}"
    log(f"model: {said}, {trainer.model.count_params()} parameters; "
        f"{strategy.num_replicas_in_sync} replicas on {shards} worker(s); "
        f"{train_config.max_tokens} tokens per replica x {train_config.update_freq} micro-batches")

    # Each bucket's sides padded to their own longest (a parser's sources are shorter than their
    # trees); derived from the data and the lengths, so a resumed run cuts the same batches.
    sides = pipeline.side_lengths_for(shaped, splits, boundaries,
                                      pipeline.shape_policy(train_config.jit_compile)["step"])
    shapes = _training_shapes(shaped, train_config, boundaries, sides, packed, has_valid, log)
    make_epoch, make_valid = _batch_readers(data, train_config, boundaries, sides, packed,
                                            shards, shard, sampler, model_config.max_positions)
    return trainer.fit(make_epoch, make_valid if has_valid else None, score_valid, shapes)


@contextlib.contextmanager
def _subword_sampling(data: DataDirectory, train_config: TrainConfig, save_dir: Path,
                      log: Callable[[str], None]):
    """The run's `SubwordSampler` (`--subword-alpha`; None without), writing its epochs into a
    folder of this process's own in the save dir, removed when the block ends.

    Raises:
        DataError: the data directory keeps no training text.
        ArgumentError: a setting its vocabulary's type refuses.
    """
    if train_config.subword_alpha is None:
        yield None
        return
    from vtx.data import subword

    subword.check_sampling(data, train_config.subword_alpha, train_config.subword_nbest)
    save_dir.mkdir(parents=True, exist_ok=True)
    with atomic.scratch_directory(save_dir / "subword") as folder:
        sampler = subword.SubwordSampler(data, train_config.subword_alpha,
                                         train_config.subword_nbest, train_config.seed, folder,
                                         log)
        nbest = train_config.subword_nbest
        log(f"subword regularization: each epoch the training text segmented anew "
            f"({'BPE-dropout' if sampler.model_type == 'bpe' else 'unigram sampling'}, alpha "
            f"{train_config.subword_alpha:g}"
            f"{f', among the {nbest} best' if nbest else ''}); validation as preprocessed")
        yield sampler


def _finetuned_model(save_dir: Path, finetune_from, data: DataDirectory, arch: str | None,
                     overrides: dict, log: Callable[[str], None]):
    """(the model configuration, the checkpoint to start from) of a fine-tuning run: the model of
    `finetune_from`, or where the save dir holds checkpoints (the run resumes from them) of its
    newest, whose start is then not read (None).

    Raises:
        ValueError: the checkpoint does not load, --arch or a size flag disagrees with its
            model, or the data's vocabulary is not its (`vtx.training.finetune`).
    """
    resumed = finetune.resumed_model_config(save_dir, finetune_from, log)
    if resumed is not None:
        return finetune.model_config(*resumed, arch, overrides), None
    start = finetune.load_start(finetune_from)
    finetune.check_vocabulary(start, finetune_from, data)
    return finetune.model_config(start.meta["model_config"], finetune_from, arch, overrides), start


def _start_finetuning(trainer, finetune_from, start, data: DataDirectory) -> None:
    """Load the weights of `start`, the checkpoint `finetune_from`, into a trainer that resumed
    nothing; read now where `_finetuned_model` left it (None: the save dir's checkpoints were
    listed, but none loaded).

    Raises:
        ValueError: it does not load, or the data's vocabulary is not its.
    """
    if start is None:
        start = finetune.load_start(finetune_from)
        finetune.check_vocabulary(start, finetune_from, data)
    trainer.checkpointer.start_from(start, finetune_from, trainer.state)


def _has_validation(data: DataDirectory, train_config: TrainConfig, eval_metric: str | None,
                    log: Callable[[str], None]) -> bool:
    """Whether the run validates: `data` has a validation split of some pairs. Warns when
    the run would validate but there is none.

    Raises:
        ValueError: no training pairs, or a flag that needs validations (--patience, --eval-*,
            the best checkpoint by BLEU or F1) without them (named).
    """
    data_splits = data.splits
    if not data_splits.get("train", {}).get("sentences"):
        found = "0 pairs kept" if "train" in data_splits else "no train split"
        raise ValueError(f"{data} holds no training pairs (its meta.json: {found}): "
                         f"`vtx preprocess --trainpref` writes them")
    # A split of 0 pairs (written by vtx preprocess before it refused empty files) is none:
    # validating on it logged loss 0, perplexity 1, as the best.
    has_valid = bool(data_splits.get("valid", {}).get("sentences"))
    metric = train_config.best_checkpoint_metric
    if metric != "loss" and metric != eval_metric:
        raise ValueError(f"the best checkpoint by {metric} needs {metric} computed at each "
                         f"validation (--eval-{'bleu' if metric == 'bleu' else 'f1'})")
    if eval_metric and not (has_valid and train_config.validate_interval_steps):
        raise ValueError(f"--eval-{eval_metric}: {eval_metric} at each validation needs a "
                         f"validation split in {data} and --validate-interval-steps above 0 "
                         f"(now {train_config.validate_interval_steps})")
    if train_config.patience and not (has_valid and train_config.validate_interval_steps):
        raise ValueError(f"--patience {train_config.patience} counts validations: it needs a "
                         f"validation split in {data} and --validate-interval-steps above 0 "
                         f"(now {train_config.validate_interval_steps})")
    if train_config.validate_ema and not (has_valid and train_config.validate_interval_steps):
        raise ValueError(f"--validate-with-ema scores the averaged weights at each validation: it "
                         f"needs a validation split in {data} and --validate-interval-steps "
                         f"above 0 (now {train_config.validate_interval_steps})")
    if not has_valid and train_config.validate_interval_steps:
        log(f"warning: {data} has no validation split (`vtx preprocess --validpref`): this "
            f"run does not validate, so it keeps no checkpoint_best")
    return has_valid


def _training_shapes(data: DataDirectory, train_config: TrainConfig, boundaries: list[int], sides,
                     packed: list | None, has_valid: bool, log: Callable[[str], None]) -> list:
    """The training batches' shapes (`packed`, or the buckets' at `boundaries` and `sides`),
    said with the share of their positions that hold a real token, and the validation
    batches' (the buckets') when they differ."""
    from vtx.data import pipeline
    from vtx.training.compiling import format_shape

    shapes = pipeline.batch_shapes(train_config.max_tokens, boundaries, sides)
    if packed:
        from vtx.data import packing

        if has_valid:
            log("batch shapes (rows x length, or rows x source x target), validation: "
                + ", ".join(format_shape(shape) for shape in shapes))
        fill = packing.packed_fill(data, packed, seed=train_config.seed)
        log(f"training batches packed, several pairs a row: "
            f"{', '.join(format_shape(shape) for shape in packed)}; "
            f"{fill:.3f} of their positions hold a real token")
        return packed
    fill = pipeline.position_fill(data, "train", train_config.max_tokens, boundaries, sides)
    log(f"batch shapes (rows x length, or rows x source x target), "
        f"{'training and validation' if has_valid else 'training'}: "
        + ", ".join(format_shape(shape) for shape in shapes))
    log(f"padding: {fill:.3f} of the training batches' positions hold a real token "
        f"({len(shapes)} shapes; --max-shapes sets how many, --pack packs pairs instead)")
    return shapes


def _batch_readers(data: DataDirectory, train_config: TrainConfig, boundaries: list[int], sides,
                   packed: list | None, shards: int, shard: int, sampler=None,
                   max_positions: int | None = None) -> tuple[Callable, Callable]:
    """(make_epoch, make_valid) for `Trainer.fit`: `make_epoch(epoch, skip)` gives this worker's
    training batches of an epoch (packed, or in buckets), after the first `skip`, of `data`'s
    pairs or of `sampler`'s for the epoch (`vtx.data.subword`: each sampled pair that the batch
    shapes or `max_positions` do not hold as preprocessed); `make_valid()` the validation
    batches, read once and kept."""
    from vtx.data import pipeline
    from vtx.data.directory import checked_reading

    def fits(source, target):  # int [n] source and target_in lengths -> bool [n]
        if packed:
            from vtx.data import packing

            held = packing.fits_packed(source, target, packed)
        else:
            held = pipeline.fits_buckets(source, target, boundaries, sides)
        return held & (np.maximum(source, target) <= max_positions)

    def make_epoch(epoch: int, skip: int):
        pairs = sampler.epoch(epoch, fits) if sampler else data
        if packed:
            from vtx.data import packing

            batches = packing.packed_batches(
                pairs, packed, seed=train_config.seed, epoch=epoch, skip_batches=skip,
                num_shards=shards, shard_index=shard)
        else:
            batches = pipeline.train_batches(
                pairs, max_tokens=train_config.max_tokens, seed=train_config.seed,
                epoch=epoch, skip_batches=skip, num_shards=shards, shard_index=shard,
                bucket_boundaries=boundaries, side_lengths=sides).as_numpy_iterator()
        # A shard is read (tf.data) or mapped (packing) as an epoch goes, long after the start
        # checked it: one damaged since is named.
        return checked_reading(batches, pairs)

    cached = []

    def make_valid():
        if not cached:
            cached.extend(_without_index(b) for b in pipeline.eval_batches(
                data, "valid", train_config.max_tokens, bucket_boundaries=boundaries,
                side_lengths=sides).as_numpy_iterator())
        return cached

    return make_epoch, make_valid


def _check_outside_data(save_dir: Path, data_dir) -> None:
    """Refuse a save dir that is the data directory or inside it: `vtx preprocess --force`
    replaces that directory whole, and with it the checkpoints (it deleted a run's).

    Raises:
        ValueError: the save dir is there (both named).
    """
    if "://" in str(save_dir) or "://" in str(data_dir):  # a URL: left to TensorFlow
        return
    save, data = save_dir.resolve(), Path(data_dir).resolve()
    if save == data or data in save.parents:
        raise ValueError(f"--save-dir {save_dir} is {'' if save == data else 'inside '}the data "
                         f"directory {data_dir}: `vtx preprocess --force` there would delete the "
                         f"checkpoints with it; use a --save-dir outside it")


def _resumed_boundaries(trainer, boundaries: list[int], data: DataDirectory,
                        splits: tuple[str, ...],
                        log: Callable[[str], None]) -> list[int]:
    """The padded lengths of this run's batches, recorded in the trainer's checkpoints: a resumed
    run keeps its checkpoint's (those of a checkpoint from before they were recorded: the 8
    multiples of 8 used then), so that its data position names the same batches whatever the
    flags (`--jit` picks other lengths).

    Raises:
        ValueError: --max-tokens cannot hold the longest pair at the kept lengths.
    """
    from vtx.data import pipeline

    if trainer.state.step:
        kept = (trainer.state.bucket_boundaries
                or pipeline.bucket_boundaries_for(data, splits))
        if kept != boundaries:
            log(f"batch lengths kept from the checkpoint so that the data resumes where it was: "
                f"{kept} (a new run with these flags would use {boundaries})")
            for split in splits:
                pipeline.check_max_tokens(data, split, trainer.config.max_tokens, kept)
            boundaries = kept
    trainer.state.bucket_boundaries = boundaries
    return boundaries


def _packing(data: DataDirectory, train_config: TrainConfig, model_config: ModelConfig,
             boundaries: list[int], splits: tuple[str, ...],
             log: Callable[[str], None]) -> list[tuple[int, int, int]] | None:
    """The packed shapes of a new run's training batches, None for buckets: `--no-pack`;
    `--pack`: the packing of the fewest FLOPs an epoch (`packing.choose_shapes`); by default
    that packing with XLA where it costs fewer FLOPs than the buckets (packed rows are long,
    and attention grows with their length)."""
    if train_config.pack is False or (train_config.pack is None
                                      and not train_config.jit_compile):
        return None
    from vtx.data import packing, pipeline
    from vtx.training.compiling import format_shape

    step = pipeline.shape_policy(train_config.jit_compile)["step"]
    sides = pipeline.side_lengths_for(data, splits, boundaries, step)
    shapes, ratio = packing.choose_shapes(
        data, train_config.max_tokens, step, model_config,
        pipeline.epoch_batch_counts(data, "train", train_config.max_tokens, boundaries, sides),
        all_positions_projected=train_config.jit_compile, seed=train_config.seed)
    packed = train_config.pack or ratio < 1
    log(f"training batches {'packed' if packed else 'in length buckets'} (--pack/--no-pack "
        f"choose): packed rows {' + '.join(format_shape(shape) for shape in shapes)} cost "
        f"{ratio:.3f} of the buckets' FLOPs an epoch (estimated)")
    return shapes if packed else None


def _resumed_packing(trainer, packed: list[tuple[int, int, int]] | None,
                     log: Callable[[str], None]) -> list[tuple[int, int, int]] | None:
    """The training batches' packing, recorded in the trainer's checkpoints: a resumed run keeps
    its checkpoint's (packed rows of its shapes, or buckets), so that its data position names
    the same batches whatever the flags."""
    from vtx.training.compiling import format_shape

    def said(shapes):
        return ("packed rows " + " + ".join(format_shape(shape) for shape in shapes) if shapes
                else "buckets")

    state = trainer.state
    if state.step and state.packed_shapes != packed:
        log(f"training batches kept as the checkpoint's so that the data resumes where it was: "
            f"{said(state.packed_shapes)} (a new run with these flags would use {said(packed)})")
        packed = state.packed_shapes
    state.packed_shapes = packed
    return packed


def _without_index(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "index"}
