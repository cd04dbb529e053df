"""Click options and checks shared by the commands (the decoding ones' search flags, folders
to write, finite numbers), and their errors."""

import math
import os

import click

from vtx import atomic
from vtx.errors import Templated
from vtx.inference.decoding import LENPEN_FORMULAS, STOP_RULES, DecodeOptions  # no TensorFlow
from vtx.precision import AUTO, DECODING_PRECISIONS, QUANTIZATIONS  # no TensorFlow


class TensorFlowCommand(click.Command):
    """A command that runs TensorFlow: imported, with its start-up lines held back
    (`vtx.startup`), once the command's arguments are read, so that `--help` and a refused flag
    answer without it. (`vtx train` imports it itself, later: its XLA cache flag must be set
    first, and --dry-run needs no TensorFlow.)"""

    def invoke(self, ctx: click.Context):
        from vtx.startup import import_tensorflow

        import_tensorflow()
        return super().invoke(ctx)


class FiniteFloat(click.FloatRange):
    """`click.FloatRange` that also refuses nan and infinity: nan passes every range check (each
    comparison is false), and an infinite --max-len-a or --lenpen broke the search or, exported,
    a model's every translation."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number", param, ctx)
        return number


def creatable_folder(ctx, param, value):
    """Click callback of a folder option a command fills later (checkpoints, logs, data):
    refused at once, naming the flag, when nothing can be created there (a URL such as gs://
    is left to TensorFlow)."""
    if value is not None and "://" not in str(value):
        if problem := atomic.unwritable_directory(value):
            raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


def creatable_in_folder(ctx, param, value):
    """Click callback of an output built beside its path (a link's target's): refused at once
    when nothing can be created in that folder."""
    if value is not None:
        creatable_folder(ctx, param, os.path.dirname(os.path.realpath(value)))
    return value


# The search's library arguments -> the decoding commands' flags (`library_error`).
SEARCH_FLAGS = {"beam": "--beam", "nbest": "--nbest", "lenpen": "--lenpen",
                "max_len_a": "--max-len-a", "max_len_b": "--max-len-b", "input_path": "--input",
                "output_path": "--output", "search_threads": "--search-threads"}

# --jit/--no-jit of translate, parse and score (default None: `vtx.inference.jit`'s auto), with
# what it compiles.
JIT_HELP = ("XLA-compile the {}; the log says whether and why."
            "  [default: --jit where TensorFlow sees a GPU, else --no-jit]")

# --ema of translate, parse, average-checkpoints and export: the checkpoint's EMA weights.
ema_option = click.option(
    "--ema", is_flag=True,
    help="The checkpoint's EMA weights (`vtx train --ema-decay`) instead of its weights.")

checkpoint_option = click.option(
    "--checkpoint", required=True, type=click.Path(exists=True),
    help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint).")

# --checkpoint, repeatable: one model or an ensemble (translate, parse).
ensemble_option = click.option(
    "--checkpoint", required=True, multiple=True, type=click.Path(exists=True),
    help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint); repeated: an "
         "ensemble (the mean of the models' probabilities).")


def precision_options(command):
    """--precision and --quantize of the decoding commands (`vtx.precision`)."""
    command = click.option(
        "--quantize", type=click.Choice(QUANTIZATIONS), default="none", show_default=True,
        help="int8: the feed-forward layers and attention's output projection in int8; its "
             "speed against float32 per CPU kind: docs/benchmarks.md.")(command)
    return click.option(
        "--precision", type=click.Choice(DECODING_PRECISIONS), default=AUTO, show_default=True,
        help="What the layers compute in (scores stay float32); auto: bfloat16 where the CPU "
             "(AMX, avx512_bf16) or GPU is faster in it, else float32.")(command)


def search_threads_option(command):
    """--search-threads of translate and parse (`vtx.inference.threads`)."""
    return click.option(
        "--search-threads", type=click.IntRange(min=1, max=16), default=2, show_default=True,
        help="Batches searched at once, each on its share of the cores. The outputs are the "
             "same for any number.")(command)


def announce_decoding(precision: str, quantize: str, xla, subject: str):
    """Resolve --precision and --quantize (`vtx.precision.resolve_decoding_precision`) and say
    the decoding's first log lines: its precision and why, then whether `subject` (the search,
    the scoring) is XLA-compiled (`xla`, a `vtx.inference.jit.JitChoice`). Returns the
    `DecodingPrecision` the models are built in."""
    from vtx.precision import resolve_decoding_precision

    chosen = resolve_decoding_precision(precision, quantize, xla.compile)
    click.echo(chosen.log_line(), err=True)
    click.echo(xla.log_line(subject), err=True)
    return chosen


def search_options(defaults: DecodeOptions):
    """--beam --lenpen --lenpen-formula --max-len-a --max-len-b --stop, defaulting to a preset of
    `vtx.inference.decoding` (the paper's translation or parsing settings)."""
    options = [
        click.option("--beam", type=click.IntRange(min=1), default=defaults.beam,
                     show_default=True,
                     help="Beam width: hypotheses kept at each step (1: greedy search)."),
        click.option("--lenpen", type=FiniteFloat(min=0), default=defaults.lenpen,
                     show_default=True,
                     help="Length penalty alpha, --lenpen-formula's exponent (0: none; a "
                          "higher alpha favours longer outputs)."),
        click.option("--lenpen-formula", type=click.Choice(LENPEN_FORMULAS),
                     default=defaults.lenpen_formula, show_default=True,
                     help="The length penalty lp(|Y|) dividing a hypothesis's log-probability: "
                          "gnmt ((5+|Y|)/6)^alpha, the paper's; fairseq |Y|^alpha, fairseq's "
                          "and CTranslate2's."),
        click.option("--length-penalty", hidden=True, expose_value=False,
                     callback=_renamed("--lenpen-formula (gnmt or fairseq; --lenpen is its "
                                       "alpha)")),
        click.option("--max-len-a", type=FiniteFloat(min=0), default=defaults.max_len_a,
                     show_default=True,
                     help="Output length limit a * source length + b: the factor a (the limit "
                          "counts EOS)."),
        click.option("--max-len-b", type=click.IntRange(min=0), default=defaults.max_len_b,
                     show_default=True,
                     help="Output length limit a * source length + b: the constant b."),
        click.option("--stop", type=click.Choice(STOP_RULES), default=defaults.stop,
                     show_default=True,
                     help="When a sentence's search ends: exact, once no live hypothesis can "
                          "beat the best finished; fairseq, once --beam have finished; never, "
                          "at the length limit."),
    ]

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _renamed(new_flag: str):
    """Click callback of a hidden option under a flag's former name: refused, naming the flag
    to use (click's own "No such option" may suggest a flag of another meaning)."""
    def refuse(ctx, param, value):
        if value is not None:
            raise click.UsageError(f"no such option: {param.opts[0]}; use {new_flag}", ctx=ctx)
    return refuse


def library_error(error: Exception, flags: dict[str, str]) -> click.ClickException:
    """The one-line error of a library exception; an `ArgumentError` (any `errors.Templated`)
    names the command's flag for each library argument it mentions (`flags`: argument -> flag)."""
    if isinstance(error, Templated):
        return click.ClickException(error.message(lambda argument: flags.get(argument, argument)))
    if isinstance(error, MemoryError) and not str(error):  # Python's own carries no words
        return click.ClickException("out of the host's memory (MemoryError)")
    return click.ClickException(str(error))
