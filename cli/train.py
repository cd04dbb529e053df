"""`vtx train`: train a Transformer (for now: `--dry-run` builds the model and reports its size)."""

import click

ARCHS = ("base", "big", "parse-big", "tiny")


@click.command()
@click.argument("data_dir", required=False, type=click.Path(file_okay=False))
@click.option("--arch", type=click.Choice(ARCHS), default="base", show_default=True,
              help="Model preset (SPEC.md Table 3).")
@click.option("--vocab-size", type=click.IntRange(min=8), default=None,
              help="Joint vocabulary size; default: the data's, or the preset's with --dry-run.")
@click.option("--dry-run", is_flag=True, help="Build the model, print its parameter count, exit.")
def train(data_dir, arch, vocab_size, dry_run):
    """Train a Transformer on the binarized data in DATA_DIR."""
    if not dry_run:
        raise click.UsageError("training is not implemented yet; only --dry-run is available")
    from vtx import config
    from vtx.models import transformer

    cfg = config.preset(arch, vocab_size=vocab_size)
    model = transformer.build(cfg)
    click.echo(f"arch: {arch}  vocab_size: {cfg.vocab_size}  layers: {cfg.num_layers}  "
               f"d_model: {cfg.d_model}  d_ff: {cfg.d_ff}  heads: {cfg.num_heads}")
    click.echo(f"parameters: {model.count_params()}")
