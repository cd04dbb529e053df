"""`vtx prepare-parse`: a Penn Treebank -> linearized `words`/`trees` parallel text (and gold trees)."""

import glob
from pathlib import Path

import click

from vtx_cli.options import creatable_folder

FILE_OPTIONS = {"train": "--train-files", "valid": "--valid-files", "test": "--test-files"}


def _expand(flag: str, patterns: tuple[str, ...]) -> list[Path]:
    """Files named by glob patterns, in sorted order; a pattern matching nothing is an error."""
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise click.UsageError(f"{flag} {pattern!r} matches no file")
        files.extend(Path(match) for match in matches)
    return files


@click.command("prepare-parse")
@click.option("--treebank", type=click.Path(file_okay=False),
              help="LDC layout folder (wsj/SS/wsj_SSNN.mrg): train 02-21, valid 22, test 23.")
@click.option("--train-files", multiple=True, metavar="GLOB", help="Training .mrg files (repeatable glob).")
@click.option("--valid-files", multiple=True, metavar="GLOB", help="Validation .mrg files (repeatable glob).")
@click.option("--test-files", multiple=True, metavar="GLOB", help="Test .mrg files (repeatable glob).")
@click.option("--destdir", required=True, type=click.Path(file_okay=False),
              callback=creatable_folder,
              help="Output folder for PREFIX.words, PREFIX.trees, PREFIX.gold.")
@click.option("--slots", type=click.Choice(("xx", "tags", "words")), default="xx", show_default=True,
              help="What stands for each word in the linearized trees: XX (Vinyals et al.), its "
                   "POS tag, or the word itself.")
@click.option("--keep-tags", is_flag=True, help="The same as --slots tags.")
@click.option("--train-subtrees", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N",
              help="Also train on every phrase of >= N words of a training tree as a pair of its "
                   "own (its words -> its subtree); 0: off. Valid and test sets are never "
                   "augmented.")
@click.option("--force", is_flag=True, help="Replace outputs already in --destdir.")
def prepare_parse(treebank, train_files, valid_files, test_files, destdir, slots, keep_tags,
                  train_subtrees, force):
    """Linearize a treebank into words/trees parallel text (Vinyals et al., 2015) for `vtx preprocess`."""
    from vtx.parsing import prepare, trees

    explicit = {"train": train_files, "valid": valid_files, "test": test_files}
    if treebank and any(explicit.values()):
        raise click.UsageError("give either --treebank or --train-files/--valid-files/--test-files, not both")
    if not treebank and not (train_files and valid_files):
        raise click.UsageError("give --treebank DIR, or at least --train-files and --valid-files")
    if keep_tags and slots not in ("xx", "tags"):  # xx: the default, not a choice
        raise click.UsageError(f"--keep-tags means --slots tags, not --slots {slots}")
    try:
        if treebank:
            splits = prepare.wsj_split(treebank)
        else:
            splits = {name: _expand(FILE_OPTIONS[name], patterns)
                      for name, patterns in explicit.items() if patterns}
        summaries = prepare.prepare(splits, destdir, slots="tags" if keep_tags else slots,
                                    train_subtrees=train_subtrees, force=force)
    except OSError as error:  # missing, a folder, unreadable: str() names the file
        raise click.ClickException(str(error)) from error
    except trees.TreeSyntaxError as error:
        raise click.ClickException(f"malformed treebank file: {error}") from error
    for name, summary in summaries.items():
        click.echo(f"{name}: {summary.files} files, {summary.sentences} sentences "
                   f"({summary.dropped} empty trees dropped) -> {Path(destdir) / name}.{{words,trees,gold}}")
    if "train" in summaries:
        click.echo(f"bracket tokens of the training trees -> {Path(destdir) / prepare.BRACKETS_FILE}")
