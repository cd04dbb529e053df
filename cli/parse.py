"""`vtx parse`: sentences from stdin (or --input) to trees on stdout (paper section 6.3)."""

import click

from vtx.inference.decoding import PARSING
from vtx_cli.options import (JIT_HELP, SEARCH_FLAGS, announce_decoding, ema_option,
                             ensemble_option, library_error, precision_options,
                             search_threads_option, search_options, TensorFlowCommand)

# library argument -> flag
FLAGS = {**SEARCH_FLAGS, "gold_path": "--gold", "constrain_trees": "--constrain-trees",
         "input_path": "--input", "tokenize": "--tokenize"}


@click.command(cls=TensorFlowCommand)
@ensemble_option
@ema_option
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Whitespace-tokenized sentences, one per line (with --tokenize: raw "
                   "text).  [default: stdin]")
@click.option("--tokenize", is_flag=True,
              help="Raw text in, one sentence per line: split it into the Penn Treebank's "
                   "tokens first (n't and 's split off, `` and '' for quotes). NLTK's "
                   "TreebankWordTokenizer; brackets become -LRB- and -RRB-.")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the trees, one per line, atomically (through a link to its "
                   "target; a FIFO or device directly).  [default: stdout]")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@search_options(PARSING)
@click.option("--max-tokens", type=click.IntRange(min=1), default=PARSING.max_tokens,
              show_default=True,
              help="Source tokens per batch, padding counted (each holds --beam hypotheses).")
@click.option("--buffer-size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines parsed (and written) together.")
@search_threads_option
@click.option("--gold", type=click.Path(exists=True, dir_okay=False),
              help="Gold trees, one per line (e.g. valid.gold): print the EVALB (COLLINS.prm) "
                   "summary to stderr. The output trees then carry the gold POS tags.")
@click.option("--constrain-trees/--no-constrain-trees", default=False, show_default=True,
              help="Search only well-formed trees with one word slot per input word: matching "
                   "brackets, one root, no empty phrase. For a model trained on trees with the "
                   "words in their slots (prepare-parse --slots words).")
@click.option("--jit/--no-jit", default=None, help=JIT_HELP.format("search"))
@precision_options
def parse(checkpoint, input_path, output_path, beam, lenpen, lenpen_formula, max_len_a, max_len_b,
          stop, max_tokens, buffer_size, search_threads, gold, constrain_trees, jit, force, ema,
          tokenize, precision, quantize):
    """Parse sentences into constituency trees with a model trained on linearized trees."""
    from vtx.inference import parse as lib
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.jit import resolve_jit
    from vtx.inference.threads import share_cores
    from vtx.parsing import evalb

    xla = resolve_jit(jit)
    threads_line = share_cores(search_threads, "vtx parse")
    chosen = announce_decoding(precision, quantize, xla, "search")
    click.echo(threads_line, err=True)
    try:
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop,
                                max_tokens=max_tokens, search_threads=search_threads,
                                jit_compile=xla.compile, constrain_trees=constrain_trees)
        parsed = lib.parse_file(list(checkpoint),
                                input_path, output_path, options, buffer_size, force, gold, warn=lambda message: click.echo(f"warning: {message}",
                                                                      err=True),
                                log=lambda message: click.echo(message, err=True), ema=ema,
                                tokenize=tokenize, precision=chosen)
    except (OSError, ValueError, MemoryError) as error:  # also a --beam too wide for the memory
        raise library_error(error, FLAGS) from error
    if parsed.scores is not None:
        click.echo(evalb.format_errors(parsed.scores), err=True, nl=False)
        click.echo(evalb.format_summary(parsed.scores), err=True, nl=False)
