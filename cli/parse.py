"""`vtx parse`: sentences from stdin (or --input) to trees on stdout (paper section 6.3)."""

import click

from vtx.inference.decoding import PARSING
from vtx_cli.options import checkpoint_option, search_options


@click.command()
@checkpoint_option
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Whitespace-tokenized sentences, one per line (default: stdin).")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the trees, one per line (default: stdout); written atomically "
                   "(through a link to its target; a FIFO or device directly).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@search_options(PARSING)
@click.option("--max-tokens", type=click.IntRange(min=1), default=PARSING.max_tokens,
              show_default=True,
              help="Source tokens per batch, padding counted (each holds --beam hypotheses).")
@click.option("--buffer-size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines parsed (and written) together.")
@click.option("--gold", type=click.Path(exists=True, dir_okay=False),
              help="Gold trees, one per line (e.g. valid.gold): print the EVALB (COLLINS.prm) "
                   "summary to stderr. The output trees then carry the gold POS tags.")
@click.option("--jit/--no-jit", default=False, show_default=True, help="XLA-compile the search.")
def parse(checkpoint, input_path, output_path, beam, lenpen, penalty_form, max_len_a, max_len_b,
          max_tokens, buffer_size, gold, jit, force):
    """Parse sentences into constituency trees with a model trained on linearized trees."""
    from vtx import atomic
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference import parse as lib
    from vtx.inference import translate
    from vtx.parsing import evalb, trees

    warn = lambda message: click.echo(f"warning: {message}", err=True)
    with click.open_file(input_path or "-", "rb") as source:  # "-": stdin, left open
        lines = list(translate.read_lines(source, warn))
    try:
        if output_path:  # before any work: an output that cannot be written fails at once
            atomic.output_path(output_path, force)
        gold_trees = lib.read_gold(gold, len(lines)) if gold else None
        options = DecodeOptions(beam=beam, lenpen=lenpen, length_penalty=penalty_form,
                                          max_len_a=max_len_a,
                                          max_len_b=max_len_b, max_tokens=max_tokens,
                                          jit_compile=jit)
        path = translate.resolve_checkpoint(checkpoint)
        translator = translate.load_translator(path, options, warn)
    except (OSError, ValueError, trees.TreeSyntaxError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"checkpoint: {path}", err=True)
    try:
        with translate.output_sink(output_path, force=force) as write:
            report = lib.parse_stream(translator, lines, write, buffer_size, gold_trees, warn)
    except (OSError, ValueError) as error:  # e.g. a --beam too wide for the memory
        raise click.ClickException(str(error)) from error
    click.echo(report.repair_summary(), err=True)
    if gold_trees is not None:
        try:
            scores = evalb.score_trees(gold_trees, report.trees)
        except evalb.TooManyErrors as error:
            raise click.ClickException(str(error)) from error
        for result in scores.sentences:
            if result.message:
                click.echo(f"{result.line} : {result.message}", err=True)
        click.echo(evalb.format_summary(scores), err=True, nl=False)

