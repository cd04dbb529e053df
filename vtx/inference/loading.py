"""Loading decoding's models: a checkpoint file or a save directory's newest, its Transformer and
its vocabulary, one model or an ensemble's (always a list). translate, score, parse, export and
serve load through here.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Sequence

from vtx import checkpoints
from vtx.precision import DecodingPrecision

# The layers `--quantize int8` gives int8 weights (Keras's int8 Dense: weights quantized per
# output column, inputs per row at each call): the feed-forward layers and attention's output
# projection. Attention's query, key and value projections stay float, being one fused product
# in decoding (`MultiHeadAttention.fused_query_key_value`), and so does the shared embedding,
# whose transpose makes the logits the search ranks by. Whether int8 pays is a CPU's matter:
# `benchmarks/translate_speed.py --quantize none,int8`, docs/benchmarks.md.
INT8_LAYERS = ("inner", "outer", "output")


def resolve_checkpoint(path: str | Path, named: str = "--checkpoint {}") -> Path:
    """A checkpoint file, or the newest numbered checkpoint of a `vtx train` save directory.

    Raises:
        ValueError: nothing usable at `path`, named as `named` says (its flag and value).
    """
    path = Path(path)
    if path.is_dir():
        try:
            return checkpoints.newest(path)[0]
        except ValueError as error:
            raise ValueError(f"{named.format('')}{error}") from None
    if path.exists() and not path.is_file():
        mode = path.stat().st_mode
        kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
        kind = next((name for test, name in kinds if test(mode)), "not a regular file")
        raise ValueError(f"{named.format(path)} is {kind}: give a checkpoint file (.npz) or a "
                         f"save directory")
    if not path.is_file():
        raise ValueError(f"{named.format(path)}: no such checkpoint file or directory")
    return path


def load_model(checkpoint: checkpoints.Checkpoint, dtype: str = "float32",
               path: str | Path = "the checkpoint", quantize: str = "none"):
    """Build the checkpoint's Transformer (read from `path`) under the Keras dtype policy
    `dtype` and load its weights (optimizer state is ignored); `quantize` int8: then give
    `INT8_LAYERS` int8 weights (`quantized`).

    Raises:
        ArchitectureError: its configuration does not build, or not its weights (`path` named;
            `checkpoints.model_config`).
    """
    from vtx.models import transformer

    model_config = checkpoints.model_config(checkpoint, path)
    model = transformer.build(model_config, dtype=dtype)
    if [tuple(v.shape) for v in model.variables] != [a.shape for a in checkpoint.model]:
        raise ValueError(f"{path}: its variables do not match its own model configuration")
    for variable, array in zip(model.variables, checkpoint.model):
        variable.assign(array)
    if quantize != "none":
        quantized(model, quantize)
    return model


def quantized(model, mode: str = "int8"):
    """`model` with int8 weights in its `INT8_LAYERS` (Keras's `Model.quantize`, in place).

    Raises:
        ValueError: `mode` is not int8.
    """
    if mode != "int8":
        raise ValueError(f"quantize must be none or int8, got {mode!r}")
    model.quantize(mode, filters=lambda layer: layer.name in INT8_LAYERS)
    return model


def checkpoint_vocabulary(checkpoint: checkpoints.Checkpoint, path: str | Path):
    """The SentencePiece vocabulary carried by a checkpoint read from `path`.

    Raises:
        ValueError: the checkpoint has no vocabulary, or its vocabulary does not match the
            model's embedding size (the message names `path`).
    """
    from vtx.data.vocab import Vocabulary

    if checkpoint.vocab is None:
        raise ValueError(f"{path}: the checkpoint carries no vocabulary")
    vocab = Vocabulary.from_bytes(checkpoint.vocab, f"in {path}")
    vocab_size = checkpoint.meta["model_config"]["vocab_size"]
    if vocab.size != vocab_size:
        raise ValueError(f"{path}: vocabulary has {vocab.size} pieces but the model "
                         f"{vocab_size} embeddings")
    return vocab


def load_models(paths: Sequence[str | Path], ema: bool = False,
                precision: DecodingPrecision = DecodingPrecision(),
                named: str = "--checkpoint {}") -> tuple[list, object]:
    """The models of checkpoint files that carry one vocabulary (an ensemble), and it; `ema`:
    each checkpoint's EMA weights; `precision`: the dtype policy and quantization they are
    built in; `named`: how a refusal names a file (its flag and value).

    Raises:
        ValueError: a checkpoint is unreadable or has no vocabulary, or two have different
            vocabularies (both files and the first differing piece named).
    """
    from vtx.data.vocab import differing_pieces

    models, vocab, first = [], None, None
    for path in paths:
        checkpoint = checkpoints.load(path, ema)
        this = checkpoint_vocabulary(checkpoint, path)
        if vocab is None:
            vocab, first = this, path
        elif differ := differing_pieces(vocab, this):
            index, ours, theirs = differ[0]
            raise ValueError(f"{named.format(first)} and {named.format(path)} have different "
                             f"vocabularies (piece {index}: {ours!r} and {theirs!r}); an "
                             f"ensemble needs one")
        models.append(load_model(checkpoint, precision.policy, path, precision.quantize))
    return models, vocab
