"""A keras-hub preset from a vtx checkpoint (`vtx export --format keras-hub`), and loading one
back checked (`load_preset`)."""

from __future__ import annotations

from pathlib import Path

from vtx import checkpoints
from vtx.checkpoints import Checkpoint
from vtx.hub.check import check_preset
from vtx.inference.decoding import DecodeOptions


def seq2seq_lm(checkpoint: Checkpoint, options: DecodeOptions = DecodeOptions()):
    """The `TransformerSeq2SeqLM` of `checkpoint` (weights and vocabulary) searching with
    `options`.

    Raises:
        ValueError: the checkpoint's weights do not fit its own model configuration
            (`checkpoints.model_config`).
    """
    from vtx.hub.backbone import TransformerBackbone
    from vtx.hub.preprocessor import TransformerSeq2SeqLMPreprocessor
    from vtx.hub.seq2seq_lm import SEARCH_SETTINGS, TransformerSeq2SeqLM
    from vtx.hub.tokenizer import TransformerTokenizer

    config = checkpoints.model_config(checkpoint, "the checkpoint")
    backbone = TransformerBackbone.from_model_config(config)
    variables = backbone.transformer.variables
    if [tuple(v.shape) for v in variables] != [a.shape for a in checkpoint.model]:
        raise ValueError("checkpoint variables do not match its own model configuration")
    for variable, array in zip(variables, checkpoint.model):
        variable.assign(array)
    preprocessor = TransformerSeq2SeqLMPreprocessor(
        TransformerTokenizer(proto=checkpoint.vocab),
        encoder_sequence_length=config.max_positions,
        decoder_sequence_length=config.max_positions)
    return TransformerSeq2SeqLM(backbone, preprocessor,
                                **{name: getattr(options, name) for name in SEARCH_SETTINGS})


def write_preset(checkpoint: Checkpoint, directory: str | Path,
                 options: DecodeOptions = DecodeOptions()) -> None:
    """Write `checkpoint` as a keras-hub preset in `directory` (`save_to_preset`: config.json,
    model.weights.h5, task.json, preprocessor.json, tokenizer.json, the SentencePiece model
    under assets/, metadata.json), its `generate()` searching with `options` by default."""
    seq2seq_lm(checkpoint, options).save_to_preset(str(directory))


def load_preset(directory: str | Path, **kwargs):
    """keras-hub's `Seq2SeqLM.from_preset` on the local preset `directory`, checked first
    (`check_preset`); `kwargs` as from_preset's (search settings such as `beam=1`).

    Raises:
        ManifestError: the preset is not whole (the file named).
    """
    import keras_hub

    import vtx.hub  # noqa: F401  (registers the classes from_preset builds)

    check_preset(directory)
    return keras_hub.models.Seq2SeqLM.from_preset(str(directory), **kwargs)
