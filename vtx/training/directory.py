"""A `vtx train` save dir, opened once: its configuration (config.json), its numbered
checkpoints and the newest one's meta, the lock a training process holds on it and the folder
of the profiler's traces (the history is `progress.py`'s, the XLA cache `compile_cache.py`'s).

Opening one reads nothing but the newest checkpoint's meta; `check_config` and `write_config`
read and write config.json, `recorded_vocabulary` finds the vocabulary a fine-tune needs through
it; `lock` holds the save dir's lock. No TensorFlow import.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable

from vtx import atomic, checkpoints, locking
from vtx.config import ModelConfig, TrainConfig
from vtx.errors import TrainingError

CONFIG_FILE = "config.json"
PROFILE_FOLDER = "profile"
# The file `vtx train` holds an exclusive lock on (`vtx.locking`) while it writes its save dir; it
# says which process holds it. The OS releases the lock when that process ends, however it ends.
LOCK_FILE = ".vtx-train.lock"


def lock_save_dir(save_dir: Path) -> bool:
    """Hold the save dir's lock for this process (again: nothing to do).

    Returns:
        False where no lock can be taken (a filesystem without locks, a read-only save dir:
        the run goes on without one), else True.

    Raises:
        TrainingError: another process holds it (the holder its lock file names).
    """
    try:
        return locking.acquire(Path(save_dir) / LOCK_FILE)
    except locking.Held as held:
        raise TrainingError(
            f"{save_dir} is being written by another `vtx train` ({held.holder or 'starting'}; "
            f"{held.path} is its lock): one run writes a save dir at a time, or their "
            f"checkpoints and history mix; wait for it to end, stop it, or use another "
            f"--save-dir") from None


def say_holder(save_dir: Path) -> None:
    """Write into the held lock file which process holds it (for a refused run to name)."""
    locking.say_holder(Path(save_dir) / LOCK_FILE)


def unlock_save_dir(save_dir: Path) -> None:
    """Release the save dir's lock, where this process holds it."""
    locking.release(Path(save_dir) / LOCK_FILE)


def vocabulary_line(vocabulary: Path) -> str:
    """The line `vtx train` and `vtx average-checkpoints` end with: the vocabulary that a
    fine-tune of their checkpoints preprocesses its data with."""
    return f"vocabulary: {vocabulary} (for --finetune-from: vtx preprocess --spm-model it)"


@dataclasses.dataclass(frozen=True)
class RunDirectory:
    """A save dir, opened: `path`, and its newest numbered checkpoint whose meta reads (`newest`,
    its `newest_meta`; None where there is none), which a run resumes from. It stands for its
    path where one is wanted (`os.fspath`, `str`)."""

    path: Path
    newest: Path | None = None
    newest_meta: dict | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def open(cls, path: str | Path) -> "RunDirectory":
        """The save dir at `path` (it need not exist yet), its checkpoints listed once."""
        path = Path(path)
        for checkpoint in reversed(checkpoints.list_checkpoints(path)):
            if isinstance(meta := checkpoints.read_meta(checkpoint), dict):
                return cls(path, checkpoint, meta)
        return cls(path)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def resumes(self) -> bool:
        """Whether a run here resumes from a checkpoint that made updates."""
        return bool(self.newest_meta and self.newest_meta.get("step"))

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def profile_folder(self) -> Path:
        """Where `--profile` writes its traces without --tensorboard-dir."""
        return self.path / PROFILE_FOLDER

    def recorded_precision(self) -> tuple[str, str] | None:
        """(precision, checkpoint) recorded by the newest checkpoint, or None."""
        saved = (self.newest_meta or {}).get("train_config")
        precision = saved.get("precision") if isinstance(saved, dict) else None
        return (precision, str(self.newest)) if isinstance(precision, str) else None

    def check_config(self, model_config: ModelConfig) -> None:
        """Refuse a save dir whose config.json describes another model (reads, writes nothing).

        Raises:
            ValueError: config.json unreadable (the path named).
            checkpoints.ArchitectureError: config.json describes another model (a ValueError).
        """
        path = self.config_path
        if not path.exists():
            return
        try:
            previous = json.loads(path.read_text())
        except ValueError as error:
            raise ValueError(f"{path}: not valid JSON ({error}); move it away to start "
                             f"over") from error
        recorded = previous.get("model") if isinstance(previous, dict) else None
        if not isinstance(recorded, dict):
            found = (f"its model {recorded!r:.60}" if isinstance(previous, dict)
                     else f"{previous!r:.60}")
            raise ValueError(f"{path}: not the configuration `vtx train` writes ({found}, not a "
                             f"JSON object of the model's settings); move it away to start over")
        checkpoints.check_architecture(model_config.to_dict(), recorded, path,
                                       "use a new --save-dir or the same model flags")

    def write_config(self, data_dir, arch: str | None, model_config: ModelConfig,
                     train_config: TrainConfig, finetuned_from: str | None = None) -> None:
        """Save the resolved configuration beside the checkpoints (once `check_config` passed);
        `arch` None: a fine-tuning's model, the checkpoint's (`finetuned_from`)."""
        record = {"arch": arch, "data_dir": str(Path(data_dir).resolve()),
                  "model": model_config.to_dict(), "train": train_config.to_dict(),
                  "finetuned_from": finetuned_from}
        self.path.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.config_path, json.dumps(record, indent=2, sort_keys=True) + "\n")

    def check_outside(self, data_dir) -> None:
        """Refuse a save dir that is the data directory or inside it: `vtx preprocess --force`
        replaces that directory whole, and with it the checkpoints.

        Raises:
            ValueError: the save dir is there (both named).
        """
        if "://" in str(self.path) or "://" in str(data_dir):  # a URL: left to TensorFlow
            return
        save, data = self.path.resolve(), Path(data_dir).resolve()
        if save == data or data in save.parents:
            raise ValueError(f"--save-dir {self.path} is {'' if save == data else 'inside '}the "
                             f"data directory {data_dir}: `vtx preprocess --force` there would "
                             f"delete the checkpoints with it; use a --save-dir outside it")

    def lock(self, log: Callable[[str], None]) -> None:
        """Hold the save dir's lock while this process trains; where none can be taken that is
        said and the run goes on.

        Raises:
            TrainingError: another process holds it.
        """
        if not lock_save_dir(self.path):
            log(f"warning: {self.path} cannot be locked (read-only, or a filesystem without "
                f"locks): make sure no other run writes it")

    def say_holder(self) -> None:
        """Write into the held lock file which process holds it (for a refused run to name)."""
        say_holder(self.path)

    def unlock(self) -> None:
        """Release the save dir's lock, where this process holds it."""
        unlock_save_dir(self.path)

    def recorded_vocabulary(self, vocab: bytes | None = None) -> Path:
        """The SentencePiece model of the data directory this run trained on (config.json's
        `data_dir`): the one a fine-tune of its checkpoints preprocesses its data with
        (`vtx preprocess --spm-model`, then `vtx train --finetune-from`).

        Args:
            vocab: the vocabulary a checkpoint of the run carries; given, the file must hold
                the same bytes (a data directory preprocessed again since holds another).

        Raises:
            ValueError: no config.json, no data directory recorded in it, that directory's
                vocabulary gone or not `vocab` (the reason said).
        """
        from vtx.data.directory import load_meta  # checks meta.json only, not every file's bytes

        try:
            record = json.loads(self.config_path.read_text())
            data_dir = Path(record["data_dir"])
            path = data_dir / load_meta(data_dir)["vocab"]["model"]
            found = path.read_bytes() if vocab is not None else b""
        except (OSError, ValueError) as error:
            raise ValueError(f"not found through {self.config_path}: {error}") from error
        except (KeyError, TypeError) as error:
            raise ValueError(f"not found through {self.config_path}: not the record `vtx "
                             f"train` writes (no {error})") from error
        if vocab is not None and found != vocab:
            raise ValueError(f"{path} is not the checkpoints' vocabulary ({data_dir} was "
                             f"preprocessed again since)")
        return path


def vocabulary_of(checkpoint_paths: list[str | Path], vocab: bytes | None) -> Path:
    """The vocabulary a fine-tune of `checkpoint_paths` (which carry `vocab`) needs: that of the
    first of their save dirs that records it (`RunDirectory.recorded_vocabulary`).

    Raises:
        ValueError: none records it (the first save dir's reason said).
    """
    folders = list(dict.fromkeys(Path(path).parent for path in checkpoint_paths))
    reasons = []
    for folder in folders:
        try:
            return RunDirectory(folder).recorded_vocabulary(vocab)
        except ValueError as error:
            reasons.append(error)
    raise reasons[0] if reasons else ValueError("no checkpoints")
