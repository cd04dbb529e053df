"""`vtx` command group.

Subcommand modules import only click at module level; TensorFlow is imported inside each command,
so `vtx --help` answers instantly.
"""

import click

from vtx_cli import (average_checkpoints, export, parse, prepare_parse, preprocess, score_trees,
                     train, translate)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vtx")
def main() -> None:
    """vtx: Transformer sequence-to-sequence models (Vaswani et al., 2017) on Keras 3."""


main.add_command(preprocess.preprocess)
main.add_command(train.train)
main.add_command(average_checkpoints.average_checkpoints)
main.add_command(translate.translate)
main.add_command(parse.parse)
main.add_command(export.export)
main.add_command(score_trees.score_trees)
main.add_command(prepare_parse.prepare_parse)

if __name__ == "__main__":
    main()
