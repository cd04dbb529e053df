"""Fine-tuning (`vtx train --finetune-from CHECKPOINT`): a new run that starts from another run's
weights, with a fresh optimizer, learning-rate schedule and data position.

The model is the checkpoint's: its configuration is taken (the dropout rates may be set anew,
they change no weight), and --arch or a size flag that disagrees with it is refused, as is a data
directory whose vocabulary names other pieces. A save dir that already holds checkpoints resumes
from them as any run does, so a killed fine-tuning goes on exactly; the flag is then said to be
ignored.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vtx import checkpoints, config
from vtx.config import ModelConfig
from vtx.errors import CheckpointError, DataError

if TYPE_CHECKING:
    from vtx.data.directory import DataDirectory
    from vtx.training.directory import RunDirectory

# The model's shape, which the checkpoint's weights fix, and the flags of `vtx train` that set it.
SIZE_FLAGS = {"num_layers": "--layers", "d_model": "--d-model", "d_ff": "--d-ff",
              "num_heads": "--heads"}


def load_start(path: str | Path) -> checkpoints.Checkpoint:
    """The checkpoint a fine-tuning starts from.

    Raises:
        ValueError: it does not load (damaged, not a checkpoint, missing), `--finetune-from`
            and the file named.
    """
    try:
        return checkpoints.load(path)
    except FileNotFoundError:
        raise ValueError(f"--finetune-from {path}: no such checkpoint file") from None
    except IsADirectoryError:
        raise ValueError(f"--finetune-from {path} is a directory: give one checkpoint file, "
                         f"such as SAVE_DIR/checkpoint_best.npz") from None
    except (CheckpointError, OSError) as error:
        raise ValueError(f"--finetune-from: {error}") from error


def resumed_model_config(run_dir: "RunDirectory", finetune_from: str | Path,
                         log: Callable[[str], None]) -> tuple[dict, Path] | None:
    """(model configuration, the checkpoint it was read from) of the newest checkpoint of
    `run_dir` whose meta reads, where the save dir holds checkpoints: the run resumes from them
    and `--finetune-from` is ignored (said). None where it holds none that reads."""
    meta = run_dir.newest_meta
    if not (meta and isinstance(meta.get("model_config"), dict)):
        return None
    log(f"warning: --finetune-from {finetune_from} ignored: {run_dir} holds checkpoints (the "
        f"newest {run_dir.newest.name}), so this run resumes from them; a fine-tuning killed "
        f"there goes on exactly (another --save-dir starts a new fine-tuning)")
    return meta["model_config"], run_dir.newest


def model_and_start(run_dir: "RunDirectory", finetune_from: str | Path, data: "DataDirectory",
                    arch: str | None, overrides: dict, log: Callable[[str], None]
                    ) -> tuple[ModelConfig, checkpoints.Checkpoint | None]:
    """(the model configuration, the checkpoint to start from) of a fine-tuning run: the model of
    `finetune_from`, or where the save dir holds checkpoints (the run resumes from them) of its
    newest, whose start is then not read (None).

    Raises:
        ValueError: the checkpoint does not load, --arch or a size flag disagrees with its
            model, or the data's vocabulary is not its.
    """
    resumed = resumed_model_config(run_dir, finetune_from, log)
    if resumed is not None:
        return model_config(*resumed, arch, overrides), None
    start = load_start(finetune_from)
    check_vocabulary(start, finetune_from, data)
    return model_config(start.meta["model_config"], finetune_from, arch, overrides), start


def start_from(trainer, finetune_from: str | Path, start: checkpoints.Checkpoint | None,
               data: "DataDirectory") -> None:
    """Load the weights of `start`, the checkpoint `finetune_from`, into a `Trainer` that
    resumed nothing; read now where `model_and_start` left it (None: the save dir's checkpoints
    were listed, but none loaded).

    Raises:
        ValueError: it does not load, or the data's vocabulary is not its.
    """
    if start is None:
        start = load_start(finetune_from)
        check_vocabulary(start, finetune_from, data)
    trainer.start_from(start, finetune_from)


def model_config(source: dict, where: str | Path, arch: str | None,
                 overrides: dict) -> ModelConfig:
    """The model a fine-tuning trains: `source` (the model configuration read from `where`)
    with the dropout rates of `overrides` (None values ignored).

    Args:
        arch: --arch where given (None: the checkpoint's model); its preset's shape must be
            the checkpoint's.
        overrides: the model flags (`run.resolve_model_config`'s); a size given must agree.

    Raises:
        ValueError: --arch or a size flag disagrees with the checkpoint (both named).
    """
    model = ModelConfig.from_dict(source)
    said = ", ".join(f"{key} {getattr(model, key)}" for key in SIZE_FLAGS)
    if arch is not None:
        preset = config.preset(arch)
        differ = [key for key in SIZE_FLAGS if getattr(preset, key) != getattr(model, key)]
        if differ:
            theirs = ", ".join(f"{key} {getattr(preset, key)}" for key in differ)
            raise ValueError(f"--arch {arch} ({theirs}) is not the model of --finetune-from "
                             f"{where} ({said}): fine-tuning trains the checkpoint's model; "
                             f"leave --arch out")
    for key, flag in SIZE_FLAGS.items():
        value = overrides.get(key)
        if value is not None and value != getattr(model, key):
            raise ValueError(f"{flag} {value} conflicts with --finetune-from {where}, whose "
                             f"{key} is {getattr(model, key)}: fine-tuning trains the "
                             f"checkpoint's model; leave {flag} out")
    rates = {key: value for key, value in overrides.items()
             if key not in SIZE_FLAGS and value is not None}
    return dataclasses.replace(model, **rates)


def check_vocabulary(start: checkpoints.Checkpoint, path: str | Path,
                     data: "DataDirectory") -> None:
    """Refuse a data directory whose vocabulary is not the checkpoint's: of another size the
    embeddings do not fit; of the same size with other pieces, each embedding would be read as
    another piece's.

    Raises:
        ValueError: the sizes or the pieces differ (the first differing id named).
    """
    from vtx.data.vocab import Vocabulary, differing_pieces

    size = start.meta["model_config"].get("vocab_size")
    if size != data.vocab_size:
        raise ValueError(f"--finetune-from {path} has a vocabulary of {size} ids, the data "
                         f"directory {data} one of {data.vocab_size} ({data.vocabulary_path}): "
                         f"fine-tuning needs data preprocessed with the checkpoint's vocabulary "
                         f"(`vtx preprocess --vocab-from {path}`)")
    now = data.vocabulary_path.read_bytes()
    if start.vocab is None or start.vocab == now:
        return
    try:
        before = Vocabulary.from_bytes(start.vocab, f"the vocabulary in {path}")
    except DataError as error:
        raise ValueError(f"--finetune-from: {error}") from None
    differ = differing_pieces(before, Vocabulary.from_bytes(now, str(data.vocabulary_path)))
    if differ:
        first, a, b = differ[0]
        raise ValueError(f"--finetune-from {path} was trained on another vocabulary than "
                         f"{data.vocabulary_path}: {len(differ)} of {size} ids name other pieces "
                         f"(id {first}: {a!r} there, {b!r} here), so its embeddings would be "
                         f"read as other pieces'; preprocess the new data with the checkpoint's "
                         f"vocabulary (`vtx preprocess --vocab-from {path}`)")
