"""The trainer's checkpoints: what one holds, writing it, loading it back with its checks and
warnings, and resuming a run from the newest one that loads (damaged ones set aside).

`Checkpointer` writes and restores what the engine says a checkpoint holds of it
(`UpdateEngine.checkpoint_arrays`, `engine.py`) and the run state (`state.py`); the file format
is `vtx.checkpoints`; when checkpoints are written is `loop.py`'s.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from vtx import checkpoints
from vtx.config import ModelConfig, TrainConfig
from vtx.data.vocab import Vocabulary, differing_pieces
from vtx.errors import (ArchitectureError, CheckpointError, DataError, TrainingError,
                        disk_full)
from vtx.training.directory import RunDirectory
from vtx.training.distribute import Collectives, Topology
from vtx.training.engine import UpdateEngine
from vtx.training.precision import AUTO
from vtx.training.schedule import paper_learning_rate
from vtx.training.state import RunState
from vtx.training.stream import BatchStream


class Checkpointer:
    """Writes and reads one run's checkpoints: `save` the engine's model and optimizer with the
    run state, `restore` one after checking that it fits this run, `resume` the newest that
    loads.

    Args:
        engine: the model and optimizer whose variables a checkpoint holds.
        run_dir: the save dir, where checkpoint_<step>.npz are written.
        topology, collectives: the workers (only the chief writes; positions are gathered).
        log: receives the resume's lines and warnings.
        vocab: serialized SentencePiece model stored in every checkpoint (None: taken from the
            checkpoint restored).
        requested_precision: --precision as given (`auto`, or the precision), for the warning
            of a resume in another precision.
        clock: seconds from an arbitrary origin: the run's wall time kept in checkpoints.
    """

    def __init__(self, engine: UpdateEngine, run_dir: RunDirectory, topology: Topology,
                 collectives: Collectives, log: Callable[[str], None], vocab: bytes | None,
                 requested_precision: str, clock: Callable[[], float]):
        self.engine, self.run_dir, self.save_dir = engine, run_dir, run_dir.path
        self.model_config: ModelConfig = engine.model_config
        self.config: TrainConfig = engine.config
        self.topology, self.collectives, self.log = topology, collectives, log
        self.vocab, self.requested_precision, self.clock = vocab, requested_precision, clock
        self._started = clock()
        self.resumed_from: Path | None = None  # the checkpoint `resume` loaded, if any

    def _meta(self, state: RunState) -> dict:
        elapsed = state.elapsed_seconds + self.clock() - self._started
        return {**state.to_meta(elapsed),
                "model_config": self.model_config.to_dict(), "train_config": self.config.to_dict(),
                "num_workers": self.topology.num_workers,
                "num_replicas": self.engine.strategy.num_replicas_in_sync}

    def _gather_positions(self, stream: BatchStream) -> list[tuple[int, int]]:
        """Every worker's stream position (a collective when there are several workers)."""
        return [(int(e), int(o)) for e, o in self.collectives.gather(np.array(stream.position))]

    def save(self, state: RunState, stream: BatchStream, numbered: bool = True) -> Path | None:
        """Write checkpoint_<step>.npz of `state` at `stream`'s position (chief only) and prune
        to `keep_last`; with `numbered` false, write checkpoint_best.npz only (a best between
        the step cadence's checkpoints, kept out of the numbered ones that are averaged)."""
        state.positions = self._gather_positions(stream)
        if not self.topology.is_chief:
            return None
        path = (checkpoints.checkpoint_path(self.save_dir, state.step) if numbered
                else self.save_dir / checkpoints.BEST_NAME)
        model, optimizer, ema = self.engine.checkpoint_arrays()
        try:
            checkpoints.save(path, checkpoints.Checkpoint(
                model=model, optimizer=optimizer, meta=self._meta(state), vocab=self.vocab,
                ema=ema))
        except OSError as error:
            if not disk_full(error):
                raise
            kept = checkpoints.list_checkpoints(self.save_dir)
            newest = f"the newest kept is {kept[-1].name}" if kept else "none is kept yet"
            raise TrainingError(
                f"the disk of {self.save_dir} has no room (full, or over a quota): step "
                f"{state.step}'s checkpoint could not be written ({error}); {newest}: free space "
                f"there (--keep-last keeps fewer checkpoints) and run again, which resumes from "
                f"the newest") from error
        if numbered and self.config.keep_last:
            for old in checkpoints.list_checkpoints(self.save_dir)[:-self.config.keep_last]:
                old.unlink(missing_ok=True)
        return path

    def _ema_warning(self, path, checkpoint: checkpoints.Checkpoint) -> str | None:
        """A warning where the checkpoint or this run has no EMA of the weights (a run given
        --ema-decay, or not, on resuming), or their decays differ."""
        saved = checkpoint.meta.get("train_config") or {}
        if not self.engine.keeps_ema:
            return (None if checkpoint.ema is None else
                    f"warning: {path} holds an EMA of the weights, which this run (without "
                    f"--ema-decay) does not keep: its checkpoints hold none; --ema-decay "
                    f"{saved.get('ema_decay')} keeps it")
        if checkpoint.ema is None:
            return (f"warning: {path} holds no EMA of the weights (trained without "
                    f"--ema-decay): this run's EMA starts from its weights")
        if saved.get("ema_decay") != self.config.ema_decay:
            return (f"warning: resumed with --ema-decay {self.config.ema_decay:g} (the "
                    f"checkpoint's run: {saved.get('ema_decay')}): the EMA goes on from the "
                    f"checkpoint's with the new decay")
        return None

    def restore(self, path, state: RunState) -> None:
        """Load weights, optimizer state and RNG state from `path` into the engine, and the run
        state (step, data positions, counters) into `state`.

        Raises:
            TrainingError: the checkpoint is of another architecture or worker count, or was
                trained on another vocabulary than this run's.
        """
        checkpoint = checkpoints.load(path)
        try:
            checkpoints.check_architecture(self.model_config.to_dict(),
                                           checkpoint.meta.get("model_config"), path,
                                           "use another --save-dir")
        except ArchitectureError as error:
            raise TrainingError(str(error)) from error
        self._check_vocabulary(path, checkpoint.vocab)
        saved_workers = checkpoint.meta.get("num_workers", 1)
        if saved_workers != self.topology.num_workers:
            # Each worker's data position is in the checkpoint: another count has none to take.
            raise TrainingError(
                f"{path} was written by {_count(saved_workers, 'worker')}, this run has "
                f"{_count(self.topology.num_workers, 'worker')}: resume with "
                f"{_count(saved_workers, 'worker')} (TF_CONFIG's cluster), or use another "
                f"--save-dir")
        if not checkpoint.optimizer and self.engine.checkpoint_shapes()[1]:
            raise TrainingError(
                f"{path} holds weights only, no optimizer state (an average written by `vtx "
                f"average-checkpoints`): a run does not resume from it; start one from its "
                f"weights with `vtx train --finetune-from {path}` and another --save-dir, or "
                f"move it out of {Path(path).parent}")
        saved_precision = (checkpoint.meta.get("train_config") or {}).get("precision")
        for shapes, arrays in zip(self.engine.checkpoint_shapes(),
                                  (checkpoint.model, checkpoint.optimizer)):
            if shapes != [a.shape for a in arrays]:
                if saved_precision and saved_precision != self.config.precision:
                    # mixed_float16's loss scaling adds optimizer variables the others lack
                    raise TrainingError(
                        f"{path} was trained with --precision {saved_precision}, this run has "
                        f"{self.config.precision}, whose optimizer state differs: resume with "
                        f"--precision {saved_precision}, or use another --save-dir")
                raise TrainingError(f"{path}: variable shapes do not match this model")
        self.engine.load_checkpoint_arrays(checkpoint.model, checkpoint.optimizer,
                                           checkpoint.ema)
        ema_warning = self._ema_warning(path, checkpoint)
        meta = checkpoint.meta
        state.load_meta(meta)
        if self.vocab is None:
            self.vocab = checkpoint.vocab
        saved = meta.get("train_config") or {}
        warnings = (
            self._reordered_data_warning(saved, meta.get("training_data"), state),
            smoothing_warning(saved, self.config, state.best_valid, state.best_step),
            schedule_warning(saved, self.config, self.model_config.d_model, state.step),
            precision_warning(saved, self.requested_precision, self.config.precision),
            effective_batch_warning(path, meta.get("num_replicas"), saved.get("update_freq", 1),
                                    self.engine.strategy.num_replicas_in_sync,
                                    self.config.update_freq),
            ema_warning)
        for warning in warnings:
            if warning:
                self.log(warning)

    def start_from(self, start: checkpoints.Checkpoint, path, state: RunState) -> None:
        """Load the weights of `start` (read from `path`) into the model for a fine-tuning run:
        the floating-point variables only; the optimizer, the dropout's random state and
        `state` stay this run's fresh ones (step 0, each worker at the start of its data).

        Raises:
            TrainingError: its variables' shapes are not this model's.
        """
        if self.engine.checkpoint_shapes()[0] != [a.shape for a in start.model]:
            raise TrainingError(f"--finetune-from {path}: its variables' shapes are not those of "
                                f"this run's model")
        self.engine.load_weights(start.model)
        state.finetuned_from = str(path)
        self.log(f"fine-tuning from {path} (step {start.meta.get('step')}): its weights, a "
                 f"fresh optimizer and learning-rate schedule, the data from its start")

    def _check_vocabulary(self, path, saved: bytes | None) -> None:
        """Refuse a checkpoint trained on other pieces than this run's vocabulary (a data
        directory preprocessed again, or another one): of the same size, it would load and
        train on, each embedding read as another piece's, and write the new vocabulary into
        the next checkpoints, where nothing could tell any more.

        Raises:
            TrainingError: the pieces differ (the first differing id named).
            CheckpointError: the checkpoint's vocabulary does not load (damaged).
        """
        if saved is None or self.vocab is None or saved == self.vocab:
            return
        try:
            before = Vocabulary.from_bytes(saved, f"the vocabulary in {path}")
        except DataError as error:
            raise CheckpointError(str(error)) from None
        now = Vocabulary.from_bytes(self.vocab, "this run's vocabulary")
        differ = differing_pieces(before, now)
        if not differ:  # the same pieces serialized otherwise: the ids mean the same
            return
        first, a, b = differ[0]
        raise TrainingError(
            f"{path} was trained on another vocabulary than this run's data directory's "
            f"spm.model: {len(differ)} of {max(before.size, now.size)} ids name other pieces "
            f"(id {first}: {a!r} there, {b!r} here), so its embeddings would be read as other "
            f"pieces' (a data directory preprocessed again gets another vocabulary from other "
            f"text or flags); train on the data directory it was trained on, or use another "
            f"--save-dir")

    def _reordered_data_warning(self, saved: dict, saved_data: dict | None,
                                state: RunState) -> str | None:
        """A warning when this run's flags order the data otherwise than those of the run that
        saved the restored checkpoint while its data position is inside an epoch: --seed shuffles
        the batches (and seeds the subword sampling), --subword-alpha and --subword-nbest sample
        other pieces, and --max-tokens cuts the bucketed ones (packed rows keep the
        checkpoint's shapes). The position counts batches, so it then names other ones (as in fairseq).
        So it does when the data directory holds other training pairs than the checkpoint's
        run had (`DataDirectory.training_data`): the same vocabulary over other text loads (more
        data, or the wrong directory). A saved position is inside its epoch unless no update
        was made (the epoch moves on when its next batch is asked for)."""
        flags = [("seed", "--seed"), ("subword_alpha", "--subword-alpha"),
                 ("subword_nbest", "--subword-nbest")]
        if not (state.batches and state.batches.packed):
            flags.append(("max_tokens", "--max-tokens"))
        # A checkpoint of a run from before subword sampling was kept sampled nothing.
        saved = {"subword_alpha": None, "subword_nbest": None, **saved}
        changed = [f"{flag} {_said(getattr(self.config, key))} (the checkpoint's run: "
                   f"{_said(saved[key])})" for key, flag in flags
                   if key in saved and saved[key] != getattr(self.config, key)]
        now = state.training_data
        if saved_data and now and saved_data != now:
            counts = [(data["pairs"], data["target_tokens"]) for data in (now, saved_data)]
            how = ("the same counts, other lengths or another order" if counts[0] == counts[1]
                   else f"the checkpoint's run: {counts[1][0]:,} and {counts[1][1]:,}")
            changed.append(f"other training pairs ({counts[0][0]:,} pairs, {counts[0][1]:,} "
                           f"target tokens; {how})")
        inside = [(worker, position) for worker, position in enumerate(state.positions)
                  if position[1]]
        if not changed or not inside:
            return None
        worker, (epoch, offset) = inside[0]
        whose = f" of worker {worker}" if len(state.positions) > 1 else ""
        return (f"warning: resumed with {' and '.join(changed)}: the data position (epoch "
                f"{epoch}, batch {offset}{whose}) now counts the batches of another order, so "
                f"until epoch {epoch} ends some pairs come again and others not at all; the "
                f"checkpoint's values resume exactly")

    def resume(self, state: RunState) -> None:
        """Restore the newest checkpoint of `save_dir` that loads into the engine and `state`,
        setting damaged ones aside.

        Writes nothing else, so a caller can check a save dir before writing into it.

        With several workers (one collective) every one must have resumed at the same step: only
        the chief writes checkpoints, into its own `save_dir`.

        Raises:
            TrainingError: a loadable checkpoint is of another architecture or worker count, or
                the workers resumed at different steps.
        """
        if self.topology.is_chief and self.save_dir.is_dir():
            self.run_dir.lock(self.log)
        self._resume_newest(state)
        refusal = self._start_over_refusal() if self.resumed_from is None else None
        best = self.save_dir / checkpoints.BEST_NAME
        if self.resumed_from is not None and best.is_file() and not checkpoints.read_meta(best):
            self.log(f"warning: {best} does not load (damaged): this run's next best "
                     f"validation replaces it")
        if self.topology.num_workers > 1:
            if self.collectives.any_worker(refusal is not None):
                raise TrainingError(refusal or "another worker's save dir holds a best "
                                    "checkpoint that starting over would replace (its log "
                                    "says which)")
        elif refusal:
            raise TrainingError(refusal)
        if self.topology.num_workers > 1:
            steps = [int(step) for step in self.collectives.every_worker(state.step)]
            if len(set(steps)) > 1:
                raise TrainingError(
                    "the workers resumed at different steps ("
                    + ", ".join(f"worker {i}: {step}" for i, step in enumerate(steps))
                    + f"; this is worker {self.topology.worker_index}, --save-dir "
                    f"{self.save_dir}): only the chief (worker 0) writes checkpoints, into its "
                    f"--save-dir; give every worker the same --save-dir on a shared "
                    f"filesystem, or copy the chief's newest checkpoint_*.npz into each "
                    f"worker's --save-dir before resuming")

    def _resume_newest(self, state: RunState) -> None:
        existing = checkpoints.list_checkpoints(self.save_dir)
        for path in reversed(existing):
            try:
                self.restore(path, state)
            except CheckpointError as error:
                self._set_aside(path, error)
                continue
            except FileNotFoundError:
                if path.exists():
                    raise
                # Listed, then gone before it was opened: workers sharing the save dir list it
                # at once, and the chief sets a damaged one aside. `resume` still checks that
                # every worker ends at the same step.
                self.log(f"skipped {path}: it was set aside or removed meanwhile (by the chief?), "
                         f"trying the one before")
                continue
            self.log(f"resumed from {path} at step {state.step}")
            self.resumed_from = path
            return
        if existing:
            self.log(f"no checkpoint of {self.save_dir} loads: starting from step 0")

    def _start_over_refusal(self) -> str | None:
        """Why a run that resumed nothing must not start over here: the save dir's best
        checkpoint loads, and this run's first validation would replace it with a worse model.
        None when there is none (a damaged one is said, then replaced by this run's best)."""
        best = self.save_dir / checkpoints.BEST_NAME
        if not best.is_file():
            return None
        try:
            kept = checkpoints.load(best)
        except (CheckpointError, OSError) as error:
            self.log(f"warning: {best} does not load ({error}): this run's best replaces it")
            return None
        score = kept.meta.get("best_score")
        loss = kept.meta.get("best_valid")
        said = (f", validation {score:.2f}" if isinstance(score, (int, float)) else
                f", validation loss {loss:.3f}" if isinstance(loss, (int, float)) else "")
        return (f"no numbered checkpoint of {self.save_dir} loads, but its {best.name} (step "
                f"{kept.meta.get('step')}{said}) does: starting over from step 0 would replace "
                f"it with a worse model; train in another --save-dir (copy {best.name} out "
                f"first to keep it; --finetune-from {best} there trains on from its weights, with a "
                f"fresh optimizer and schedule), or move {best.name} out of {self.save_dir} to "
                f"start over here")

    def _set_aside(self, path: Path, error: CheckpointError) -> None:
        if not self.topology.is_chief:  # the chief renames it (workers may share the save dir)
            self.log(f"skipped {path}: {error}")
            return
        target = checkpoints.set_aside(path)
        self.log(f"skipped {path}, renamed to {target.name} (kept, not resumed from again): "
                 f"{error}")


def effective_batch_warning(path, saved_replicas: int | None, saved_update_freq: int,
                            replicas: int, update_freq: int) -> str | None:
    """A warning when a checkpoint's run made its updates of another number of batches than
    this run (replicas x --update-freq; each batch up to --max-tokens): the effective batch, for
    which the learning rate and Adam's averages were chosen, changes. None when the numbers
    agree, or for a checkpoint that does not record its replicas (written before it was kept)."""
    if not isinstance(saved_replicas, int):
        return None
    before, now = saved_replicas * saved_update_freq, replicas * update_freq
    if before == now:
        return None
    how = f"{max(before, now) / min(before, now):.3g}x {'smaller' if now < before else 'larger'}"
    keep = (f"set --update-freq {before // replicas} to keep it" if before % replicas == 0
            else f"no --update-freq keeps it on {_count(replicas, 'replica')}")
    return (f"warning: {path} was trained with {_count(saved_replicas, 'replica')} x "
            f"--update-freq {saved_update_freq} = {before} batches an update; this run has "
            f"{replicas} x {update_freq} = {now}: the effective batch is {how}; {keep}")


def smoothing_warning(saved: dict, config: TrainConfig, best_valid: float,
                      best_step: int | None) -> str | None:
    """A warning when a run that keeps checkpoint_best by validation loss resumes with another
    --label-smoothing than its checkpoint's run: that loss is label-smoothed, so the best one
    so far, which each validation (and --patience) is judged against, was computed with the
    other smoothing, and a lower or higher one makes a new best of a worse model, or none of a
    better. None when nothing is compared: another metric, or no validation yet."""
    before = saved.get("label_smoothing")
    if (before is None or before == config.label_smoothing
            or config.best_checkpoint_metric != "loss" or not math.isfinite(best_valid)):
        return None
    judged = ("checkpoint_best and --patience judge" if config.patience
              else "checkpoint_best judges")
    return (f"warning: resumed with --label-smoothing {config.label_smoothing:g} (the "
            f"checkpoint's run: {before:g}): the validation loss is label-smoothed, so the best "
            f"so far ({best_valid:.3f} at step {best_step}), by which {judged} each validation, "
            f"was computed with the other smoothing (the nll does not depend on it); keep "
            f"--label-smoothing {before:g} or use another --save-dir")


def schedule_warning(saved: dict, config: TrainConfig, d_model: int, step: int) -> str | None:
    """A warning when a run resumes with another --warmup-steps or --lr-scale than its
    checkpoint's run: the learning-rate schedule (`paper_learning_rate`) changes at once, at
    the next update (number `step` + 1), from the checkpoint's rate to this run's. None when
    the flags agree, when both schedules give the same rates from there on (another warmup
    once both warmups are over), or for a checkpoint that does not record them."""
    flags = (("warmup_steps", "--warmup-steps"), ("lr_scale", "--lr-scale"))
    changed = [(key, flag) for key, flag in flags
               if key in saved and saved[key] != getattr(config, key)]
    if not changed:
        return None
    before = {key: saved.get(key, getattr(config, key)) for key, _ in flags}
    rates = [float(paper_learning_rate(step + 1, d_model, schedule["warmup_steps"],
                                       schedule["lr_scale"]))
             for schedule in (before, {key: getattr(config, key) for key, _ in flags})]
    if rates[0] == rates[1]:  # both warmups over: the schedules agree from here on
        return None
    how = f"{max(rates) / min(rates):.3g}x {'higher' if rates[1] > rates[0] else 'lower'}"
    return ("warning: resumed with "
            + " and ".join(f"{flag} {getattr(config, key):g} (the checkpoint's run: "
                           f"{saved[key]:g})" for key, flag in changed)
            + f": the learning rate of the next update (step {step + 1}) is {rates[1]:.3g}, "
            f"{how} than the checkpoint's schedule's {rates[0]:.3g}; keep "
            + " ".join(f"{flag} {saved[key]:g}" for key, flag in changed)
            + " to go on with it")


def precision_warning(saved: dict, requested: str, precision: str) -> str | None:
    """A warning when a run resumes in another precision than its checkpoint's run trained in:
    float32 and mixed_bfloat16, whose optimizer states agree, so that `restore` loads one into
    the other (mixed_float16's loss scale makes it refuse the others). The weights and Adam's
    moments are float32 in both and load as saved; what changes is every update from here on,
    whose layers compute (forward and backward) in the other type. `precision` is what this run
    trains in, `requested` its --precision: `auto` keeps the checkpoint's precision only where
    it would time bfloat16, and elsewhere chooses by the hardware (a GPU, AMX) as for a new
    run. None when the precisions agree, or for a checkpoint that does not record its own."""
    before = saved.get("precision")
    if before in (None, AUTO) or before == precision:
        return None
    given = (f"--precision auto, which chose {precision} here" if requested == AUTO
             else f"--precision {precision}")
    computes = {name: name.removeprefix("mixed_") for name in (before, precision)}
    return (f"warning: resumed with {given} (the checkpoint's run: {before}): the weights and "
            f"Adam's state load as saved (float32 in both), but from the next update on the "
            f"layers compute in {computes[precision]} instead of {computes[before]}, so the run "
            f"does not go on as its checkpoint's would; --precision {before} trains on as the "
            f"checkpoint's run did")


def _said(value) -> str:
    """A flag's value in a warning: "none" for None (a flag not given)."""
    return "none" if value is None else str(value)


def _count(number: int, noun: str) -> str:
    """`1 worker`, `2 workers`."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
