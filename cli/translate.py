"""`vtx translate`: beam search from stdin (or --input) to stdout (paper section 6.1)."""

import click

from vtx.inference.decoding import TRANSLATION
from vtx_cli.options import (SEARCH_FLAGS, checkpoint_option, ema_option, library_error,
                             search_options)

FLAGS = {**SEARCH_FLAGS, "reference_path": "--reference", "input_path": "--input"}


@click.command()
@checkpoint_option
@ema_option
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Source text, one sentence per line; read as gzip when named .gz.  "
                   "[default: stdin]")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the translations, atomically (through a link to its "
                   "target; a FIFO or device directly).  [default: stdout]")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@search_options(TRANSLATION)
@click.option("--max-tokens", type=click.IntRange(min=1), default=TRANSLATION.max_tokens,
              show_default=True,
              help="Source tokens per batch, padding counted.")
@click.option("--buffer-size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines read before translating (1: answer each line at once).")
@click.option("--nbest", type=click.IntRange(min=1), default=1, show_default=True,
              help="Hypotheses per input: K lines `score<TAB>text` each when K > 1 "
                   "(`nan<TAB>` for each that does not exist).")
@click.option("--reference", type=click.Path(exists=True, dir_okay=False),
              help="Reference translations: print detokenized sacreBLEU and its signature.")
@click.option("--jit/--no-jit", default=False, show_default=True, help="XLA-compile the search.")
def translate(checkpoint, input_path, output_path, beam, lenpen, lenpen_formula, max_len_a,
              max_len_b, stop, max_tokens, buffer_size, nbest, reference, jit, force, ema):
    """Translate sentences with a trained model."""
    from vtx.inference import translate as lib
    from vtx.inference.decoding import DecodeOptions

    try:
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop, nbest=nbest,
                                max_tokens=max_tokens, jit_compile=jit)
        # A bad reference file is said before the search, not after it.
        references = lib.read_references(reference) if reference else None
        if reference:
            lib.check_reference_length(input_path, reference, references)
        best = lib.translate_file(checkpoint, input_path, output_path, options, buffer_size,
                                  force, warn=lambda message: click.echo(f"warning: {message}",
                                                                         err=True),
                                  log=lambda message: click.echo(message, err=True),
                                  other_inputs={"--reference": reference}, ema=ema)
        if reference:
            score, signature = lib.bleu(best, reference, references)
            click.echo(score, err=True)
            click.echo(signature, err=True)
    except (OSError, ValueError, MemoryError) as error:
        raise library_error(error, FLAGS) from error
