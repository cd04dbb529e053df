"""`vtx average-checkpoints`: average the last N checkpoints into one (paper section 6.1)."""

from pathlib import Path

import click


@click.command("average-checkpoints")
@click.option("--inputs", "inputs", multiple=True, required=True, type=click.Path(exists=True),
              help="A save directory (with --num-last), or checkpoint files (repeat the flag).")
@click.option("--num-last", type=click.IntRange(min=1), default=None,
              help="Average the N newest numbered checkpoints of the --inputs directory "
                   "(paper: 5 for base, 20 for big).")
@click.option("--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the averaged checkpoint (.npz).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
def average_checkpoints(inputs, num_last, output, force):
    """Average the float weights of several checkpoints; integer state comes from the newest."""
    from vtx import checkpoints

    paths = [Path(p) for p in inputs]
    if len(paths) == 1 and paths[0].is_dir():
        if num_last is None:
            raise click.UsageError("--num-last is required when --inputs is a directory")
        try:
            paths = checkpoints.newest(paths[0], num_last)
        except ValueError as error:
            raise click.ClickException(f"--num-last {num_last}: {error}") from error
    elif any(p.is_dir() for p in paths):
        raise click.UsageError("give either one directory or checkpoint files to --inputs")
    elif num_last is not None:
        raise click.UsageError("--num-last goes with a directory in --inputs")
    try:
        checkpoints.check_output(output, force)
        averaged = checkpoints.average(paths)
        checkpoints.save(output, averaged)
    except (OSError, ValueError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"averaged {len(paths)} checkpoints (steps {averaged.meta['averaged_from']}) "
               f"into {output}")
