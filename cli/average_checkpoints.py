"""`vtx average-checkpoints`: average the last N checkpoints into one (paper section 6.1)."""

from pathlib import Path

import click

from vtx_cli.options import ema_option


@click.command("average-checkpoints")
@click.option("--inputs", "inputs", multiple=True, required=True, type=click.Path(exists=True),
              help="A save directory (with --num-last), or checkpoint files (repeat the flag).")
@click.option("--num-last", type=click.IntRange(min=1), default=None,
              help="Average the N newest numbered checkpoints of the --inputs directory "
                   "(paper: 5 for base, 20 for big).")
@click.option("--upper-bound", default=None, metavar="STEP|best",
              help="With --num-last: the newest checkpoints of at most this step; 'best': of at "
                   "most the step of the directory's checkpoint_best.npz (the N ending at the best "
                   "one).")
@click.option("--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the averaged checkpoint (.npz), not under a numbered "
                   "checkpoint's name (checkpoint_NNNNNNNN.npz: train would resume from it).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--keep-optimizer-state", is_flag=True,
              help="Also write the newest checkpoint's optimizer state (Adam's moments, twice "
                   "the weights' size). Without it the output holds the weights only, all that "
                   "translate, export and --finetune-from read.")
@ema_option
def average_checkpoints(inputs, num_last, upper_bound, output, force, keep_optimizer_state, ema):
    """Average the float weights of several checkpoints; integer state comes from the newest."""
    from vtx import checkpoints, locking

    paths = [Path(p) for p in inputs]
    if upper_bound is not None and not (upper_bound == "best" or upper_bound.isdecimal()):
        raise click.BadParameter(f"a step or 'best', got {upper_bound!r}",
                                 param_hint="--upper-bound")
    if len(paths) == 1 and paths[0].is_dir():
        if num_last is None:
            raise click.UsageError("--num-last is required when --inputs is a directory")
        bound = upper_bound
        try:
            if bound == "best":
                bound = checkpoints.best_step(paths[0])
        except (OSError, ValueError) as error:  # none, or damaged: not --num-last's fault
            raise click.ClickException(f"--upper-bound best: {error}") from error
        try:
            paths = checkpoints.newest(paths[0], num_last, None if bound is None else int(bound))
        except ValueError as error:
            raise click.ClickException(f"--num-last {num_last}: {error}") from error
    elif any(p.is_dir() for p in paths):
        raise click.UsageError("give either one directory or checkpoint files to --inputs")
    elif num_last is not None or upper_bound is not None:
        raise click.UsageError("--num-last and --upper-bound go with a directory in --inputs")
    try:
        with locking.output_lock(output, "--output"):  # checked and written by one process
            checkpoints.check_output(output, force, paths)
            averaged = checkpoints.average(paths, ema, keep_optimizer=keep_optimizer_state)
            checkpoints.save(output, averaged)
    except (OSError, ValueError, MemoryError) as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"averaged {len(paths)} checkpoints (steps {averaged.meta['averaged_from']}) "
               f"into {output}")
    from vtx.training import directory  # no TensorFlow import

    try:
        click.echo(directory.vocabulary_line(directory.vocabulary_of(paths, averaged.vocab)),
                   err=True)
    except ValueError as error:
        copy = (f"; {output} carries a copy (docs/training.md, Fine-tuning, says how to write "
                f"it out)" if averaged.vocab is not None else "")
        click.echo(f"vocabulary: {error}{copy}", err=True)
