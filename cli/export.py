"""`vtx export`: a checkpoint as a TF SavedModel (strings in, strings out), a CTranslate2 model,
a Hugging Face Transformers MarianMT model or a keras-hub preset."""

import click

from vtx.inference.decoding import TRANSLATION
from vtx.precision import DECODING_POLICIES, QUANTIZATIONS
from vtx_cli.options import (SEARCH_FLAGS, checkpoint_option, creatable_in_folder, ema_option,
                             library_error, search_options, TensorFlowCommand)

# vtx.export.FORMATS, kept here so that --help needs no import
FORMATS = ("savedmodel", "ctranslate2", "transformers", "keras-hub")


@click.command("export", cls=TensorFlowCommand)
@checkpoint_option
@ema_option
@click.option("--format", "export_format", required=True, type=click.Choice(FORMATS),
              help="savedmodel: TensorFlow SavedModel, SentencePiece and beam search in the "
                   "graph; ctranslate2: CTranslate2 model + sentencepiece.model; transformers: "
                   "MarianMTModel + its tokenizer; keras-hub: preset of vtx.hub's Seq2SeqLM.")
@click.option("--output", required=True, type=click.Path(), callback=creatable_in_folder,
              help="Directory to create (written under a temporary name, then renamed).")
@click.option("--force", is_flag=True, help="Replace an existing export at --output.")
@search_options(TRANSLATION)
@click.option("--precision", type=click.Choice(tuple(DECODING_POLICIES)), default="float32",
              show_default=True,
              help="What a savedmodel's layers compute in (its search's scores stay float32).")
@click.option("--quantize", type=click.Choice(QUANTIZATIONS), default="none", show_default=True,
              help="int8: a savedmodel's feed-forward layers and attention's output projection "
                   "hold int8 weights, as `vtx translate --quantize int8`.")
def export(checkpoint, export_format, output, force, beam, lenpen, lenpen_formula, max_len_a,
           max_len_b, stop, ema, precision, quantize):
    """Export a trained model for serving without vtx.

    The search options are baked into a SavedModel and a keras-hub preset (its default);
    CTranslate2 and Transformers take their own when translating.
    """
    from vtx.export import export as export_model
    from vtx.inference.decoding import DecodeOptions
    from vtx.inference.loading import resolve_checkpoint
    from vtx.precision import DecodingPrecision

    try:
        path = resolve_checkpoint(checkpoint)
        options = DecodeOptions(beam=beam, lenpen=lenpen, lenpen_formula=lenpen_formula,
                                max_len_a=max_len_a, max_len_b=max_len_b, stop=stop)
        built = DecodingPrecision(DECODING_POLICIES[precision], quantize, "--precision")
        written = export_model(path, output, export_format, options, force=force, ema=ema,
                               precision=built)
    except (OSError, ValueError, MemoryError) as error:
        raise library_error(error, {**SEARCH_FLAGS, "output": "--output", "force": "--force",
                                   "precision": "--precision",
                                   "quantize": "--quantize"}) from error
    click.echo(f"exported {path} as {export_format} to {written}")
