"""`vtx` command group.

Subcommand modules import only click at module level; TensorFlow is imported inside each command,
so `vtx --help` answers instantly.
"""

import click

from vtx_cli import preprocess, train


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vtx")
def main() -> None:
    """vtx: Transformer sequence-to-sequence models (Vaswani et al., 2017) on Keras 3."""


main.add_command(preprocess.preprocess)
main.add_command(train.train)

if __name__ == "__main__":
    main()
