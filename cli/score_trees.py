"""`vtx score-trees`: EVALB (COLLINS.prm) bracketing scores of one-tree-per-line files."""

import sys

import click


@click.command("score-trees")
@click.argument("gold", type=click.Path(dir_okay=False))
@click.argument("test", type=click.Path(dir_okay=False))
@click.option("--per-sentence", is_flag=True, help="Also print EVALB's per-sentence table.")
@click.option("--max-errors", type=click.IntRange(min=0), default=10, show_default=True,
              help="EVALB's MAX_ERROR: stop (without a summary) at error sentence number N + 2.")
@click.option("--cutoff-len", type=click.IntRange(min=1), default=40, show_default=True,
              help="Length limit of the second summary block (EVALB's CUTOFF_LEN).")
def score_trees(gold, test, per_sentence, max_errors, cutoff_len):
    """Score the trees in TEST against those in GOLD, one tree per line, as EVALB does."""
    from vtx.parsing import evalb

    if sys.stdout is None:
        raise click.ClickException("standard output is closed (started with >&-): the scores "
                                   "would be lost")
    try:
        report = evalb.score_files(gold, test, cutoff_len=cutoff_len, max_errors=max_errors)
    except FileNotFoundError as error:
        raise click.ClickException(f"no such file: {error.filename}") from error
    except OSError as error:  # a folder, unreadable: str() names the file
        raise click.ClickException(str(error)) from error
    except ValueError as error:  # malformed tree, different line counts, too many errors
        raise click.ClickException(str(error)) from error
    click.echo(evalb.format_errors(report), err=True, nl=False)
    if per_sentence:
        click.echo(evalb.format_sentences(report), nl=False)
    click.echo(evalb.format_summary(report), nl=False)
