"""`vtx score`: log-probabilities of given target sentences under a checkpoint (forced
decoding), e.g. to rescore `vtx translate --nbest` output."""

import click

from vtx.inference.decoding import OUTPUT_FORMATS, TRANSLATION
from vtx_cli.options import (JIT_HELP, FiniteFloat, SEARCH_FLAGS, announce_decoding, ema_option,
                             library_error, precision_options, TensorFlowCommand)

FLAGS = {**SEARCH_FLAGS, "target_path": "--target"}


@click.command(cls=TensorFlowCommand)
@click.option("--checkpoint", "checkpoints", required=True, multiple=True,
              type=click.Path(exists=True),
              help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint); "
                   "repeated: the ensemble's mean probability.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Source text, one sentence per line; read as gzip when named .gz.  "
                   "[default: stdin]")
@click.option("--target", "target_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="Target sentences: one per source line, or with --nbest K the K lines "
                   "`score<TAB>text` per source line that `vtx translate --nbest K` writes.")
@click.option("--nbest", type=click.IntRange(min=1), default=1, show_default=True,
              help="Target lines per source line (the n-best format when K > 1).")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the scores, atomically.  [default: stdout]")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text",
              show_default=True,
              help="text: `score<TAB>text` per target line (an n-best list again); jsonl: a "
                   "JSON record per target line with its log-probability and per-token values.")
@click.option("--lenpen", type=FiniteFloat(min=0), default=TRANSLATION.lenpen,
              show_default=True,
              help="Length penalty alpha of the normalised score (log P over lp(|Y|)).")
@click.option("--lenpen-formula", type=click.Choice(("gnmt", "fairseq")),
              default=TRANSLATION.lenpen_formula, show_default=True,
              help="lp(|Y|): gnmt ((5+|Y|)/6)^alpha or fairseq |Y|^alpha, as translate's.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=TRANSLATION.max_tokens,
              show_default=True, help="Source tokens per forward pass, padding counted.")
@click.option("--jit/--no-jit", default=None, help=JIT_HELP.format("forward pass"))
@precision_options
@ema_option
def score(checkpoints, input_path, target_path, nbest, output_path, force, output_format,
          lenpen, lenpen_formula, max_tokens, jit, ema, precision, quantize):
    """Score target sentences given their sources under a model."""
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.jit import resolve_jit
    from vtx.inference.rescore import score_file

    xla = resolve_jit(jit)
    chosen = announce_decoding(precision, quantize, xla, "scoring")
    try:
        options = DecodeOptions(lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_tokens=max_tokens, jit_compile=xla.compile)
        score_file(checkpoints, input_path, target_path, output_path, options, nbest,
                   output_format, force,
                   warn=lambda message: click.echo(f"warning: {message}", err=True),
                   log=lambda message: click.echo(message, err=True), ema=ema,
                   precision=chosen)
    except (OSError, ValueError, MemoryError) as error:
        raise library_error(error, FLAGS) from error
