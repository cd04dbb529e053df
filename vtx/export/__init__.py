"""Export a trained checkpoint for serving outside vtx.

Four formats:
  * "savedmodel": a TensorFlow SavedModel whose signature maps raw strings to translations, with
    SentencePiece and beam search inside the graph (`vtx.export.savedmodel`);
  * "ctranslate2": a CTranslate2 model directory built from the same weights (`vtx.export.ct2`);
  * "transformers": a Hugging Face Transformers MarianMT model and tokenizer directory
    (`vtx.export.marian`);
  * "keras-hub": a keras-hub preset of vtx's Seq2SeqLM task (`vtx.hub`), whose `generate()`
    runs vtx's own beam search.

The output is written under a temporary name beside the target and renamed into place at the end,
so a directory at the target path is always a complete export.
"""

from __future__ import annotations

from pathlib import Path

from vtx import atomic, locking, manifest
from vtx.errors import ArgumentError
from vtx.inference.decoding import DecodeOptions
from vtx.precision import DecodingPrecision

FORMATS = ("savedmodel", "ctranslate2", "transformers", "keras-hub")
# A directory holding one of these is a previous export, which `force` may replace.
_EXPORT_MARKERS = ("saved_model.pb", "model.bin", "model.safetensors", "model.weights.h5")


def _check_output(output: Path, force: bool) -> None:
    """Refuse an existing output unless forced, and never replace something not an export.

    Raises:
        OutputLockedError: another process writes `output` (`vtx.locking`).
        ArgumentError: `output` is in the way (the message names it and the `force` argument).
    """
    if not output.exists():
        return
    if not force:
        raise ArgumentError("{output} {path} already exists (use {force} to replace it)",
                            path=output)
    if not output.is_dir():
        raise ArgumentError("{output} {path} exists and is not a directory; not replacing it",
                            path=output)
    if any(output.iterdir()) and not any((output / m).is_file() for m in _EXPORT_MARKERS):
        raise ArgumentError("{output} {path} is a non-empty directory that holds no export "
                            "({markers}); not replacing it", path=output,
                            markers=" or ".join(_EXPORT_MARKERS))


def _check_precision(format: str, precision: DecodingPrecision) -> None:
    """Refuse another precision than float32, or int8, for a format that is not a SavedModel:
    CTranslate2 and Transformers choose their own at load time, and a keras-hub preset holds
    the float32 weights (its Seq2SeqLM takes a dtype when built).

    Raises:
        ArgumentError: naming the flag and its value.
    """
    if format == "savedmodel":
        return
    for argument, value, plain in (("precision", precision.name, "float32"),
                                   ("quantize", precision.quantize, "none")):
        if value != plain:
            raise ArgumentError("{%s} {value} applies to a savedmodel only; a {format} export "
                                "holds the float32 weights" % argument, value=value,
                                format=format)


def _check_exportable(format: str, checkpoint, config) -> None:
    """Refuse an imported model (`vtx import`) where its format cannot hold it: all but a
    SavedModel, which traces vtx's own model and reads its vocabulary (two SentencePiece models
    and an id table, `vtx.data.pair_vocab`) in the graph, map the paper's model (no other
    `vtx.config.ADDED_FIELDS`) and one SentencePiece model only.

    Raises:
        ValueError: naming the format, and each field with its value.
    """
    from vtx.config import ADDED_FIELDS
    from vtx.data.pair_vocab import is_pair_vocabulary

    added = {key: value for key, value in config.to_dict().items() if key in ADDED_FIELDS}
    if added and format != "savedmodel":
        settings = ", ".join(f"{key} {value!r}" for key, value in added.items())
        raise ValueError(f"a {format} export holds the paper's model (ReLU, scaled embeddings, "
                         f"interleaved positions, no logits bias); this checkpoint's has "
                         f"{settings}")
    if (format != "savedmodel" and checkpoint.vocab is not None
            and is_pair_vocabulary(checkpoint.vocab)):
        raise ValueError(f"a {format} export holds one SentencePiece model; this checkpoint's "
                         f"vocabulary (an imported model's) has a source and a target model "
                         f"and an id table")


def _savedmodel(checkpoint, directory: Path, options: DecodeOptions,
                precision: DecodingPrecision) -> None:
    from vtx.export.savedmodel import write_savedmodel
    write_savedmodel(checkpoint, directory, options, precision)


def _ctranslate2(checkpoint, directory: Path, options: DecodeOptions,
                 precision: DecodingPrecision) -> None:
    from vtx.export.ct2 import write_ctranslate2
    write_ctranslate2(checkpoint, directory)


def _transformers(checkpoint, directory: Path, options: DecodeOptions,
                  precision: DecodingPrecision) -> None:
    from vtx.export.marian import write_marian
    write_marian(checkpoint, directory)


def _keras_hub(checkpoint, directory: Path, options: DecodeOptions,
               precision: DecodingPrecision) -> None:
    from vtx.hub.preset import write_preset
    write_preset(checkpoint, directory, options)


_WRITERS = {"savedmodel": _savedmodel, "ctranslate2": _ctranslate2,
            "transformers": _transformers, "keras-hub": _keras_hub}


def export(checkpoint_path: str | Path, output: str | Path, format: str,
           options: DecodeOptions = DecodeOptions(), force: bool = False,
           ema: bool = False, precision: DecodingPrecision = DecodingPrecision()) -> Path:
    """Export the checkpoint at `checkpoint_path` to directory `output` in `format`.

    Args:
        checkpoint_path: a checkpoint file that carries its SentencePiece vocabulary.
        output: the directory to create.
        format: one of FORMATS.
        options: decoding settings baked into a SavedModel or a keras-hub preset (beam, lenpen,
            lenpen_formula, max_len_a, max_len_b, stop); CTranslate2 and Transformers models
            take theirs at translation time instead.
        force: replace an existing export at `output`.
        ema: export the checkpoint's EMA weights (`checkpoints.with_ema_weights`).
        precision: the dtype policy and quantization a SavedModel's model is built in (traced
            so: the SavedModel holds int8 weights where quantized); float32 for other formats.

    Returns:
        `output` as a Path.

    Raises:
        OutputLockedError: another process writes `output` (`vtx.locking`).
        ArgumentError: `output` is in the way (a ValueError naming `output` and `force`), or
            a precision or quantization for a format other than savedmodel.
        ValueError: unknown format, unreadable checkpoint or no vocabulary.
    """
    from vtx import checkpoints
    from vtx.inference.loading import checkpoint_vocabulary

    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of: {', '.join(FORMATS)}")
    _check_precision(format, precision)
    output = Path(output)
    with locking.output_lock(output, "output"):  # checked and written by one process
        _check_output(output, force)
        checkpoint = checkpoints.load(checkpoint_path, ema)
        # both checked before any work
        _check_exportable(format, checkpoint,
                          checkpoints.model_config(checkpoint, checkpoint_path))
        checkpoint_vocabulary(checkpoint, checkpoint_path)
        with atomic.replaced_on_success(output) as tmp:
            _WRITERS[format](checkpoint, tmp, options, precision)
            manifest.write(tmp)  # last: it lists every other file
    return output
