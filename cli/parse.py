"""`vtx parse`: sentences from stdin (or --input) to trees on stdout (paper section 6.3)."""

import os
import sys

import click


@click.command()
@click.option("--checkpoint", required=True, type=click.Path(exists=True),
              help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint).")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False),
              help="Whitespace-tokenized sentences, one per line (default: stdin).")
@click.option("--output", "output_path", type=click.Path(dir_okay=False),
              help="Where to write the trees, one per line (default: stdout); written atomically.")
@click.option("--beam", type=click.IntRange(min=1), default=21, show_default=True)
@click.option("--lenpen", type=float, default=0.3, show_default=True,
              help="Length penalty alpha (GNMT form).")
@click.option("--max-len-a", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--max-len-b", type=click.IntRange(min=0), default=300, show_default=True,
              help="Output length limit: a * source length + b.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Source tokens per batch, padding counted (each holds --beam hypotheses).")
@click.option("--buffer-size", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Lines parsed (and written) together.")
@click.option("--gold", type=click.Path(exists=True, dir_okay=False),
              help="Gold trees, one per line (e.g. valid.gold): print the EVALB (COLLINS.prm) "
                   "summary to stderr. The output trees then carry the gold POS tags.")
@click.option("--jit/--no-jit", default=False, show_default=True, help="XLA-compile the search.")
def parse(checkpoint, input_path, output_path, beam, lenpen, max_len_a, max_len_b, max_tokens,
          buffer_size, gold, jit):
    """Parse sentences into constituency trees with a model trained on linearized trees."""
    from vtx.inference import parse as lib
    from vtx.inference import translate
    from vtx.parsing import evalb, trees

    warn = lambda message: click.echo(f"warning: {message}", err=True)
    source = open(input_path, "rb") if input_path else sys.stdin.buffer
    lines = list(translate.read_lines(source, warn))
    try:
        gold_trees = lib.read_gold(gold, len(lines)) if gold else None
        options = translate.DecodeOptions(beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                                          max_len_b=max_len_b, max_tokens=max_tokens,
                                          jit_compile=jit)
        path = translate.resolve_checkpoint(checkpoint)
        translator = translate.load_translator(path, options, warn)
    except (ValueError, trees.TreeSyntaxError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"checkpoint: {path}", err=True)
    report = _parse_to(output_path, lambda write: lib.parse_stream(
        translator, lines, write, buffer_size, gold_trees, warn))
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


def _parse_to(output_path, run):
    """Calls run(write) with a writer to stdout or to a temporary file renamed on success."""
    if not output_path:
        return run(lambda line: click.echo(line))
    temp = output_path + ".tmp"
    try:
        with open(temp, "w", encoding="utf-8") as sink:
            report = run(lambda line: sink.write(line + "\n"))
        os.replace(temp, output_path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return report
