"""`vtx export`: a checkpoint as a TF SavedModel (strings in, strings out) or a CTranslate2 model."""

import click

FORMATS = ("savedmodel", "ctranslate2")  # vtx.export.FORMATS, kept here so --help needs no import


@click.command("export")
@click.option("--checkpoint", required=True, type=click.Path(exists=True),
              help="A checkpoint file, or a `vtx train` save dir (its newest checkpoint).")
@click.option("--format", "export_format", required=True, type=click.Choice(FORMATS),
              help="savedmodel: TensorFlow SavedModel with SentencePiece and beam search in the "
                   "graph; ctranslate2: CTranslate2 model directory + sentencepiece.model.")
@click.option("--output", required=True, type=click.Path(),
              help="Directory to create (written under a temporary name, then renamed).")
@click.option("--force", is_flag=True, help="Replace an existing export at --output.")
@click.option("--beam", type=click.IntRange(min=1), default=4, show_default=True,
              help="savedmodel only (CTranslate2 takes search settings when translating).")
@click.option("--lenpen", type=click.FloatRange(min=0), default=0.6, show_default=True,
              help="Length penalty alpha (savedmodel only).")
@click.option("--length-penalty", "penalty_form", type=click.Choice(["gnmt", "fairseq"]),
              default="gnmt", show_default=True,
              help="gnmt: ((5+|Y|)/6)^alpha as the paper; fairseq: |Y|^alpha (savedmodel only).")
@click.option("--max-len-a", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--max-len-b", type=click.IntRange(min=0), default=50, show_default=True,
              help="Output length limit: a * source length + b (savedmodel only).")
def export(checkpoint, export_format, output, force, beam, lenpen, penalty_form, max_len_a,
           max_len_b):
    """Export a trained model for serving without vtx."""
    from vtx.export import export as export_model
    from vtx.inference.translate import DecodeOptions, resolve_checkpoint

    try:
        path = resolve_checkpoint(checkpoint)
        options = DecodeOptions(beam=beam, lenpen=lenpen, length_penalty=penalty_form,
                                max_len_a=max_len_a, max_len_b=max_len_b)
        written = export_model(path, output, export_format, options, force=force)
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"exported {path} as {export_format} to {written}")
