"""A Hugging Face Transformers MarianMT folder (OPUS-MT's models) read as a vtx checkpoint.

What the folder holds and what it becomes (docs/export.md, "vtx import"):
  * config.json: the sizes, `activation_function` (relu, swish/silu, gelu), `scale_embedding`,
    layer norms of epsilon 1e-5 (`torch.nn.LayerNorm`'s, which Marian's configuration cannot
    set), sinusoidal positions of sines then cosines, and the special ids;
  * model.safetensors (or, without it, pytorch_model.bin read with `weights_only=True`): the
    weights, copied as they are (Keras kernels [in, out] are PyTorch's [out, in] transposed),
    and `final_logits_bias`, the logits bias;
  * source.spm, target.spm and vocab.json: a `PairVocabulary`.
Marian's special ids differ from vtx's fixed ones (`vtx.config`: pad 0, unk 1, bos 2, eos 3),
so the ids are renumbered: Marian's pad, unk and eos become 0, 1 and 3, its other pieces follow
from 4 in Marian's order, and id 2, vtx's start token, is one row more (V + 1 ids): a copy of
the embedding of Marian's `decoder_start_token_id`, whose logit bias is -1e9, so that its
probability is exactly 0 and every other token's log-probability is Marian's. vtx never
generates pad or its start token; Marian's generation forbids pad (`bad_words_ids`).

A folder vtx cannot represent exactly is refused, naming the file, the field and its value.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vtx.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from vtx.errors import DataError

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLED_FILE = "pytorch_model.bin"
SOURCE_SPM, TARGET_SPM, VOCABULARY_FILE = "source.spm", "target.spm", "vocab.json"
MARIAN_LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, fixed in Marian's layers
# The logit bias of vtx's start token (id 2): exp of it underflows to exactly 0 in float32.
START_LOGIT_BIAS = -1e9
_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
# Tensors of a MarianMTModel that hold no weight of their own: the sinusoidal tables (computed
# by vtx) and the aliases of the one shared embedding matrix.
_POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
_EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight",
               "model.decoder.embed_tokens.weight", "lm_head.weight")


class MarianIds:
    """Marian's ids <-> vtx's: Marian's pad, unk and eos -> 0, 1, 3; the other ids in order
    from 4; vtx's 2 (the start token) reads as Marian's decoder start.

    Args:
        size: Marian's vocabulary size V.
        pad, unk, eos, start: Marian's special ids.
    """

    def __init__(self, size: int, pad: int, unk: int, eos: int, start: int):
        self.size, self.start = size, start
        plain = [m for m in range(size) if m not in (pad, unk, eos)]
        # vtx id -> Marian id (vtx's 2 holds a copy of the start token's embedding)
        self.marian_of = np.array([pad, unk, start, eos, *plain], np.int64)
        self.vtx_of = np.empty(size, np.int64)  # Marian id -> vtx id
        self.vtx_of[[pad, unk, eos]] = [PAD_ID, UNK_ID, EOS_ID]
        self.vtx_of[plain] = np.arange(4, 4 + len(plain))

    def rows(self, matrix: np.ndarray, start_row: np.ndarray | None = None) -> np.ndarray:
        """Marian's [V, ...] rows in vtx's id order, [V + 1, ...]; row 2 is `start_row` if
        given, else the start token's."""
        rows = matrix[self.marian_of]
        if start_row is not None:
            rows[BOS_ID] = start_row
        return rows


def _refuse(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}; vtx cannot represent it exactly, nothing was written")


def read_config(directory: Path) -> dict:
    """config.json of `directory`, checked to be a MarianMT model of vtx's architecture.

    Raises:
        DataError: a missing or unreadable file, or a field of another architecture (named with
            its value).
    """
    path = directory / CONFIG_FILE
    values = _read_json(path)
    if not isinstance(values, dict):
        raise _refuse(path, "not a JSON object")
    if values.get("model_type") != "marian":
        raise _refuse(path, f"model_type {values.get('model_type')!r} is not 'marian'")
    wanted = {"normalize_before": False, "add_final_layer_norm": False,
              "layernorm_embedding": False, "share_encoder_decoder_embeddings": True,
              "tie_word_embeddings": True}
    for name, value in wanted.items():
        if values.get(name, value) != value:
            raise _refuse(path, f"{name} {values[name]!r} (vtx's model needs {value!r})")
    for ours, theirs in (("encoder_layers", "decoder_layers"),
                         ("encoder_ffn_dim", "decoder_ffn_dim"),
                         ("encoder_attention_heads", "decoder_attention_heads"),
                         ("vocab_size", "decoder_vocab_size")):
        if values.get(theirs) not in (None, values.get(ours)):
            raise _refuse(path, f"{theirs} {values[theirs]!r} differs from {ours} "
                                f"{values.get(ours)!r} (vtx's stacks are alike)")
    if values.get("activation_function") not in _ACTIVATIONS:
        raise _refuse(path, f"activation_function {values.get('activation_function')!r} is "
                            f"not one of {', '.join(_ACTIVATIONS)}")
    return values


def model_config(values: dict, path: Path) -> ModelConfig:
    """The vtx configuration of checked config.json `values` (read from `path`): V + 1 ids.

    Raises:
        DataError: a value vtx's configuration refuses (its message, the file named).
    """
    try:
        return ModelConfig(
            vocab_size=values["vocab_size"] + 1, num_layers=values["encoder_layers"],
            d_model=values["d_model"], d_ff=values["encoder_ffn_dim"],
            num_heads=values["encoder_attention_heads"], dropout=values.get("dropout", 0.1),
            attention_dropout=values.get("attention_dropout", 0.0),
            relu_dropout=values.get("activation_dropout", 0.0),
            max_positions=values.get("max_position_embeddings", 512),
            layer_norm_epsilon=MARIAN_LAYER_NORM_EPSILON,
            activation=_ACTIVATIONS[values["activation_function"]],
            scale_embedding=values.get("scale_embedding", False),
            position_layout="sines_then_cosines", final_logits_bias=True)
    except KeyError as error:
        raise _refuse(path, f"no field {error.args[0]}") from None
    except (ValueError, TypeError) as error:
        raise _refuse(path, str(error)) from None


def read_weights(directory: Path, require_safetensors: bool = False) -> dict[str, np.ndarray]:
    """The float32 tensors of model.safetensors, or of pytorch_model.bin where the folder has
    no safetensors (read by `torch.load(weights_only=True)`, which unpickles tensors and plain
    containers only, never code) and `require_safetensors` is False.

    Raises:
        DataError: neither file, pytorch_model.bin alone where safetensors are required, a file
            that does not read, or tensors not of floating point.
    """
    path = directory / SAFETENSORS_FILE
    if path.is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="np") as handle:
                tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        except (SafetensorError, OSError, TypeError, ValueError) as error:
            raise _refuse(path, f"does not read ({error})") from None
    elif (path := directory / PICKLED_FILE).is_file():
        if require_safetensors:
            raise DataError(f"{path}: the folder's weights are a PyTorch pickle only, no "
                            f"{SAFETENSORS_FILE}, and --require-safetensors reads no pickle; "
                            f"nothing was written")
        tensors = _read_pickled(path)
    else:
        raise DataError(f"{directory}: no {SAFETENSORS_FILE} nor {PICKLED_FILE}; nothing "
                        f"was written")
    for name, array in tensors.items():
        if array.dtype.kind != "f":
            raise _refuse(path, f"tensor {name} holds {array.dtype}, not floating point")
    return {name: np.asarray(array, np.float32) for name, array in tensors.items()}


def _read_pickled(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise DataError(f"{path}: reading a PyTorch pickle needs torch (pip install "
                        f"'vtx[transformers]'), or convert the folder to {SAFETENSORS_FILE}"
                        ) from None
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 -- torch raises many kinds; each means "unreadable"
        raise _refuse(path, f"does not read as tensors alone ({type(error).__name__}: "
                            f"{str(error)[:200]})") from None
    if not isinstance(state, dict):
        raise _refuse(path, f"holds a {type(state).__name__}, not a dict of tensors")
    return {name: tensor.float().numpy() for name, tensor in state.items()}


def shared_embedding(tensors: dict[str, np.ndarray], path: Path) -> np.ndarray:
    """The one embedding matrix [V, D] under any of its names, each copy checked the same.

    Raises:
        DataError: none of the names, or two that differ (untied embeddings).
    """
    found = [(name, tensors[name]) for name in _EMBEDDINGS if name in tensors]
    if not found:
        raise _refuse(path, f"no embedding matrix ({' or '.join(_EMBEDDINGS)})")
    first_name, first = found[0]
    for name, array in found[1:]:
        if array.shape != first.shape or not np.array_equal(array, first):
            raise _refuse(path, f"{name} differs from {first_name}: untied embeddings")
    return first


def check_positions(tensors: dict[str, np.ndarray], d_model: int, path: Path) -> None:
    """Refuse saved position tables that are not Marian's sinusoids (learned positions).

    Raises:
        DataError: the tensor named.
    """
    for name in _POSITIONS:
        if name not in tensors:
            continue
        table = tensors[name]
        positions = np.arange(table.shape[0])[:, None]
        angles = positions / np.power(10000, 2 * np.arange(d_model // 2) / d_model)[None, :]
        expected = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
        if table.shape[1] != d_model or not np.allclose(table, expected, atol=1e-5):
            raise _refuse(path, f"{name} is not the sinusoidal table of sines then cosines")


def _read_json(path: Path):
    if not path.is_file():
        raise DataError(f"{path}: no such file; nothing was written")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise DataError(f"{path}: not JSON ({error}); nothing was written") from None


def read_ids(directory: Path, values: dict, size: int) -> tuple[list[str], MarianIds]:
    """vocab.json's pieces in Marian's id order, checked against config.json `values` and the
    weights' `size` rows, and the id renumbering.

    Raises:
        DataError: a missing file, ids that are not 0 .. V - 1 once each, a size other than the
            weights', special ids whose pieces are not Marian's (each named).
    """
    path = directory / VOCABULARY_FILE
    table = _read_json(path)
    if not isinstance(table, dict) or not all(type(i) is int for i in table.values()):
        raise _refuse(path, "not a JSON object of pieces to integer ids")
    if sorted(table.values()) != list(range(len(table))):
        raise _refuse(path, f"its {len(table)} ids are not 0 to {len(table) - 1}, once each")
    if len(table) != size:
        raise _refuse(path, f"{len(table)} pieces, but the weights have {size} embeddings "
                            f"(config.json vocab_size {values.get('vocab_size')!r})")
    pieces = [""] * size
    for piece, index in table.items():
        pieces[index] = piece
    if "<unk>" not in table or "<s>" in table:
        raise _refuse(path, "vtx needs an <unk> piece and no <s> piece (its start token)")
    special = {"pad_token_id": "<pad>", "eos_token_id": "</s>"}
    for field, piece in special.items():
        index = values.get(field)
        if type(index) is not int or not 0 <= index < size or pieces[index] != piece:
            raise _refuse(directory / CONFIG_FILE, f"{field} {index!r} is not the id of "
                                                   f"{piece} in {VOCABULARY_FILE}")
    start = values.get("decoder_start_token_id", values["pad_token_id"])
    if type(start) is not int or not 0 <= start < size:
        raise _refuse(directory / CONFIG_FILE, f"decoder_start_token_id {start!r} is not an id "
                                               f"of the {size} in {VOCABULARY_FILE}")
    ids = MarianIds(size, values["pad_token_id"], table["<unk>"], values["eos_token_id"], start)
    return pieces, ids


def read_vocabulary(directory: Path, pieces: list[str], ids: MarianIds, name: str):
    """The `PairVocabulary` of the folder's SentencePiece models and `pieces` (Marian's order),
    in vtx's id order; every source ends with eos, as MarianTokenizer's.

    Raises:
        DataError: a missing or unloadable SentencePiece model (named).
    """
    from vtx.data.pair_vocab import PairVocabulary

    models = []
    for file in (SOURCE_SPM, TARGET_SPM):
        if not (directory / file).is_file():
            raise DataError(f"{directory / file}: no such file; nothing was written")
        models.append((directory / file).read_bytes())
    ordered = [pieces[m] for m in ids.marian_of]
    ordered[BOS_ID] = "<s>"
    return PairVocabulary(models[0], models[1], ordered, [EOS_ID], name)


def assign_weights(model, tensors: dict[str, np.ndarray], ids: MarianIds, path: Path) -> None:
    """Copy Marian's `tensors` into vtx Transformer `model`, renumbering the ids' rows.

    Raises:
        DataError: a tensor missing, of another shape, or left over (another architecture).
    """
    from vtx.export.marian import from_marian, weight_map

    identity = np.arange(model.config.d_model)
    embedding = shared_embedding(tensors, path)
    check_positions(tensors, model.config.d_model, path)
    bias = tensors.get("final_logits_bias", np.zeros((1, ids.size), np.float32)).reshape(-1)
    used = set(_EMBEDDINGS) | set(_POSITIONS) | {"final_logits_bias"}
    if bias.shape != (ids.size,):
        raise _refuse(path, f"final_logits_bias has {bias.size} entries, not {ids.size}")
    for name, variable, layout in weight_map(model):
        used.add(name)
        if name == "model.shared.weight":
            array = ids.rows(embedding, embedding[ids.start])
        elif name not in tensors:
            raise _refuse(path, f"no tensor {name}")
        else:
            array = from_marian(tensors[name], layout, identity)
        if tuple(array.shape) != tuple(variable.shape):
            raise _refuse(path, f"{name} has shape {tensors[name].shape}, vtx's model of "
                                f"config.json needs {tuple(variable.shape)} in PyTorch's layout")
        variable.assign(array)
    model.embedding.bias.assign(ids.rows(bias, np.float32(START_LOGIT_BIAS)))
    if left := sorted(set(tensors) - used):
        raise _refuse(path, f"tensors of no vtx weight: {', '.join(left[:5])}")


def read_marian_folder(directory: str | Path, require_safetensors: bool = False):
    """A vtx checkpoint (step 0, no optimizer state, its `PairVocabulary`) of the MarianMT
    folder `directory`; `require_safetensors`: refuse a folder whose weights are
    pytorch_model.bin alone.

    Raises:
        DataError: a file missing or unreadable, or a model vtx cannot represent exactly (the
            file, field and value named).
    """
    from vtx.checkpoints import Checkpoint
    from vtx.config import check_fits_in_memory
    from vtx.models.transformer import build

    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such folder")
    values = read_config(directory)
    config = model_config(values, directory / CONFIG_FILE)
    check_fits_in_memory(config, str(directory))
    tensors = read_weights(directory, require_safetensors)
    weights = directory / (SAFETENSORS_FILE if (directory / SAFETENSORS_FILE).is_file()
                           else PICKLED_FILE)
    size = shared_embedding(tensors, weights).shape[0]
    if size != values["vocab_size"]:
        raise _refuse(directory / CONFIG_FILE, f"vocab_size {values['vocab_size']} differs "
                                               f"from the {size} embeddings of {weights.name}")
    pieces, ids = read_ids(directory, values, size)
    vocab = read_vocabulary(directory, pieces, ids, f"the vocabulary of {directory}")
    model = build(config)
    assign_weights(model, tensors, ids, weights)
    meta = {"step": 0, "model_config": config.to_dict(),
            "imported_from": {"format": "marian", "folder": directory.resolve().name}}
    return Checkpoint(model=[np.asarray(v.numpy()) for v in model.variables], optimizer=[],
                      meta=meta, vocab=vocab.to_bytes())
