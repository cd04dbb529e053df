"""`vtx train`: train a Transformer on binarized data (paper section 5), resumable."""

import contextlib
import signal
import sys
from pathlib import Path

import click

from vtx_cli.options import FiniteFloat, creatable_folder, library_error
from vtx import atomic  # no TensorFlow import
from vtx.config import BEST_CHECKPOINT_METRICS, PRECISIONS, PRESETS  # plain dataclasses: no TensorFlow import

ARCHS = tuple(PRESETS)
# Library arguments -> flags: the validation's search (a --eval-beam too wide for the memory),
# --max-tokens below the longest pair, --d-model not divisible by --heads.
FLAGS = {"max_tokens": "--max-tokens", "d_model": "--d-model", "num_heads": "--heads",
         "beam": "--eval-beam", "lenpen": "--eval-lenpen", "gold_path": "--eval-f1",
         "devices": "--devices", "subword_alpha": "--subword-alpha",
         "subword_nbest": "--subword-nbest",
         "constrain_trees": "--eval-constrain-trees"}


def _profile_steps(ctx, param, value):
    """--profile's FIRST:LAST as (first, last), or None."""
    if value is None:
        return None
    from vtx.training.profile import parse_steps  # no TensorFlow import

    try:
        return parse_steps(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def _check_profile(steps, max_steps, directory):
    """--profile refused at once (exit 2, naming it) when it could trace nothing: FIRST past
    --max-steps (the run would end before it, in silence), or the trace's folder (SAVE_DIR/profile
    when no --tensorboard-dir) not creatable (the run would fail at update FIRST, unsaved)."""
    first, last = steps
    if first > max_steps:
        raise click.BadParameter(f"{first}:{last}: update {first} is past --max-steps "
                                 f"{max_steps}: nothing would be profiled",
                                 param_hint="'--profile'")
    if "://" not in str(directory) and (problem := atomic.unwritable_directory(directory)):
        raise click.BadParameter(f"the trace's folder {problem}", param_hint="'--profile'")


def _device_names(ctx, param, value):
    """Click callback of --devices: its comma-separated names (None: the default); an empty
    value, or an empty item (`/cpu:0,`), refused at once as naming no device."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter(f"{value!r} names no device: name some, such as /gpu:0,/gpu:1, "
                                 f"or leave --devices out for every GPU (else the CPU)",
                                 ctx=ctx, param=param)
    names = value.split(",")
    for number, name in enumerate(names, 1):
        if not name.strip():
            raise click.BadParameter(f"{value!r}: item {number} of {len(names)} is empty; name "
                                     f"one device between each two commas, such as "
                                     f"/gpu:0,/gpu:1", ctx=ctx, param=param)
    return names


@click.command()
@click.argument("data_dir", required=False, type=click.Path(file_okay=False))
@click.option("--arch", type=click.Choice(ARCHS), default="base", show_default=True,
              help="Model preset: base and big as in the paper's Table 3, parse-big for "
                   "parsing (section 6.3), tiny for tests; with --finetune-from, the "
                   "checkpoint's model.")
@click.option("--finetune-from", type=click.Path(dir_okay=False), metavar="CHECKPOINT",
              help="Start from this checkpoint's weights and model (dropout flags may change), "
                   "with a fresh optimizer, schedule and data position; DATA_DIR must have its "
                   "vocabulary. A --save-dir holding checkpoints resumes instead.")
@click.option("--save-dir", type=click.Path(file_okay=False), callback=creatable_folder,
              help="Folder of the run's checkpoints, config, history and learning curve; a "
                   "run resumes from it where it holds a checkpoint.")
@click.option("--vocab-size", type=click.IntRange(min=8), default=None,
              help="With --dry-run: the vocabulary size (a run trains on the data's).  "
                   "[default: the data's, else the preset's]")
@click.option("--layers", type=click.IntRange(min=1),
              help="Layers of the encoder and of the decoder, N.  [default: the preset's]")
@click.option("--d-model", type=click.IntRange(min=8),
              help="Model width d_model; a multiple of --heads.  [default: the preset's]")
@click.option("--d-ff", type=click.IntRange(min=8),
              help="Inner width of the feed-forward sub-layers, d_ff.  [default: the preset's]")
@click.option("--heads", type=click.IntRange(min=1),
              help="Attention heads h.  [default: the preset's]")
@click.option("--dropout", type=FiniteFloat(0, 1, max_open=True),
              help="P_drop: dropout on the sub-layers' outputs and on the embedding and "
                   "position sums.  [default: the preset's]")
@click.option("--attention-dropout", type=FiniteFloat(0, 1, max_open=True),
              help="Dropout on the attention weights (the paper has none).  [default: the "
                   "preset's]")
@click.option("--relu-dropout", type=FiniteFloat(0, 1, max_open=True),
              help="Dropout inside the feed-forward sub-layers, after the ReLU (the paper has "
                   "none).  [default: the preset's]")
@click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Batch size in tokens, per replica and micro-batch: source and target each, "
                   "padding counted.")
@click.option("--update-freq", type=click.IntRange(min=1), default=1, show_default=True,
              help="Micro-batches accumulated per update (an update's batch: replicas x this x "
                   "--max-tokens).")
@click.option("--max-steps", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Updates to train in all: a resumed run goes on to this step.")
@click.option("--max-minutes", type=FiniteFloat(min=0), default=0.0, show_default=True,
              help="Wall-time budget of this run: save a checkpoint and exit 0 when it is used "
                   "up (0: no budget).")
@click.option("--warmup-steps", type=click.IntRange(min=1), default=4000, show_default=True,
              help="Warmup updates of the paper's learning-rate schedule (section 5.3).")
@click.option("--lr-scale", type=FiniteFloat(min=0, min_open=True), default=1.0,
              show_default=True, help="Multiplier on the paper's learning-rate schedule.")
@click.option("--cooldown", type=FiniteFloat(0, 1, max_open=True), default=0.0,
              show_default=True,
              help="Over this last fraction of the budget (--max-steps, or --max-minutes where "
                   "it runs out first) the learning rate falls linearly to 0 (0: none).")
@click.option("--label-smoothing", type=FiniteFloat(0, 1, max_open=True), default=0.1,
              show_default=True, help="Label smoothing epsilon_ls of the training loss.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=1, show_default=True,
              help="Random seed of the initial weights, dropout and the batches' order.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="Training precision; auto: mixed_bfloat16 where the hardware runs it fast, "
                   "else float32 (the first log line says which and why). That is "
                   "mixed_bfloat16 on GPUs of compute capability >= 8.0 with --jit, on CPUs with "
                   "AMX, and on CPUs with avx512_bf16 where a bfloat16 matrix product times >= "
                   "1.1x float32's at start.")
@click.option("--jit/--no-jit", default=None,
              help="XLA-compile the update: on one device the whole of it, across replicas "
                   "the per-replica gradients.  [default: --jit where nvidia-smi lists a GPU "
                   "and --devices names no CPU only, else --no-jit]")
@click.option("--xla-cache-dir", type=click.Path(file_okay=False), callback=creatable_folder,
              help="With --jit: keep the compiled programs here, so that a resumed run does not "
                   "compile again (TensorFlow's persistent XLA cache; per machine).  [default: "
                   "SAVE_DIR/xla_cache on a GPU machine, none on a CPU]")
@click.option("--compile-workers", type=click.IntRange(min=0), default=0,
              help="With --jit, on one device: batch shapes compiled at once before the first "
                   "update (0: half the CPU cores).  [default: 0]")
@click.option("--max-shapes", type=click.IntRange(min=0), default=0,
              help="Distinct padded batch lengths at most (0: 8 with --jit, 16 without). They "
                   "are chosen over the data for the fewest positions in an epoch's batches; "
                   "with --jit each is one compiled program, so fewer start sooner and pad "
                   "more.  [default: 0]")
@click.option("--pack/--no-pack", default=None,
              help="Pack several pairs into each training row, each attending only to "
                   "itself, in one or two batch shapes instead of length buckets. With --jit "
                   "that is one or two compiled programs and fewer pad positions. Validation "
                   "stays bucketed. A resumed run keeps its checkpoint's batching.  "
                   "[default: --pack "
                   "with --jit where it costs fewer FLOPs an epoch than buckets (said at "
                   "start), else --no-pack]")
@click.option("--prefetch", type=click.IntRange(min=0), default=2, show_default=True,
              help="Training batches made and placed on the devices ahead of the updates, by "
                   "a thread of their own (0: on the training thread, as each update starts).")
@click.option("--devices", default=None, callback=_device_names,
              help="Comma-separated devices for MirroredStrategy, such as /gpu:0,/gpu:1.  "
                   "[default: every GPU, else the CPU]")
@click.option("--save-interval-minutes", type=FiniteFloat(min=0), default=10.0,
              show_default=True,
              help="Minutes of wall time between checkpoints (0: none by the clock; a run "
                   "also saves at its end, on a stop signal and at each new best validation).")
@click.option("--save-interval-steps", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also save a checkpoint every this many updates (0: none by the step "
                   "count). Given, a new best validation between its multiples is written as "
                   "checkpoint_best only, so that the numbered checkpoints that "
                   "average-checkpoints takes are this many updates apart.")
@click.option("--keep-last", type=click.IntRange(min=0), default=0, show_default=True,
              help="Keep the N newest checkpoints (0: all).")
@click.option("--validate-interval-steps", type=click.IntRange(min=0), default=1000,
              show_default=True,
              help="Validate every this many updates and after the last (0: never, so no "
                   "checkpoint_best; --patience and --eval-* need validations).")
@click.option("--eval-bleu", is_flag=True,
              help="At each validation, translate the validation set (beam search, current "
                   "weights) and log its detokenized sacreBLEU.")
@click.option("--eval-f1", "eval_gold", type=click.Path(dir_okay=False, exists=True),
              metavar="GOLD",
              help="At each validation, parse the validation set and log its EVALB F1 against "
                   "GOLD (valid.gold of vtx prepare-parse).")
@click.option("--eval-beam", type=click.IntRange(min=1), default=None,
              help="Beam width of the --eval-bleu / --eval-f1 search.  [default: 4]")
@click.option("--eval-lenpen", type=FiniteFloat(min=0), default=None,
              help="Length penalty alpha of the --eval-bleu / --eval-f1 search (gnmt "
                   "formula).  [default: 0.6 for BLEU, 0.3 for F1]")
@click.option("--eval-constrain-trees", is_flag=True,
              help="With --eval-f1: search only well-formed trees with one word slot per word, "
                   "as `vtx parse --constrain-trees` (for trees with the words in their slots).")
@click.option("--best-checkpoint-metric", type=click.Choice(BEST_CHECKPOINT_METRICS),
              default=None,
              help="What checkpoint_best is the best of: validation loss (lowest), bleu or f1 "
                   "(highest).  [default: the --eval-* metric if any, else loss]")
@click.option("--ema-decay", type=FiniteFloat(0, 1, max_open=True), default=None,
              metavar="D",
              help="Keep an exponential moving average of the weights, ema = D x ema + "
                   "(1 - D) x weights after each update, in every checkpoint. The --ema flag of "
                   "translate, parse, average-checkpoints and export uses it.  [default: none]")
@click.option("--ema-start-step", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --ema-decay: up to this update the average follows the weights.")
@click.option("--validate-with-ema", "validate_ema", is_flag=True,
              help="With --ema-decay: validations (loss, --eval-*, checkpoint_best, --patience) "
                   "score the averaged weights.")
@click.option("--subword-alpha", type=FiniteFloat(min=0, min_open=True), default=None,
              metavar="A",
              help="Subword regularization: segment the training text anew each epoch, "
                   "sampled (BPE vocabulary: BPE-dropout, each merge dropped with probability A "
                   "<= 1; unigram: Kudo's smoothing A). Validation stays as preprocessed. "
                   "DATA_DIR needs `vtx preprocess --keep-train-text`.  [default: none]")
@click.option("--subword-nbest", type=click.IntRange(min=2), default=None, metavar="N",
              help="With --subword-alpha and a unigram vocabulary: sample among the N best "
                   "segmentations.  [default: all]")
@click.option("--patience", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop after this many validations without a new best (0: never).")
@click.option("--log-interval-steps", type=click.IntRange(min=1), default=100, show_default=True,
              help="A progress line every this many updates and after the last.")
@click.option("--tensorboard-dir", type=click.Path(file_okay=False), callback=creatable_folder,
              help="Also write the progress and validation figures here as TensorBoard "
                   "summaries.")
@click.option("--profile", metavar="FIRST:LAST", callback=_profile_steps,
              help="Trace updates FIRST to LAST with TensorFlow's profiler into "
                   "--tensorboard-dir, else SAVE_DIR/profile, for TensorBoard's profile plugin "
                   "or benchmarks/xplane_summary.py.")
@click.option("--dry-run", is_flag=True, help="Build the model, print its parameter count, exit.")
def train(data_dir, arch, save_dir, vocab_size, layers, d_model, d_ff, heads, dropout,
          attention_dropout, relu_dropout, dry_run, devices, tensorboard_dir, eval_bleu, eval_gold,
          eval_beam, eval_lenpen, eval_constrain_trees, best_checkpoint_metric, xla_cache_dir,
          prefetch, profile, finetune_from, **train_options):
    """Train a Transformer on the binarized data in DATA_DIR (from `vtx preprocess`)."""
    from vtx import config
    from vtx.training import flag_rules  # no TensorFlow import

    _usage(flag_rules.check_command, dry_run, finetune_from, vocab_size, data_dir, save_dir)
    if finetune_from and _given("arch") is None:
        arch = None  # the checkpoint's model; a --arch given must be it

    overrides = dict(num_layers=layers, d_model=d_model, d_ff=d_ff, num_heads=heads,
                     dropout=dropout, attention_dropout=attention_dropout,
                     relu_dropout=relu_dropout)
    if dry_run:
        _dry_run(arch, vocab_size, data_dir, overrides)
        return
    if profile:
        from vtx.training.directory import RunDirectory  # no TensorFlow import

        _check_profile(profile, train_options["max_steps"],
                       tensorboard_dir or RunDirectory(Path(save_dir)).profile_folder)
    # Until the training loop takes SIGINT over (saving, then exiting 130), Ctrl-C raises
    # KeyboardInterrupt: importing TensorFlow, reading the data, building the model.
    with _interrupted_before_training():
        from vtx import compile_cache

        if train_options["jit"] is None:
            train_options["jit"] = compile_cache.jit_by_default(devices)
            if train_options["jit"]:
                click.echo("XLA on (nvidia-smi lists a GPU; --no-jit turns it off)", err=True)
        _usage(flag_rules.check_xla_cache, train_options["jit"], xla_cache_dir)
        if train_options["jit"]:  # before TensorFlow is imported: it reads the flag once
            cache = xla_cache_dir or compile_cache.default_directory(save_dir)
            if cache is not None:
                click.echo(f"XLA programs cached in {compile_cache.enable(cache)}", err=True)
        from vtx.startup import import_tensorflow

        import_tensorflow()  # its start-up lines held back; after the XLA flag is set
        from vtx.errors import DataError, TrainingError
        from vtx.training import run

        eval_options = {"beam": eval_beam, "lenpen": eval_lenpen}
        if eval_gold:
            eval_options.update(gold_path=eval_gold, constrain_trees=eval_constrain_trees)
        eval_metric = _usage(flag_rules.eval_metric, eval_bleu, eval_gold)
        _usage(flag_rules.check_flags, eval_metric, eval_beam, eval_lenpen,
               eval_constrain_trees, train_options)
        try:
            train_config = config.TrainConfig(
                jit_compile=train_options.pop("jit"),
                best_checkpoint_metric=best_checkpoint_metric or eval_metric or "loss",
                **train_options)
            stopped = run.train(data_dir, save_dir, arch, overrides, train_config,
                                devices=devices, prefetch=prefetch, profile=profile,
                                tensorboard_dir=tensorboard_dir,
                                log=lambda line: click.echo(line, err=True),
                                eval_metric=eval_metric, eval_options=eval_options,
                                finetune_from=finetune_from)
        except (OSError, ValueError, MemoryError, DataError, TrainingError) as error:
            raise library_error(error, FLAGS) from error
    if stopped:
        sys.exit(128 + stopped)


def _usage(check, *args):
    """`check(*args)` (a `vtx.training.flag_rules` rule), its refusal a usage error (exit 2)."""
    from vtx.errors import FlagError

    try:
        return check(*args)
    except FlagError as error:
        raise click.UsageError(str(error)) from error


def _given(name):
    """The value of option `name` where the command line (or the environment) set it, else
    None (its default)."""
    context = click.get_current_context()
    source = context.get_parameter_source(name)
    if source in (None, click.core.ParameterSource.DEFAULT):
        return None
    return context.params[name]


@contextlib.contextmanager
def _interrupted_before_training():
    """Within it, Ctrl-C (KeyboardInterrupt) exits 130, as it does once training has started,
    with one line: click ended it as "Aborted!", exit 1. The training loop, which saves on
    SIGINT, has taken no update yet, so there is nothing to save."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo("interrupted (SIGINT) before training started: nothing trained, no checkpoint "
                   "to write", err=True)
        sys.exit(128 + signal.SIGINT)


def _dry_run(arch, vocab_size, data_dir, overrides):
    from vtx.training import run

    try:
        model_config, parameters = run.dry_run(data_dir, arch, overrides, vocab_size)
    except ValueError as error:
        raise click.UsageError(library_error(error, FLAGS).message) from error
    except OSError as error:  # DATA_DIR not a data directory, or unreadable
        raise click.ClickException(str(error)) from error
    click.echo(f"arch: {arch}  vocab_size: {model_config.vocab_size}  "
               f"layers: {model_config.num_layers}  d_model: {model_config.d_model}  "
               f"d_ff: {model_config.d_ff}  heads: {model_config.num_heads}")
    click.echo(f"parameters: {parameters}")
