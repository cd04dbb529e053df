"""Checkpoint files: one self-contained `.npz` per checkpoint, written atomically.

A checkpoint holds the model's variables (weights and dropout RNG state, in the model's variable
order), the optimizer's variables (none in an averaged one), and a JSON `meta` record: step, data-stream position, model and
training configuration. It may also carry the SentencePiece model bytes, so that a single file is
enough to translate, and the exponential moving average of the weights (`vtx train --ema-decay`),
which `load(path, ema=True)` returns in place of the weights. The meta record's `checksum` (SHA-256 over the rest of the meta and every
other entry's name, dtype, shape and bytes) is verified by `load`, so that damage the zip format
does not notice (an entry lost from its directory, contents rewritten) is caught too; files written
before it existed load without the check. `average` is a pure function over such files (fairseq's
`average_checkpoints.py`, without its command line).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np

from vtx import atomic
from vtx.config import ModelConfig, check_fits_in_memory
from vtx.errors import ArchitectureError, CheckpointError

_NAME = re.compile(r"^checkpoint_(\d+)\.npz$")
BEST_NAME = "checkpoint_best.npz"
DAMAGED_SUFFIX = ".damaged"
_CHECKSUM = "checksum"  # the meta record's key for the SHA-256 of everything else
_ZIP_MAGIC = b"PK\x03\x04"


@dataclasses.dataclass
class Checkpoint:
    """In-memory checkpoint contents."""

    model: list  # np.ndarray per model variable, in `model.variables` order
    optimizer: list  # np.ndarray per optimizer variable, in `optimizer.variables` order
    meta: dict  # step, position, model_config, train_config, ...
    vocab: bytes | None = None  # serialized SentencePiece model
    # np.ndarray per model variable: the EMA of the weights (`vtx train --ema-decay`), the
    # integer variables (dropout RNG state) as in `model`; None: trained without one.
    ema: list | None = None


def checkpoint_path(save_dir: str | Path, step: int) -> Path:
    return Path(save_dir) / f"checkpoint_{step:08d}.npz"


def list_checkpoints(save_dir: str | Path) -> list[Path]:
    """Numbered checkpoints of `save_dir`, oldest first (by step, not by file time)."""
    found = [(int(m.group(1)), p) for p in Path(save_dir).glob("checkpoint_*.npz")
             if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def newest(save_dir: str | Path, count: int = 1, upper_bound: int | None = None) -> list[Path]:
    """The `count` newest numbered checkpoints of `save_dir`, oldest first; with `upper_bound`,
    the newest of those of at most that step (fairseq's --checkpoint-upper-bound).

    Raises:
        ValueError: fewer than `count` (the directory and the number found named).
    """
    found = list_checkpoints(save_dir)
    if not found:
        raise ValueError(f"{save_dir}: no checkpoint_*.npz in this directory")
    below = ""
    if upper_bound is not None:
        found = [p for p in found if int(_NAME.match(p.name).group(1)) <= upper_bound]
        below = f" of step <= {upper_bound}"
    if len(found) < count:
        raise ValueError(f"{save_dir} has only {len(found)} numbered checkpoints "
                         f"(checkpoint_*.npz){below}, {count} wanted")
    return found[len(found) - count:]


def best_step(save_dir: str | Path) -> int:
    """The step of `save_dir`'s checkpoint_best.npz.

    Raises:
        ValueError: there is none (the path named), or it is damaged (CheckpointError).
    """
    path = Path(save_dir) / BEST_NAME
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a best checkpoint is kept when training "
                         f"validates)")
    return int(load(path).meta["step"])


def check_output(path: str | Path, force: bool, inputs: list[str | Path] = ()) -> None:
    """Refuse to write a new checkpoint at `path` when it exists (unless `force`), when it is
    one of `inputs` (even with `force`: the input checkpoint would be lost), when it is named as
    a numbered checkpoint (`list_checkpoints` would take it for one of training's), or when its
    folder is missing, before any work is done.

    Raises:
        ValueError: the reason, with `--output` and the path.
        OSError: its folder is missing, or nothing can be created there (`atomic.output_path`).
    """
    for given in inputs:  # said before whether it exists: --force does not make it right
        atomic.output_path(path, True, inputs={"--inputs": given})
    for name in dict.fromkeys([Path(path).name, Path(os.path.realpath(path)).name]):
        if _NAME.match(name):  # in a save dir: resumed from, averaged by --num-last, pruned
            raise ValueError(f"--output {path}: {name} is a numbered training checkpoint's "
                             f"name (checkpoint_NNNNNNNN.npz), which `vtx train` would resume "
                             f"from and --num-last would average as one; give another name, "
                             f"e.g. average.npz")
    target = atomic.output_path(path, force)  # a link's target
    if target.exists() and not target.is_file():
        raise ValueError(f"--output {path} is not a regular file; not replacing it")


def save(path: str | Path, checkpoint: Checkpoint) -> None:
    """Write `checkpoint` to `path` via a temporary file and an atomic rename."""
    path = Path(path)
    arrays = {f"model_{i:05d}": a for i, a in enumerate(checkpoint.model)}
    arrays.update({f"optimizer_{i:05d}": a for i, a in enumerate(checkpoint.optimizer)})
    arrays.update({f"ema_{i:05d}": a for i, a in enumerate(checkpoint.ema or ())})
    if checkpoint.vocab is not None:
        arrays["vocab"] = np.frombuffer(checkpoint.vocab, dtype=np.uint8)
    meta = {**checkpoint.meta, _CHECKSUM: _checksum(arrays, checkpoint.meta)}
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    with atomic.replaced_on_success(path, fsync=True) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)


def load(path: str | Path, ema: bool = False) -> Checkpoint:
    """Read a checkpoint file and verify its checksum (when it has one).

    Reading is bounded: the meta record is read first, then every entry's declared name, shape
    and dtype is checked against what its model configuration implies (`_check_entries`)
    before any array is unpacked, so a crafted file costs about its model's own size in memory.

    Args:
        ema: return the checkpoint with its EMA's weights as its model (`with_ema_weights`).

    Raises:
        ValueError: `ema` and the checkpoint holds no EMA (the file named).
        OSError: the file cannot be opened.
        CheckpointError: the file is damaged or not a vtx checkpoint (the message names it).
        MemoryError: the host's memory ran out reading a checkpoint whose entries hold the
            data they declare (the message names the file): not damage, so that a resumed run
            does not set a good checkpoint aside.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        if handle.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:  # else numpy would suggest unpickling it
            raise _damaged(path, "it does not start as a zip archive")
        # A damaged zip or .npy header fails in many ways (BadZipFile, EOFError, a header that
        # does not parse): each one means "damaged".
        try:
            meta = _check_entries(path, handle)
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files if name != "meta"}
        except CheckpointError:
            raise
        except MemoryError as error:  # every entry holds what it declares: not damage
            raise MemoryError(f"{path}: out of memory reading it ({path.stat().st_size:,} "
                              f"bytes); free memory or use a machine with more") from error
        except Exception as error:
            raise _damaged(path, f"{type(error).__name__}: {error}") from error
    checkpoint = _from_arrays(path, arrays, meta)
    return with_ema_weights(checkpoint, path) if ema else checkpoint


def with_ema_weights(checkpoint: Checkpoint, path: str | Path) -> Checkpoint:
    """`checkpoint` (read from `path`) with the EMA of its weights as its model (what `--ema`
    of translate, parse, average-checkpoints and export use), marked `"weights": "ema"` in its
    meta, holding no EMA of its own.

    Raises:
        ValueError: it holds no EMA (the file named).
    """
    if checkpoint.ema is None:
        raise ValueError(f"{path} holds no EMA of its weights (its run trained without "
                         f"--ema-decay): leave --ema out to use its weights")
    return Checkpoint(model=checkpoint.ema, optimizer=checkpoint.optimizer,
                      meta={**checkpoint.meta, "weights": "ema"}, vocab=checkpoint.vocab)


# The entries `save` writes (.npy files in the zip): "meta", "vocab", and numbered variables.
_ENTRY = re.compile(r"^(meta|vocab|(model|optimizer|ema)_\d{5})\.npy$")
_META_MAX = 16 * 2**20  # bytes of the meta record: a configuration and a run's state
_SLACK = 2**20  # bytes beyond the weights' sizes: integer state (dropout RNG), scalars
_PIECE_MAX = 1024  # bytes of a SentencePiece model per piece: pieces, scores, normalizer


def _check_entries(path: Path, handle) -> dict:
    """The meta record of the checkpoint open in `handle`, once its entries are checked
    against it, before any array is unpacked: known names only, numbers only, every entry
    stored uncompressed (`_stored_size`: none inflates past the file's size) and declaring the
    data it holds, and no kind of entry more bytes than the model
    configuration allows (`_allowed_bytes`).

    Raises:
        CheckpointError: the reason, `path` named.
        Exception: a damaged zip or .npy header, as the zip or numpy raise it.
    """
    import zipfile

    with zipfile.ZipFile(handle) as archive:
        headers = {}
        stored, file_size = 0, os.fstat(handle.fileno()).st_size
        for info in archive.infolist():
            if not (match := _ENTRY.match(info.filename)) or match[1] in headers:
                raise _damaged(path, f"it holds an entry vtx does not write: {info.filename}")
            stored += _stored_size(path, info)  # what reading the entries takes, at most
            if stored > file_size:
                raise _damaged(path, f"its zip directory declares entries of {stored:,} bytes "
                                     f"up to {info.filename}, more than the file holds")
            size, dtype = _npy_header(path, archive, info)
            expected = "U" if match[1] == "meta" else "u" if match[1] == "vocab" else "biuf"
            if dtype.kind not in expected:
                raise _damaged(path, f"{info.filename} holds {dtype}, not numbers")
            headers[match[1]] = (info, size)
        if "meta" not in headers:
            raise _damaged(path, "no valid meta record: it has no meta entry")
        info, size = headers.pop("meta")
        if size > _META_MAX:
            raise _damaged(path, f"its meta record declares {size:,} bytes")
        with archive.open(info) as entry:
            text = str(np.lib.format.read_array(entry, allow_pickle=False))
    meta = _checked_meta(path, text)
    allowed = _allowed_bytes(ModelConfig(**_known_keys(meta["model_config"])))
    declared = dict.fromkeys(allowed, 0)
    for name, (_, size) in headers.items():
        declared[name.split("_")[0]] += size
    for kind, size in declared.items():
        if size > allowed[kind]:
            raise _damaged(path, f"its {kind} entries declare {size:,} bytes, more than its model "
                                 f"configuration allows ({allowed[kind]:,})")
    return meta


def _stored_size(path: Path, info) -> int:
    """The bytes the zip entry `info` of checkpoint `path` takes in the file: `save` stores its
    entries uncompressed, so that no entry inflates beyond the file's own size.

    Raises:
        CheckpointError: a compressed entry, or one whose sizes differ (`path` named).
    """
    import zipfile

    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise _damaged(path, f"{info.filename} is compressed (zip method {info.compress_type}, "
                             f"{info.compress_size:,} bytes declaring {info.file_size:,}); vtx "
                             f"stores its entries uncompressed")
    return info.compress_size


def _npy_header(path: Path, archive, info) -> tuple[int, np.dtype]:
    """The bytes of data the .npy header of the entry `info` declares, and their dtype, once
    they are the bytes the zip entry holds after its header.

    Raises:
        CheckpointError: they differ (`path` named).
        Exception: a damaged .npy header, as numpy raises it.
    """
    with archive.open(info) as entry:
        version = np.lib.format.read_magic(entry)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(entry)
        held = info.file_size - entry.tell()
    size = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if size != held:
        more = "more" if size > held else "less"
        raise _damaged(path, f"{info.filename} declares {more} data than it holds ({size:,} "
                             f"bytes, {held:,} held)")
    return size, dtype


def _allowed_bytes(config: ModelConfig) -> dict[str, int]:
    """The most bytes each kind of entry of a checkpoint of `config` may declare: the float32
    weights (the optimizer: Adam's two moments), and the vocabulary by its pieces."""
    weights = 4 * config.parameter_count
    return {"model": weights + _SLACK, "ema": weights + _SLACK,
            "optimizer": 2 * weights + _SLACK, "vocab": _PIECE_MAX * config.vocab_size + _SLACK}


def read_meta(path: str | Path) -> dict | None:
    """The meta record of a checkpoint alone, without reading its arrays or verifying its
    checksum (`load` does both), its entries checked as `load` checks them; None when it does
    not read or they do not pass."""
    try:
        with open(path, "rb") as handle:
            return _check_entries(Path(path), handle)
    except Exception:  # damaged in one of many ways: `load` names it when it is resumed from
        return None


def _checked_meta(path: Path, text: str) -> dict:
    """The meta record `text` of the checkpoint `path` as a dict (its checksum in it), once it
    holds what every command reads of it; else a TypeError or KeyError deep inside one of them.

    Raises:
        CheckpointError: the reason, `path` named.
    """
    try:
        meta = json.loads(text)
    except ValueError as error:
        raise _damaged(path, f"no valid meta record: {error}") from error
    if not isinstance(meta, dict):
        raise _damaged(path, f"its meta record is not a JSON object: {str(meta)[:60]}")
    step, model_config = meta.get("step"), meta.get("model_config")
    if type(step) is not int or step < 0 or not isinstance(model_config, dict):
        raise _damaged(path, f"its meta record needs a step number and a model configuration, "
                             f"has step {step!r} and model_config {model_config!r}")
    if reason := _invalid_model_config(model_config):
        raise _damaged(path, f"its model configuration is not one vtx builds: {reason}")
    return meta


def _from_arrays(path: Path, arrays: dict, meta: dict) -> Checkpoint:
    """The checkpoint of `arrays` (every entry but the meta record) and `meta` (`_checked_meta`),
    read from `path`.

    Raises:
        CheckpointError: the checksum does not match, or the EMA is not of the model's shapes.
    """
    stored = meta.pop(_CHECKSUM, None)
    if stored is not None and stored != _checksum(arrays, meta):
        raise _damaged(path, "checksum mismatch: its contents changed after it was written")
    names = sorted(arrays)
    model = [arrays[n] for n in names if n.startswith("model_")]
    ema = [arrays[n] for n in names if n.startswith("ema_")] or None
    if ema is not None and [a.shape for a in ema] != [a.shape for a in model]:
        raise _damaged(path, "its EMA's variables are not of its model's shapes")
    return Checkpoint(model=model,
                      optimizer=[arrays[n] for n in names if n.startswith("optimizer_")],
                      meta=meta,
                      vocab=arrays["vocab"].tobytes() if "vocab" in arrays else None, ema=ema)


def model_config(checkpoint: Checkpoint, path: str | Path) -> ModelConfig:
    """The model configuration `checkpoint` (read from `path`) records, checked against its
    weights: what translating, parsing, scoring or exporting it builds.

    Raises:
        ArchitectureError: a key this vtx does not know (a newer vtx's), or weights for another
            number of parameters than it implies (fewer layers, another width); `path` named.
    """
    values = checkpoint.meta["model_config"]
    try:
        config = ModelConfig.from_dict(values)
    except ValueError as error:
        raise ArchitectureError(f"{path}: its {error} (written by another version of vtx?); "
                                f"this vtx builds none of them") from None
    held = sum(a.size for a in checkpoint.model if np.issubdtype(a.dtype, np.floating))
    if held != config.parameter_count:
        raise ArchitectureError(
            f"{path}: its weights hold {held:,} parameters, its model configuration "
            f"(num_layers {config.num_layers}, d_model {config.d_model}, d_ff {config.d_ff}, "
            f"vocab_size {config.vocab_size}) has {config.parameter_count:,}"
            + _first_beyond(checkpoint.model, config.parameter_count))
    return config


def _first_beyond(model: list, parameters: int) -> str:
    """Which of the weights `model` lies past the model's `parameters` ("" if none does)."""
    count = 0
    for index, array in enumerate(model):
        if np.issubdtype(array.dtype, np.floating):
            count += array.size
            if count > parameters:
                return (f": its variable model_{index:05d} (shape {array.shape}) is past "
                        f"them")
    return ""


def _invalid_model_config(values: dict) -> str | None:
    """Why a checkpoint's model configuration cannot be built (a wrong type, a value out of
    range, weights beyond this machine's memory), or None. Keys this vtx does not know are left
    to `check_architecture`, which names them."""
    try:
        model_config = ModelConfig(**_known_keys(values))
        check_fits_in_memory(model_config, "it")
    except ValueError as error:
        return str(error)
    return None


def _known_keys(values: dict) -> dict:
    """`values` without the keys `ModelConfig` does not have."""
    known = {field.name for field in dataclasses.fields(ModelConfig)}
    return {key: value for key, value in values.items() if key in known}


def _damaged(path: Path, reason: str) -> CheckpointError:
    return CheckpointError(f"{path}: not a readable vtx checkpoint, damaged or of another format "
                           f"({reason})")


def _checksum(arrays: dict, meta: dict) -> str:
    """SHA-256 hex digest of `meta` and the entries' names, dtypes, shapes and bytes."""
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}:".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def set_aside(path: str | Path) -> Path:
    """Rename a damaged checkpoint to `<name>.damaged` (kept for inspection, never listed again).

    Returns:
        The new path.
    """
    return atomic.move_aside(path, DAMAGED_SUFFIX)


def average(paths: list[str | Path], ema: bool = False,
            keep_optimizer: bool = False) -> Checkpoint:
    """Mean of the floating-point model variables of `paths` (`ema`: of their EMAs' weights,
    `with_ema_weights`).

    Integer state (dropout RNG counters) is copied from the checkpoint with the highest step; so
    is the meta record, with `averaged_from` added. The average holds no EMA and, unless
    `keep_optimizer`, no optimizer state: nothing reads it (translating needs the weights, and
    `vtx train --finetune-from` starts its optimizer afresh), and Adam's two moments would
    triple the file.

    Raises:
        ValueError: `ema` and a checkpoint holds no EMA (named).
        ArchitectureError: a checkpoint whose weights are not its own model configuration's
            (`model_config`: the file and the first variable past them named).
        ValueError: no paths, a file given twice (it would weigh double), or checkpoints of
            different architectures or vocabularies (pieces, not bytes: the newest's
            vocabulary goes with the averaged weights).
    """
    if not paths:
        raise ValueError("no checkpoints to average")
    seen: dict[str, str | Path] = {}
    for path in paths:
        if (real := os.path.realpath(path)) in seen:
            same = f" (as {seen[real]})" if str(seen[real]) != str(path) else ""
            raise ValueError(f"{path} is given twice{same}: it would weigh double in the mean")
        seen[real] = path
    loaded = sorted(((load(p, ema), p) for p in paths),
                    key=lambda pair: pair[0].meta.get("step", 0))
    checkpoints = [checkpoint for checkpoint, _ in loaded]
    newest = checkpoints[-1]
    for checkpoint, path in loaded:  # else an average that translate refuses
        model_config(checkpoint, path)
    _refuse_copies(loaded)
    for checkpoint, path in loaded:
        _check_same_architecture(newest, checkpoint, path)
        _check_same_vocabulary(newest, checkpoint, path, loaded[-1][1])
    averaged = []
    for i, array in enumerate(newest.model):
        if np.issubdtype(array.dtype, np.floating):
            total = np.sum([c.model[i].astype(np.float64) for c in checkpoints], axis=0)
            averaged.append((total / len(checkpoints)).astype(array.dtype))
        else:
            averaged.append(array)
    meta = {**newest.meta, "averaged_from": [c.meta.get("step") for c in checkpoints]}
    return Checkpoint(averaged, newest.optimizer if keep_optimizer else [], meta, newest.vocab)


def _refuse_copies(loaded: list[tuple[Checkpoint, str | Path]]) -> None:
    """Refuse two files of one checkpoint among others (`checkpoint_best.npz` is a copy of a
    numbered one, and a glob `checkpoint_*.npz` takes both): that checkpoint would weigh double.
    Copies alone average to themselves and pass."""
    if all(_same_weights(loaded[0][0], checkpoint) for checkpoint, _ in loaded[1:]):
        return
    for (first, first_path), (second, second_path) in itertools.combinations(loaded, 2):
        if _same_weights(first, second):
            raise ValueError(f"{second_path} holds the same weights as {first_path} (step "
                             f"{first.meta.get('step')}; a checkpoint_best.npz is a copy of a "
                             f"numbered one): it would weigh double in the mean; give one of them")


def _same_weights(a: Checkpoint, b: Checkpoint) -> bool:
    return (a.meta.get("step") == b.meta.get("step") and len(a.model) == len(b.model)
            and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a.model, b.model)))


def _check_same_architecture(reference: Checkpoint, other: Checkpoint, path) -> None:
    check_architecture(reference.meta.get("model_config"), other.meta.get("model_config"), path,
                       "every averaged checkpoint must match the newest")
    shapes = [a.shape for a in other.model]
    if shapes != [a.shape for a in reference.model]:
        raise ValueError(f"{path}: variable shapes differ from the newest checkpoint")


def _check_same_vocabulary(reference: Checkpoint, other: Checkpoint, path, reference_path) -> None:
    """Refuse a checkpoint whose vocabulary names other pieces than the newest's: its weights,
    averaged with the others, would be read through the newest's vocabulary."""
    if other.vocab == reference.vocab or other.vocab is None or reference.vocab is None:
        return
    from vtx.data.vocab import Vocabulary, differing_pieces

    differ = differing_pieces(Vocabulary.from_bytes(other.vocab, f"in {path}"),
                              Vocabulary.from_bytes(reference.vocab, f"in {reference_path}"))
    if differ:
        first, a, b = differ[0]
        raise ValueError(f"{path} was trained on another vocabulary than {reference_path}, the "
                         f"newest: {len(differ)} ids name other pieces (id {first}: {a!r} there, "
                         f"{b!r} in the newest); average checkpoints of one run")


def check_architecture(expected: dict | None, found: dict | None, where: str | Path,
                       advice: str = "") -> None:
    """Refuse a model configuration read from `where` that is not the `expected` one.

    Args:
        expected: the model configuration in use (`ModelConfig.to_dict()`).
        found: the one `where` records (a checkpoint's meta, a run's config.json); None if none.
        where: the file `found` was read from, named in the message.
        advice: what the user can do, appended to the message.

    Raises:
        ArchitectureError: they differ; the message names `where` and every differing field
            with both values.
    """
    if found == expected:
        return
    expected, found = expected or {}, found or {}
    differences = ", ".join(f"{key} {found.get(key)}, expected {expected.get(key)}"
                            for key in sorted(expected.keys() | found.keys())
                            if found.get(key) != expected.get(key))
    raise ArchitectureError(f"{where} holds a different architecture ({differences})"
                            + (f"; {advice}" if advice else ""))
