"""`vtx train` as a library call: a preprocessed data directory in, checkpoints out.

The story of a run: open the data and the save dir, settle the model (a preset, or a
fine-tuning's checkpoint), check the flags against the data, build the trainer, choose a new
run's batches, resume (the checkpoint's batches kept), and train.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from vtx import config
from vtx.config import ModelConfig, TrainConfig
from vtx.training import finetune
from vtx.training.directory import RunDirectory, vocabulary_line


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


def train(data_dir, save_dir, arch: str | None, overrides: dict, train_config: TrainConfig,
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
    from vtx.data import subword
    from vtx.data.batching import BatchPlan
    from vtx.data.directory import DataDirectory
    from vtx.training import flag_rules
    from vtx.training.distribute import make_strategy, topology
    from vtx.training.loop import peer_failures_said
    from vtx.training.trainer import Trainer

    # First: MultiWorkerMirroredStrategy must precede other TF ops.
    strategy = make_strategy(devices, log=log)
    # The workers agree from the Trainer's start (precision, resume): one gone fails a collective.
    with peer_failures_said(topology(strategy).num_workers):
        data = DataDirectory.open(data_dir)  # names a missing or damaged meta.json
        run_dir = RunDirectory.open(save_dir)
        model_config, start = (
            finetune.model_and_start(run_dir, finetune_from, data, arch, overrides, log)
            if finetune_from else (resolve_model_config(data, arch, overrides), None))
        # Nothing is written into the save dir before the configuration, the data and the
        # checkpoints agree: a refused run must not block a later correct one.
        run_dir.check_outside(data)
        run_dir.check_config(model_config)
        has_valid = flag_rules.check_validation(data, train_config, eval_metric, log)
        splits = ("train", "valid") if has_valid else ("train",)
        with subword.sampling(data, train_config, run_dir.path, log) as sampler:
            trainer = Trainer(model_config, train_config, run_dir, strategy=strategy, log=log,
                              vocab=data.vocabulary_path.read_bytes(), prefetch=prefetch,
                              tensorboard_dir=tensorboard_dir, profile=profile)
            # Batches cut from the training text sampled anew each epoch where it is
            # (`vtx.data.subword`), from the data as preprocessed otherwise.
            shaped = sampler.shapes_view(model_config.max_positions) if sampler else data
            new_run = BatchPlan.choose(shaped, splits, train_config, model_config, log)
            score_valid = _scorer(trainer, data, eval_metric, eval_options, train_config, log)
            trainer.state.training_data = data.training_data()
            trainer.resume()  # first: a checkpoint of another model or vocabulary is refused
            plan = (BatchPlan.from_meta(run_dir.newest_meta, new_run, data, shaped, splits,
                                        train_config, log) if run_dir.resumes else new_run)
            trainer.state.batches = plan
            if finetune_from and trainer.resumed_from is None:
                finetune.start_from(trainer, finetune_from, start, data)
            del start  # the weights are on the devices: the host's copy is not kept for the run
            workers = trainer.topology
            # One writer: workers may share the save dir. A run with nothing to train keeps the
            # record of the run that trained.
            if workers.is_chief and not trainer.nothing_to_train():
                run_dir.write_config(data, arch, model_config, train_config,
                                     trainer.state.finetuned_from)
            # The shape first: a preset's name alone reads as the paper's model of that name.
            said = f"from preset {arch}" if arch else (
                f"fine-tuned from {trainer.state.finetuned_from}")
            log(f"model: {model_config.num_layers} layers, d_model {model_config.d_model}, "
                f"d_ff {model_config.d_ff}, {model_config.num_heads} heads, "
                f"{trainer.model.count_params():,} parameters ({said}); "
                f"{strategy.num_replicas_in_sync} replicas on {workers.num_workers} worker(s); "
                f"{train_config.max_tokens} tokens per replica x {train_config.update_freq} "
                f"micro-batches")
            shapes = plan.training_shapes(shaped, train_config, has_valid, log)
            make_epoch, make_valid = plan.readers(data, train_config, workers.num_workers,
                                                  workers.worker_index, sampler,
                                                  model_config.max_positions)
            stopped = trainer.fit(make_epoch, make_valid if has_valid else None, score_valid,
                                  shapes)
    log(vocabulary_line(data.vocabulary_path.resolve()))
    return stopped


def _scorer(trainer, data, eval_metric: str | None, eval_options: dict | None,
            train_config: TrainConfig, log: Callable[[str], None]):
    """The scorer of each validation by `eval_metric` (`vtx.training.validation`), or None."""
    if not eval_metric:
        return None
    from vtx.training import validation

    return validation.make_scorer(trainer.model, data, eval_metric,
                                  max_tokens=train_config.max_tokens,
                                  warn=lambda message: log(f"warning: validation: {message}"),
                                  **(eval_options or {}))
