"""`vtx import`: a model trained elsewhere (a Transformers MarianMT folder: OPUS-MT) as a vtx
checkpoint with its vocabulary."""

import click

from vtx_cli.options import TensorFlowCommand

# vtx.imports.FORMATS, kept here so that --help needs no import
FORMATS = ("marian",)


@click.command("import", cls=TensorFlowCommand)
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--output", required=True, type=click.Path(dir_okay=False),
              help="The checkpoint file to write (.npz), not under a numbered checkpoint's "
                   "name (checkpoint_NNNNNNNN.npz: train would resume from it).")
@click.option("--format", "import_format", type=click.Choice(FORMATS), default="marian",
              show_default=True,
              help="marian: a Transformers MarianMTModel folder (config.json, "
                   "model.safetensors or pytorch_model.bin, source.spm, target.spm, "
                   "vocab.json).")
@click.option("--require-safetensors", is_flag=True,
              help="Refuse a folder whose weights are pytorch_model.bin alone (a pickle, read "
                   "with torch's weights_only=True otherwise).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
def import_model(directory, output, import_format, require_safetensors, force):
    """Read a model folder from another toolkit into a vtx checkpoint.

    A folder vtx cannot represent exactly is refused, naming the file, field and value; nothing
    is written then.
    """
    from vtx.imports import import_model as read_and_write

    try:
        summary = read_and_write(directory, output, force=force,
                                 require_safetensors=require_safetensors)
    except (OSError, ValueError, MemoryError) as error:
        raise click.ClickException(str(error)) from error
    config = summary["model_config"]
    click.echo(f"imported {directory} ({summary['format']}) as {output}: "
               f"{summary['parameters']:,} parameters, {config['num_layers']} layers, d_model "
               f"{config['d_model']}, {summary['vocab_size']} ids, activation "
               f"{config.get('activation', 'relu')}")
