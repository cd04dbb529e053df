"""What a training run leaves in its save dir, driven by a fake clock: the time budget, the save
cadence, --keep-last, checkpoint_best, history and TensorBoard events."""

import dataclasses
import json
import os
import shutil
import signal
import threading

import numpy as np
import pytest

from tests.conftest import as_traced_update, ended_pid
from tests.training.synthetic import epoch_maker, make_pairs
from vtx import atomic
from vtx import config
from vtx import checkpoints
from vtx import stop
from vtx.training.schedule import paper_learning_rate
from vtx.training.checkpointing import (effective_batch_warning, precision_warning,
                                        schedule_warning, smoothing_warning)
from vtx.training.trainer import Trainer

PAIRS = make_pairs(16, 20)


class StepClock:
    """A clock that moves `seconds_per_update` with every training update and nowhere else: when
    the host waits for the update's sums (on a GPU the launch returns at once)."""

    def __init__(self, seconds_per_update: float):
        self.now, self.seconds_per_update = 1000.0, seconds_per_update

    def __call__(self) -> float:
        return self.now

    def attach(self, trainer: Trainer) -> Trainer:
        read = trainer.engine.read_update

        def timed_read(totals):
            self.now += self.seconds_per_update
            return read(totals)

        trainer.engine.read_update = timed_read
        return trainer


def make_trainer(save_dir, lines=None, seconds_per_update=1.0, tensorboard_dir=None,
                 launch_ahead=True, num_layers=None, dropout=0.0, **options) -> Trainer:
    train_config = config.TrainConfig(**{"max_steps": 6, "save_interval_minutes": 0,
                                         "validate_interval_steps": 0, "log_interval_steps": 1,
                                         "warmup_steps": 10, **options})
    clock = StepClock(seconds_per_update)
    model = config.preset("tiny", vocab_size=20, dropout=dropout, num_layers=num_layers)
    trainer = Trainer(model, train_config, save_dir,
                      log=(lines.append if lines is not None else lambda line: None), clock=clock,
                      tensorboard_dir=tensorboard_dir, launch_ahead=launch_ahead)
    return clock.attach(trainer)


def saved_steps(save_dir) -> list[int]:
    return [checkpoints.load(p).meta["step"] for p in checkpoints.list_checkpoints(save_dir)]


def test_time_budget_stops_at_the_update_that_uses_it_up_and_saves_it(tmp_path):
    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=100, max_minutes=3 / 60)  # 1 s per update
    assert trainer.fit(epoch_maker(PAIRS, 4)) is None
    assert trainer.state.step == 3 and saved_steps(tmp_path) == [3]
    assert any("time budget of 0.05 minutes used up at step 3" in line for line in lines)
    etas = [line.split("eta ")[1].split()[0] for line in lines if "eta " in line]
    assert etas == ["0:00:02", "0:00:01", "0:00:00"]  # the budget bounds the ETA, not max_steps


def test_a_run_resumed_at_its_step_limit_says_that_there_is_nothing_to_train(tmp_path):
    make_trainer(tmp_path, max_steps=2).fit(epoch_maker(PAIRS, 4))
    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=2)
    assert trainer.fit(epoch_maker(PAIRS, 4)) is None and trainer.state.step == 2
    assert ("nothing to train: step 2 is already at the step limit 2 (--max-steps; raise it to "
            "go on)") in lines
    assert saved_steps(tmp_path) == [2]


def test_a_full_disk_at_a_checkpoint_ends_the_run_keeping_the_one_before(tmp_path, monkeypatch):
    import errno

    from vtx.errors import TrainingError
    from vtx.training.directory import LOCK_FILE

    save = np.savez

    def savez_onto_a_full_disk(handle, **arrays):  # as the disk fills up in the middle
        handle.write(b"PK\x03\x04 part of the archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    trainer = make_trainer(tmp_path, max_steps=4, save_interval_steps=2)
    stream = epoch_maker(PAIRS, 4)
    save_at = trainer.checkpointer.save

    def save_onto_a_full_disk_at_step_4(state, stream, numbered=True):
        if state.step == 4:
            monkeypatch.setattr(np, "savez", savez_onto_a_full_disk)
        return save_at(state, stream, numbered)

    trainer.checkpointer.save = save_onto_a_full_disk_at_step_4
    with pytest.raises(TrainingError) as stopped:
        trainer.fit(stream)
    assert str(stopped.value) == (
        f"the disk of {tmp_path} has no room (full, or over a quota): step 4's checkpoint "
        f"could not be written ([Errno 28] "
        f"No space left on device, writing: '{tmp_path / 'checkpoint_00000004.npz'}'); the "
        f"newest kept is checkpoint_00000002.npz: free space there (--keep-last keeps fewer "
        f"checkpoints) and run again, which resumes from the newest")
    monkeypatch.setattr(np, "savez", save)
    # no part of the checkpoint left (the save dir's lock file is not one)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and
                p.name != LOCK_FILE]
    assert saved_steps(tmp_path) == [2]


def test_the_last_step_is_validated_when_the_time_budget_or_max_steps_ends_the_run(tmp_path):
    """Between two validation intervals the best checkpoint is chosen among all the updates."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    for name, options in (("budget", {"max_steps": 100, "max_minutes": 3 / 60}),
                          ("steps", {"max_steps": 3})):
        trainer = make_trainer(tmp_path / name, validate_interval_steps=100, **options)
        assert trainer.fit(epoch_maker(PAIRS, 4), lambda: valid) is None
        history = [json.loads(line) for line in
                   (tmp_path / name / "history.jsonl").read_text().splitlines()]
        assert [r["step"] for r in history if "valid_loss" in r] == [3]
        assert checkpoints.load(tmp_path / name / checkpoints.BEST_NAME).meta["step"] == 3


def test_tokens_per_second_leave_out_validation_time(tmp_path):
    """tok/s measures training: a run that validates for 30 s every 2 updates logs the same
    rates as one that does not validate."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    rates = {}
    for name, interval in (("validating", 2), ("not", 0)):
        trainer = make_trainer(tmp_path / name, max_steps=6, log_interval_steps=2,
                               validate_interval_steps=interval)
        evaluate, clock = trainer.engine.evaluate, trainer.loop.clock

        def slow_evaluate(batches, evaluate=evaluate, clock=clock):
            clock.now += 30.0
            return evaluate(batches)

        trainer.engine.evaluate = slow_evaluate
        trainer.fit(epoch_maker(PAIRS, 4), lambda: valid)
        history = [json.loads(line) for line in
                   (tmp_path / name / "history.jsonl").read_text().splitlines()]
        rates[name] = [r["tokens_per_second"] for r in history if "tokens_per_second" in r]
    assert len(rates["not"]) == 3 and rates["validating"] == pytest.approx(rates["not"])


def test_save_interval_minutes_saves_on_the_clock(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=7, save_interval_minutes=2 / 60)
    trainer.fit(epoch_maker(PAIRS, 4))
    assert saved_steps(tmp_path) == [2, 4, 6, 7]


def test_keep_last_keeps_only_the_newest_checkpoints(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=5, save_interval_steps=1, keep_last=2)
    trainer.fit(epoch_maker(PAIRS, 4))
    assert saved_steps(tmp_path) == [4, 5]
    assert sorted(p.name for p in tmp_path.glob("checkpoint_*")) == [
        "checkpoint_00000004.npz", "checkpoint_00000005.npz"]


def test_a_stop_signal_during_a_validation_saves_that_step_and_stops(tmp_path):
    """SIGTERM while validating (decoding for BLEU can take minutes, longer than a scheduler's
    grace period): the run saves the validated step and exits, without another update."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    validations = []

    def make_valid():
        validations.append(trainer.state.step)
        if len(validations) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # to fit's handler, as a scheduler sends it
        return valid

    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=100, validate_interval_steps=2)
    assert trainer.fit(epoch_maker(PAIRS, 4), make_valid) == signal.SIGTERM
    assert validations == [2, 4] and trainer.state.step == 4
    assert "stopping at step 4, saved: received signal 15 (SIGTERM)" in lines
    assert checkpoints.load(checkpoints.list_checkpoints(tmp_path)[-1]).meta["step"] == 4


def test_a_stop_signal_swallowed_before_the_run_stops_it_at_its_first_update_saved(tmp_path):
    """A SIGTERM during `vtx train`'s start whose exception a library swallowed (`vtx.stop`): the
    run stops as for one received in the loop, its update saved. Before, it trained on, and the
    first checkpoint's write raised the signal's exit again: the updates since start lost."""
    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=100, save_interval_steps=3)
    stop.note(signal.SIGTERM)  # as the command line's handler does, before its exception
    try:
        assert trainer.fit(epoch_maker(PAIRS, 4)) == signal.SIGTERM
    finally:
        stop.claim()  # left to no later test
    assert trainer.state.step == 1
    assert "stopping at step 1, saved: received signal 15 (SIGTERM)" in lines
    assert checkpoints.load(checkpoints.list_checkpoints(tmp_path)[-1]).meta["step"] == 1


@pytest.mark.parametrize("compile_workers", [1, 2])
def test_a_stop_signal_while_compiling_stops_before_any_update_and_writes_nothing(
        tmp_path, compile_workers):
    """SIGTERM while the batch shapes compile (minutes on a GPU): the run stops when the shapes
    under way are done, without compiling the rest, and without an update or a checkpoint:
    nothing was trained."""
    lines = []

    def log(line):
        lines.append(line)
        if line.startswith("compiled the update for batch shape 1/"):
            os.kill(os.getpid(), signal.SIGTERM)  # to fit's handler, as a scheduler sends it

    trainer = make_trainer(tmp_path, lines, jit_compile=True, compile_workers=compile_workers,
                           num_layers=1)  # XLA compiles one layer in half the time
    trainer.compiler.log = trainer.loop.log = log
    shapes = [(4, 8, 9), (4, 12, 12), (4, 16, 16), (4, 20, 20), (4, 24, 24)]
    assert trainer.fit(epoch_maker(PAIRS, 4, lengths=[(8, 9)]), shapes=shapes) == signal.SIGTERM
    assert trainer.state.step == 0 and int(trainer.engine.optimizer.iterations.numpy()) == 0
    assert not list(tmp_path.glob("checkpoint_*"))
    assert ("stopped before the first update (received signal 15 (SIGTERM)): nothing trained "
            "since step 0, no checkpoint to write") in lines
    total = next(line for line in lines if line.startswith("compiled ") and " shapes in " in line)
    if compile_workers == 1:
        assert total.startswith("compiled 1 batch shapes") and total.endswith(
            "stopped by signal 15, 4 of 5 left")
    else:  # the shapes under way end (two at a time), the one not started by then is left
        assert " at a time): stopped by signal 15, " in total and total.endswith(" of 5 left")


def test_a_compile_pass_failing_other_than_out_of_memory_starts_no_queued_shape(tmp_path):
    """Several shapes compile at once: one whose pass fails (not out of memory, which is retried
    alone) raises its error once the passes under way are done, without starting the queued
    ones (minutes each on a GPU). The shape beside the failing one ends only after the failure
    is flagged, so that its thread would take the next shape if nothing stopped it."""
    trainer = make_trainer(tmp_path, jit_compile=True, compile_workers=2)
    shapes = [(4, 8, 9), (4, 12, 12), (4, 16, 16), (4, 20, 20), (4, 24, 24)]
    started, beside = [], threading.Event()

    def compile_pass(shape, packed, alone=True):
        started.append(shape)
        if shape == shapes[0]:
            assert beside.wait(300)  # both threads busy
            raise ValueError("no program for this shape")
        beside.set()
        assert trainer.compiler.compile_failed.wait(300)
        return 0.0

    trainer.compiler._compile_pass = compile_pass
    with pytest.raises(ValueError, match="no program for this shape"):
        trainer.fit(epoch_maker(PAIRS, 4), shapes=shapes)
    assert sorted(started) == shapes[:2] and trainer.state.step == 0


@pytest.mark.parametrize("compile_workers", [1, 2])
@pytest.mark.parametrize("error", [
    "ResourceExhaustedError: OOM when allocating a tensor",
    # CUDA's allocator failing as a compiled kernel loads (tensorflow#60607) comes as another kind
    "InternalError: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
])
def test_out_of_memory_while_compiling_says_what_to_lower(tmp_path, compile_workers, error):
    """With XLA the first thing a run does on the device is the compile passes, so a
    --max-tokens too large for it fails there: the same clear error as in training (beside
    other passes, once run again alone), not TensorFlow's, and nothing written."""
    from vtx.errors import TrainingError

    trainer = make_trainer(tmp_path, jit_compile=True, compile_workers=compile_workers,
                           max_tokens=64)
    started = []

    def out_of_memory(*args):  # the device's allocator refusing the update
        started.append(1)
        raise tf_error(error)

    trainer.engine._update = as_traced_update(out_of_memory)
    with pytest.raises(TrainingError, match=r"^out of memory on a batch of source \(4, \d+\) "
                                            r"target \(4, \d+\); lower --max-tokens \(now 64\)"):
        trainer.fit(epoch_maker(PAIRS, 4), shapes=[(4, 8, 9), (4, 12, 12), (4, 16, 16)])
    assert trainer.state.step == 0 and not list(tmp_path.glob("checkpoint_*"))
    assert len(started) > (compile_workers > 1)  # beside others, then alone


def tf_error(text: str):
    """TensorFlow's error of the kind and message in 'Kind: message'."""
    import tensorflow as tf

    kind, _, message = text.partition(": ")
    return getattr(tf.errors, kind)(None, None, message)


@pytest.mark.parametrize("compile_workers", [1, 2])
@pytest.mark.parametrize("error, says", [
    ("PermissionDeniedError: /shared/cache/xla_1234.pb; Permission denied",
     "; if the XLA cache /shared/cache was written by another machine or TensorFlow, or is "
     "damaged, remove it (or give another --xla-cache-dir); --no-jit trains without XLA"),
    ("InternalError: libdevice not found at ./libdevice.10.bc",
     "; if the XLA cache /shared/cache was written by another machine"),
    # TensorFlow reports a full disk as ResourceExhaustedError: not the device's memory
    ("ResourceExhaustedError: /shared/cache/xla_1234.pb; No space left on device",
     ": the disk is full; free space under the XLA cache /shared/cache, or point "
     "--xla-cache-dir elsewhere"),
])
def test_a_compile_pass_failing_names_the_shape_and_what_to_try(tmp_path, monkeypatch,
                                                                compile_workers, error, says):
    """XLA failing on a shape (the persistent cache unwritable, from another machine, or on a
    full disk; a broken CUDA install) ends the run before any update with the shape, TensorFlow's
    first line and what to try, instead of TensorFlow's traceback."""
    from vtx.errors import TrainingError

    from pathlib import Path

    from vtx import compile_cache

    # As `enable` would have named it (TF_XLA_FLAGS itself is read once by TensorFlow: not set
    # here, where later tests of the same process compile).
    monkeypatch.setattr(compile_cache, "current_directory", lambda: Path("/shared/cache"))
    trainer = make_trainer(tmp_path, jit_compile=True, compile_workers=compile_workers)

    def failing(*args):
        raise tf_error(error)

    trainer.engine._update = as_traced_update(failing)
    with pytest.raises(TrainingError) as raised:
        trainer.fit(epoch_maker(PAIRS, 4), shapes=[(4, 8, 9), (4, 12, 12)])
    kind, _, message = error.partition(": ")
    assert str(raised.value).startswith(f"compiling the update for batch shape 4x8x9 failed "
                                        f"({kind}: {message})") or str(raised.value).startswith(
        f"compiling the update for batch shape 4x12 failed ({kind}: {message})")
    assert says in str(raised.value) and "out of memory" not in str(raised.value)
    assert trainer.state.step == 0 and not list(tmp_path.glob("checkpoint_*"))


def test_another_worker_gone_while_compiling_is_said_as_such_not_as_xla_failing(tmp_path):
    """With several workers each compile pass ends in collectives: a worker gone (out of memory
    there, killed) fails them here, which is not this shape's XLA failing (no cache to remove,
    no --no-jit to try). The topology says two workers; the stand-in update fails as their
    collective does."""
    from vtx.errors import TrainingError

    trainer = make_trainer(tmp_path, jit_compile=True, compile_workers=1)
    trainer.compiler.topology = trainer.loop.topology = dataclasses.replace(
        trainer.loop.topology, num_workers=2)

    def gone(*args):
        raise tf_error("UnavailableError: Collective ops is aborted by: Error reported from "
                       "/job:worker/task:1: The following tasks are unhealthy (stopped sending "
                       "heartbeats):\n/job:worker/replica:0/task:1")

    trainer.engine._update = as_traced_update(gone)
    with pytest.raises(TrainingError, match=r"^another worker of this run stopped or cannot be "
                                            r"reached \(UnavailableError: Collective ops is "
                                            r"aborted by: .* /job:worker/replica:0/task:1\); "):
        trainer.fit(epoch_maker(PAIRS, 4), shapes=[(4, 8, 9), (4, 12, 12)])


def test_resuming_mid_epoch_with_another_seed_or_max_tokens_is_warned(tmp_path):
    """The data position counts batches: with another --seed (shuffle) or --max-tokens (cut of
    bucketed batches) it names other ones until the epoch ends, which the resumed run says."""
    make_trainer(tmp_path, max_steps=2, max_tokens=4096).fit(epoch_maker(PAIRS, 4))  # 2 of 4

    def resumed_warnings(**options):
        lines = []
        make_trainer(tmp_path, lines, max_steps=2, **{"max_tokens": 4096, **options}).resume()
        assert any(line.startswith("resumed from") for line in lines)
        return [line for line in lines if line.startswith("warning: resumed with")]

    assert resumed_warnings() == []
    assert resumed_warnings(seed=7, max_tokens=2048) == [
        "warning: resumed with --seed 7 (the checkpoint's run: 1) and --max-tokens 2048 (the "
        "checkpoint's run: 4096): the data position (epoch 0, batch 2) now counts the batches "
        "of another order, so until epoch 0 ends some pairs come again and others not at all; "
        "the checkpoint's values resume exactly"]
    # Other pieces sampled: a run without subword sampling resumed with it.
    assert resumed_warnings(subword_alpha=0.1) == [
        "warning: resumed with --subword-alpha 0.1 (the checkpoint's run: none): the data "
        "position (epoch 0, batch 2) now counts the batches of another order, so until epoch 0 "
        "ends some pairs come again and others not at all; the checkpoint's values resume "
        "exactly"]
    # Packed rows keep the checkpoint's shapes whatever --max-tokens says; --seed still counts.
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    packed = checkpoints.load(path)
    packed.meta["packed_shapes"] = [[4, 8, 9]]
    checkpoints.save(path, packed)
    assert resumed_warnings(max_tokens=2048) == []
    assert len(resumed_warnings(seed=7)) == 1


def test_resuming_on_other_training_pairs_is_warned(tmp_path):
    """A data directory rebuilt from other text under the same vocabulary loads: the data
    position then counts another directory's batches, and it may be the wrong directory. The
    checkpoint keeps what identifies its pairs (`DataDirectory.training_data`); a resumed run on
    other pairs says so, on the same says nothing."""
    first = {"pairs": 16, "target_tokens": 200, "lengths_sha256": "a" * 64}

    def resumed_warnings(data):
        lines = []
        trainer = make_trainer(tmp_path, lines, max_steps=2)
        trainer.state.training_data = data
        trainer.resume()
        assert any(line.startswith("resumed from") for line in lines)
        return [line for line in lines if line.startswith("warning: resumed")]

    trainer = make_trainer(tmp_path, max_steps=2)
    trainer.state.training_data = first
    trainer.fit(epoch_maker(PAIRS, 4))  # batch 2 of 4 of epoch 0
    assert checkpoints.load(checkpoints.list_checkpoints(tmp_path)[-1]).meta[
        "training_data"] == first
    assert resumed_warnings(dict(first)) == []
    assert resumed_warnings(None) == []  # unknown (a caller that does not say)
    assert resumed_warnings({**first, "pairs": 1600, "target_tokens": 20000}) == [
        "warning: resumed with other training pairs (1,600 pairs, 20,000 target tokens; the "
        "checkpoint's run: 16 and 200): the data position (epoch 0, batch 2) now counts the "
        "batches of another order, so until epoch 0 ends some pairs come again and others not "
        "at all; the checkpoint's values resume exactly"]
    assert resumed_warnings({**first, "lengths_sha256": "b" * 64}) == [
        "warning: resumed with other training pairs (16 pairs, 200 target tokens; the same "
        "counts, other lengths or another order): the data position (epoch 0, batch 2) now "
        "counts the batches of another order, so until epoch 0 ends some pairs come again and "
        "others not at all; the checkpoint's values resume exactly"]


def test_checkpoint_best_holds_the_step_of_the_lowest_validation_loss(tmp_path):
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    # A learning rate too high for the task: the validation loss goes down, then up again.
    trainer = make_trainer(tmp_path, max_steps=8, save_interval_steps=1, validate_interval_steps=1,
                           lr_scale=20.0, warmup_steps=4)
    trainer.fit(epoch_maker(PAIRS, 4), lambda: valid)
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["valid_loss"] for r in history if "valid_loss" in r}
    best_step = min(losses, key=lambda step: (losses[step], step))
    best = checkpoints.load(tmp_path / checkpoints.BEST_NAME)
    assert best.meta["step"] == best_step and best.meta["best_valid"] == losses[best_step]
    numbered = checkpoints.load(checkpoints.checkpoint_path(tmp_path, best_step))
    for a, b in zip(best.model, numbered.model):
        np.testing.assert_array_equal(a, b)
    assert trainer.engine.evaluate(valid)[0] == pytest.approx(losses[8], rel=1e-5)


def test_tensorboard_event_files_hold_the_logged_scalars(tmp_path):
    import tensorflow as tf

    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    trainer = make_trainer(tmp_path / "run", max_steps=2, validate_interval_steps=2,
                           tensorboard_dir=str(tmp_path / "tb"))
    trainer.fit(epoch_maker(PAIRS, 4), lambda: valid)
    (events,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    scalars = {}
    for event in tf.compat.v1.train.summary_iterator(str(events)):
        for value in event.summary.value:
            scalars[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert {(key, r["step"]) for r in history for key in r if key != "step"} == set(scalars)
    for record in history:
        for key, value in record.items():
            if key != "step":
                assert scalars[(key, record["step"])] == pytest.approx(value, rel=1e-6)


def test_updates_launched_ahead_train_the_same_model_and_never_overlap_a_save_or_validation(
        tmp_path):
    """The next update is launched before the last one is read, except where the host saves,
    validates or stops after it: same checkpoints, same history as reading every update first."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    runs = {}
    for ahead in (False, True):
        events = []
        trainer = make_trainer(tmp_path / str(ahead), max_steps=11, save_interval_steps=4,
                               validate_interval_steps=3, launch_ahead=ahead)
        start, read = trainer.engine.start_update, trainer.engine.read_update
        trainer.engine.start_update = lambda stream: events.append("start") or start(stream)
        trainer.engine.read_update = lambda totals: events.append("read") or read(totals)
        trainer.fit(epoch_maker(PAIRS, 4), lambda: valid)
        runs[ahead] = events
    # Each update is launched before the one before is read, except after steps 3, 6, 9
    # (validation) and 4, 8 (save), where the host acts with nothing in flight.
    assert [step for step in range(1, 11)
            if _launches_before_read(runs[True], step)] == [1, 2, 5, 7, 10]
    assert runs[False] == ["start", "read"] * 11
    saved = saved_steps(tmp_path / "True")  # every 4 steps, the last, and each best validation
    assert saved == saved_steps(tmp_path / "False") and {4, 8, 11} <= set(saved)
    for path in checkpoints.list_checkpoints(tmp_path / "True"):
        other = checkpoints.load(tmp_path / "False" / path.name)
        for a, b in zip(checkpoints.load(path).model, other.model):
            np.testing.assert_allclose(a, b, atol=1e-6)  # the same updates in the same order
    histories = [[{k: v for k, v in json.loads(line).items() if "per_second" not in k}
                  for line in (tmp_path / str(ahead) / "history.jsonl").read_text().splitlines()]
                 for ahead in (True, False)]
    assert [sorted(r) for r in histories[0]] == [sorted(r) for r in histories[1]]
    for ours, theirs in zip(*histories):
        assert ours == pytest.approx(theirs, rel=1e-6)


def _launches_before_read(events: list[str], step: int) -> bool:
    """Whether update `step + 1` was launched before update `step` was read."""
    starts = [i for i, event in enumerate(events) if event == "start"]
    reads = [i for i, event in enumerate(events) if event == "read"]
    return starts[step] < reads[step - 1]


@pytest.mark.parametrize("update_freq,jit", [(1, False), (2, False), (1, True)])
@pytest.mark.slow
def test_a_run_resumed_at_any_step_ends_on_exactly_the_weights_of_the_straight_run(
        tmp_path, update_freq, jit):
    """Batches of every shape (here each padded to its own longest pair) run through one traced
    program, whichever shape a process meets first: a run resumed after step 1 or 2 ends bit for
    bit where the run it continues ends, its weights' EMA too. It was up to ~1e-6 away:
    TensorFlow traced the first shape of a process alone and later ones together, and the two
    programs sum in other orders; with XLA too (compiled per shape from either program)."""
    make_epoch = epoch_maker(make_pairs(48, 20, seed=4), 2)
    # With XLA each run compiles a program for each shape it meets (here 3 in 5 steps; ~20-30 s
    # each at 2 layers on a 2-core AMD EPYC Zen 3): 3 steps (6 programs instead of 8), and one
    # layer, which XLA compiles in about half the time; what is checked does not depend on them.
    last = 3 if jit else 5
    options = dict(max_steps=last, save_interval_steps=1, keep_last=0, dropout=0.1,
                   update_freq=update_freq, jit_compile=jit, num_layers=1, ema_decay=0.9,
                   ema_start_step=1)
    make_trainer(tmp_path / "straight", **options).fit(make_epoch)
    # Each resumed run meets first a batch of another shape than the straight run's first.
    first = [make_epoch(0, step * update_freq)[0]["target_in"].shape for step in (0, 1, 2)]
    assert first[0] not in first[1:]
    final = checkpoints.load(checkpoints.checkpoint_path(tmp_path / "straight", last))
    for step in (1, 2):
        resumed = tmp_path / f"from_{step}"
        resumed.mkdir()
        shutil.copy(checkpoints.checkpoint_path(tmp_path / "straight", step), resumed)
        make_trainer(resumed, **options).fit(make_epoch)
        ours = checkpoints.load(checkpoints.checkpoint_path(resumed, last))
        # The weights and their EMA (`--ema-decay`), bit for bit.
        for mine, theirs in zip(ours.model + ours.ema, final.model + final.ema):
            np.testing.assert_array_equal(mine, theirs)


def logged_rates(save_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (save_dir / "history.jsonl").read_text().splitlines()]
    return {row["step"]: row["lr"] for row in rows if "lr" in row}


def test_cooldown_of_max_steps_falls_linearly_to_zero_and_resumes_exactly(tmp_path):
    """--cooldown 0.5 of 8 steps: updates 5-8 at 4/5 ... 1/5 of the paper's rate; a run killed in
    the cooldown resumes to the weights of the straight run."""
    make_epoch = epoch_maker(make_pairs(48, 20, seed=4), 2)
    options = dict(max_steps=8, cooldown=0.5, save_interval_steps=1, dropout=0.1, num_layers=1)
    lines = []
    make_trainer(tmp_path / "straight", lines, **options).fit(make_epoch)
    assert ("cooldown: the learning rate falls linearly to 0 over steps 5-8 (--cooldown 0.5 of "
            "--max-steps)") in lines
    rates = logged_rates(tmp_path / "straight")
    d_model = config.preset("tiny", vocab_size=20).d_model
    paper = [float(paper_learning_rate(step, d_model, 10)) for step in range(1, 9)]
    assert [rates[step] / paper[step - 1] for step in range(1, 9)] == pytest.approx(
        [1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2])
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(checkpoints.checkpoint_path(tmp_path / "straight", 6), resumed)
    lines = []
    make_trainer(resumed, lines, **options).fit(make_epoch)
    assert "resumed in the cooldown: the learning rate falls linearly to 0 by step 8, the last" in lines
    ours = checkpoints.load(checkpoints.checkpoint_path(resumed, 8))
    theirs = checkpoints.load(checkpoints.checkpoint_path(tmp_path / "straight", 8))
    for mine, straight in zip(ours.model, theirs.model):
        np.testing.assert_array_equal(mine, straight)


def test_the_update_in_the_cooldown_moves_the_weights_by_its_share_of_the_rate(tmp_path):
    """Adam's step is proportional to the rate: with --cooldown 0.5 of 2 steps, update 2 (at
    1/2 of its rate) moves every weight half as far as the same update without a cooldown."""
    make_epoch = epoch_maker(make_pairs(48, 20, seed=4), 2)
    weights = {}
    for cooldown in (0.0, 0.5):
        save_dir = tmp_path / str(cooldown)
        make_trainer(save_dir, max_steps=2, cooldown=cooldown, save_interval_steps=1).fit(
            make_epoch)
        weights[cooldown] = [checkpoints.load(checkpoints.checkpoint_path(save_dir, step)).model
                             for step in (1, 2)]
    for first, plain, cooled in zip(weights[0.0][0], weights[0.0][1], weights[0.5][1]):
        moved = plain - first
        np.testing.assert_allclose(cooled - first, 0.5 * moved, atol=1e-3 * np.abs(moved).max())


def test_cooldown_of_a_time_budget_ends_at_the_step_the_budget_runs_out_and_is_kept(tmp_path):
    """--max-minutes 0.2 (12 updates of 1 s) with --cooldown 0.25: the last 3 s, from step 9,
    fall to 0 by step 12, the run's last; resumed there, nothing is left to train."""
    lines = []
    options = dict(max_steps=100, max_minutes=0.2, cooldown=0.25)
    trainer = make_trainer(tmp_path, lines, **options)
    assert trainer.fit(epoch_maker(PAIRS, 4)) is None
    assert trainer.state.step == 12 and saved_steps(tmp_path) == [12]
    assert ("cooldown from step 9, 0.1 of 0.2 minutes in (--cooldown 0.25): the learning rate "
            "falls linearly to 0 by step 12, the last (1.00 s an update so far)") in lines
    assert checkpoints.load(checkpoints.checkpoint_path(tmp_path, 12)).meta["cooldown"] == [9, 12]
    rates = logged_rates(tmp_path)
    d_model = config.preset("tiny", vocab_size=20).d_model
    assert [rates[step] / float(paper_learning_rate(step, d_model, 10))
            for step in range(8, 13)] == pytest.approx([1, 1, 0.75, 0.5, 0.25])
    lines = []
    trainer = make_trainer(tmp_path, lines, **options)
    assert trainer.fit(epoch_maker(PAIRS, 4)) is None and trainer.state.step == 12
    assert ("nothing to train: step 12 ends the run's cooldown (its learning rate fell to 0 over "
            "steps 10-12; --cooldown 0 trains on at the paper's rate)") in lines


def test_a_checkpoint_write_left_by_a_killed_run_is_removed_when_resumed(tmp_path):
    """A kill during a checkpoint's write left its hidden temporary (full size) for good, beyond
    --keep-last. Those of processes still running (here: this one's parent) are left alone."""
    make_trainer(tmp_path, max_steps=2).fit(epoch_maker(PAIRS, 4))
    checkpoint = checkpoints.checkpoint_path(tmp_path, 4)
    stale = atomic.hidden_name(checkpoint, "tmp", pid=ended_pid())
    stale.write_bytes(b"x" * 2**20)
    running = atomic.hidden_name(checkpoint, "tmp", pid=os.getppid())
    running.write_bytes(b"y")
    lines = []
    make_trainer(tmp_path, lines, max_steps=3).fit(epoch_maker(PAIRS, 4))
    assert not stale.exists() and running.exists()
    assert f"removed {stale} (1.0 MiB): a write interrupted when an earlier run was killed" in lines


def test_history_rows_after_the_checkpoint_resumed_from_are_not_kept_twice(tmp_path):
    """Killed between checkpoints, a run had written rows for steps its resumed run trains and
    writes again: the curve went back in steps. Also a row cut short by the kill."""
    make_trainer(tmp_path, max_steps=4, save_interval_steps=2).fit(epoch_maker(PAIRS, 4))
    checkpoints.checkpoint_path(tmp_path, 4).unlink()  # killed after step 4's row, before its save
    history = tmp_path / "history.jsonl"
    history.write_text(history.read_text() + '{"step": 5, "train_lo')
    lines = []
    make_trainer(tmp_path, lines, max_steps=6, save_interval_steps=2).fit(epoch_maker(PAIRS, 4))
    steps = [json.loads(line)["step"] for line in history.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert ("history.jsonl: 3 rows after step 2 dropped (written after the checkpoint this run "
            "resumes from)") in lines


def test_resuming_with_a_precision_of_other_optimizer_state_names_the_flag(tmp_path):
    """mixed_float16's loss scaling has optimizer variables float32's lacks: the resume said
    only "variable shapes do not match this model" of an identical model."""
    from vtx.errors import TrainingError

    make_trainer(tmp_path, max_steps=1, precision="float32").fit(epoch_maker(PAIRS, 4))
    with pytest.raises(TrainingError, match=r"checkpoint_00000001.npz was trained with "
                                            r"--precision float32, this run has mixed_float16"):
        make_trainer(tmp_path, max_steps=2, precision="mixed_float16").resume()


def test_resuming_in_another_precision_warns_that_the_updates_compute_otherwise(tmp_path,
                                                                              monkeypatch):
    """float32 and mixed_bfloat16 keep the same float32 weights and optimizer state, so either
    resumes the other without a word, and the run went on in another arithmetic. `auto` keeps
    the checkpoint's precision where it would time bfloat16 (no warning), and chooses by the
    hardware elsewhere, as for a new run (warned where that differs)."""
    from vtx.training import precision as precision_module

    make_trainer(tmp_path, max_steps=1, precision="float32").fit(epoch_maker(PAIRS, 4))
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    saved = checkpoints.load(path)

    def warnings(**options):
        lines = []
        trainer = make_trainer(tmp_path, lines, max_steps=2, **options)
        trainer.resume()
        assert f"resumed from {path} at step 1" in lines
        for variables, arrays in ((trainer.model.variables, saved.model),
                                  (trainer.engine.optimizer.variables, saved.optimizer)):
            for variable, array in zip(variables, arrays, strict=True):  # loaded as saved
                assert variable.dtype == array.dtype
                np.testing.assert_array_equal(variable.numpy(), array)
        return [line for line in lines if line.startswith("warning: resumed with --precision")]

    assert warnings(precision="float32") == []
    assert warnings(precision="mixed_bfloat16") == [
        "warning: resumed with --precision mixed_bfloat16 (the checkpoint's run: float32): the "
        "weights and Adam's state load as saved (float32 in both), but from the next update on "
        "the layers compute in bfloat16 instead of float32, so the run does not go on as its "
        "checkpoint's would; --precision float32 trains on as the checkpoint's run did"]
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(precision_module, "gpu_compute_capabilities", lambda: [])
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: {"avx512_bf16"})  # no AMX: timed
    monkeypatch.setattr(precision_module, "matmul_speedup", lambda *shape: (2.0, 0.004, 0.002))
    assert warnings(precision="auto") == []  # kept float32, not timed
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    assert warnings(precision="auto") == [
        "warning: resumed with --precision auto, which chose mixed_bfloat16 here (the "
        "checkpoint's run: float32): the weights and Adam's state load as saved (float32 in "
        "both), but from the next update on the layers compute in bfloat16 instead of float32, "
        "so the run does not go on as its checkpoint's would; --precision float32 trains on as "
        "the checkpoint's run did"]


def test_the_precision_warning_is_only_where_the_precisions_differ():
    assert precision_warning({"precision": "float32"}, "auto", "float32") is None
    assert precision_warning({}, "mixed_bfloat16", "mixed_bfloat16") is None  # not recorded
    assert precision_warning({"precision": "auto"}, "float32", "float32") is None  # not known
    assert precision_warning({"precision": "mixed_bfloat16"}, "float32", "float32").startswith(
        "warning: resumed with --precision float32 (the checkpoint's run: mixed_bfloat16): ")
    assert "the layers compute in float32 instead of bfloat16" in precision_warning(
        {"precision": "mixed_bfloat16"}, "auto", "float32")


def test_resuming_with_another_number_of_workers_is_refused_naming_both_counts(tmp_path):
    """Each worker's data position is in the checkpoint: another worker count is refused, in
    words ("1 worker", "2 workers") and with what to do."""
    from vtx.errors import TrainingError

    make_trainer(tmp_path, max_steps=1).fit(epoch_maker(PAIRS, 4))
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    two = make_trainer(tmp_path, max_steps=2)
    checkpointer = two.checkpointer  # restore asks no peer
    checkpointer.topology = dataclasses.replace(checkpointer.topology, num_workers=2)
    with pytest.raises(TrainingError) as refused:
        checkpointer.restore(path, two.state)
    assert str(refused.value) == (
        f"{path} was written by 1 worker, this run has 2 workers: resume with 1 worker "
        f"(TF_CONFIG's cluster), or use another --save-dir")
    saved = checkpoints.load(path)
    saved.meta["num_workers"] = 2
    checkpoints.save(path, saved)
    with pytest.raises(TrainingError, match=r"was written by 2 workers, this run has 1 worker: "
                                            r"resume with 2 workers \(TF_CONFIG's cluster\)"):
        make_trainer(tmp_path, max_steps=2).resume()


def test_resuming_with_another_number_of_batches_an_update_is_warned(tmp_path):
    """Replicas x --update-freq batches make an update: the effective batch changes with either,
    which the resumed run says, naming the --update-freq that keeps it when there is one. A
    checkpoint without its replica count (written before it was kept) warns of nothing."""
    make_trainer(tmp_path, max_steps=1, update_freq=2).fit(epoch_maker(PAIRS, 4))
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    assert checkpoints.load(path).meta["num_replicas"] == 1

    def warnings(**options):
        lines = []
        make_trainer(tmp_path, lines, max_steps=2, **options).resume()
        assert f"resumed from {path} at step 1" in lines
        return [line for line in lines if "batches an update" in line]

    assert warnings(update_freq=2) == []
    assert warnings(update_freq=1) == [
        f"warning: {path} was trained with 1 replica x --update-freq 2 = 2 batches an update; "
        f"this run has 1 x 1 = 1: the effective batch is 2x smaller; set --update-freq 2 to "
        f"keep it"]
    saved = checkpoints.load(path)
    saved.meta["num_replicas"] = 3  # as if trained on three GPUs
    checkpoints.save(path, saved)
    assert warnings(update_freq=2) == [
        f"warning: {path} was trained with 3 replicas x --update-freq 2 = 6 batches an update; "
        f"this run has 1 x 2 = 2: the effective batch is 3x smaller; set --update-freq 6 to "
        f"keep it"]
    assert warnings(update_freq=8) == [
        f"warning: {path} was trained with 3 replicas x --update-freq 2 = 6 batches an update; "
        f"this run has 1 x 8 = 8: the effective batch is 1.33x larger; set --update-freq 6 "
        f"to keep it"]
    del saved.meta["num_replicas"]
    checkpoints.save(path, saved)
    assert warnings(update_freq=1) == []


def test_the_effective_batch_warning_says_when_no_update_freq_keeps_it():
    assert effective_batch_warning("c.npz", 3, 1, 2, 1) == (
        "warning: c.npz was trained with 3 replicas x --update-freq 1 = 3 batches an update; "
        "this run has 2 x 1 = 2: the effective batch is 1.5x smaller; no --update-freq keeps it "
        "on 2 replicas")
    assert effective_batch_warning("c.npz", 8, 1, 2, 1).endswith(
        "8 batches an update; this run has 2 x 1 = 2: the effective batch is 4x smaller; set "
        "--update-freq 4 to keep it")
    assert effective_batch_warning("c.npz", 2, 4, 8, 1) is None
    assert effective_batch_warning("c.npz", None, 4, 8, 1) is None


def test_resuming_with_another_label_smoothing_warns_that_the_best_loss_was_smoothed_otherwise(
        tmp_path):
    """checkpoint_best (by validation loss) and --patience judge each validation against the
    best loss so far, which is label-smoothed: measured with the checkpoint's smoothing, it is
    no yardstick for another one (a lower one made a worse model a new best at once)."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    trainer = make_trainer(tmp_path, max_steps=2, validate_interval_steps=1)
    trainer.fit(epoch_maker(PAIRS, 4), lambda: valid)
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    best, best_step = trainer.state.best_valid, trainer.state.best_step

    def warnings(**options):
        lines = []
        make_trainer(tmp_path, lines, max_steps=3, **options).resume()
        assert f"resumed from {path} at step 2" in lines
        return [line for line in lines if "--label-smoothing" in line]

    assert warnings() == []
    assert warnings(label_smoothing=0.0) == [
        f"warning: resumed with --label-smoothing 0 (the checkpoint's run: 0.1): the validation "
        f"loss is label-smoothed, so the best so far ({best:.3f} at step {best_step}), by which "
        f"checkpoint_best judges each validation, was computed with the other smoothing (the nll "
        f"does not depend on it); keep --label-smoothing 0.1 or use another --save-dir"]
    assert "by which checkpoint_best and --patience judge each validation" in warnings(
        label_smoothing=0.3, patience=2)[0]


def test_resuming_with_another_schedule_warns_of_the_learning_rate_it_jumps_to(tmp_path):
    """--warmup-steps and --lr-scale set the learning rate of every update: another value on
    resuming changes it at once (--warmup-steps 10 after 4000 multiplied it ~8000x early on)."""
    make_trainer(tmp_path, max_steps=2, warmup_steps=4000).fit(epoch_maker(PAIRS, 4))
    path = checkpoints.list_checkpoints(tmp_path)[-1]

    def warnings(**options):
        lines = []
        trainer = make_trainer(tmp_path, lines, max_steps=3, **options)
        trainer.resume()
        assert f"resumed from {path} at step 2" in lines
        return trainer, [line for line in lines if "learning rate" in line]

    assert warnings(warmup_steps=4000)[1] == []
    trainer, lines = warnings(warmup_steps=10)
    before = float(paper_learning_rate(3, trainer.engine.model_config.d_model, 4000))
    now = trainer.engine.learning_rate(3)
    assert lines == [
        f"warning: resumed with --warmup-steps 10 (the checkpoint's run: 4000): the learning "
        f"rate of the next update (step 3) is {now:.3g}, {now / before:.3g}x higher than the "
        f"checkpoint's schedule's {before:.3g}; keep --warmup-steps 4000 to go on with it"]
    assert round(now / before, -3) == 8000
    both = warnings(warmup_steps=10, lr_scale=2.0)[1][0]
    assert both.startswith("warning: resumed with --warmup-steps 10 (the checkpoint's run: 4000) "
                           "and --lr-scale 2 (the checkpoint's run: 1): ")
    assert both.endswith("keep --warmup-steps 4000 --lr-scale 1 to go on with it")


def test_the_schedule_warning_is_only_where_the_rates_differ():
    train = config.TrainConfig(warmup_steps=10, lr_scale=0.5)
    saved = {"warmup_steps": 4000, "lr_scale": 0.5}
    assert schedule_warning({"warmup_steps": 10, "lr_scale": 0.5}, train, 512, 100) is None
    assert schedule_warning({}, train, 512, 100) is None  # an old checkpoint: not known
    assert schedule_warning(saved, train, 512, 4000) is None  # both warmups over: same rates
    assert schedule_warning(saved, train, 512, 3998).startswith(
        "warning: resumed with --warmup-steps 10 (the checkpoint's run: 4000): the learning "
        "rate of the next update (step 3999) is ")
    assert "2x lower than the checkpoint's schedule's" in schedule_warning(
        {"warmup_steps": 10, "lr_scale": 1.0}, train, 512, 4000)


def test_the_smoothing_warning_is_only_where_a_smoothed_best_loss_is_compared():
    train = config.TrainConfig(label_smoothing=0.2)
    assert smoothing_warning({"label_smoothing": 0.2}, train, 1.5, 4) is None
    assert smoothing_warning({}, train, 1.5, 4) is None  # an old checkpoint: not known
    assert smoothing_warning({"label_smoothing": 0.1}, train, float("inf"), None) is None
    by_bleu = dataclasses.replace(train, best_checkpoint_metric="bleu")
    assert smoothing_warning({"label_smoothing": 0.1}, by_bleu, 1.5, 4) is None
    assert smoothing_warning({"label_smoothing": 0.1}, train, 1.5, 4).startswith(
        "warning: resumed with --label-smoothing 0.2 (the checkpoint's run: 0.1)")


HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from vtx.training.directory import lock_save_dir, say_holder
lock_save_dir(Path(sys.argv[1]))
say_holder(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_run_in_a_save_dir_in_use_is_refused_naming_the_first(tmp_path):
    """Two trainings in one save dir mixed their checkpoints and history (the second resumed
    from the first's newest, both wrote on). The run writing a save dir holds its lock: another
    is refused at once, before it resumes or writes anything, naming the process that holds it;
    the lock of a run killed by SIGKILL is gone with it."""
    import socket
    import subprocess
    import sys

    from vtx.errors import TrainingError
    from vtx.training.directory import LOCK_FILE

    make_trainer(tmp_path, max_steps=2).fit(epoch_maker(PAIRS, 4))
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        second = make_trainer(tmp_path, max_steps=4)
        with pytest.raises(TrainingError) as refused:
            second.fit(epoch_maker(PAIRS, 4))
        assert str(refused.value).startswith(
            f"{tmp_path} is being written by another `vtx train` (pid {holder.pid} on "
            f"{socket.gethostname()}, since ")
        assert str(refused.value).endswith(
            f"; {tmp_path / LOCK_FILE} is its lock): one run writes a save dir at a time, or "
            f"their checkpoints and history mix; wait for it to end, stop it, or use another "
            f"--save-dir")
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
        assert second.state.step == 0
    finally:
        holder.kill()
        holder.wait()
    resumed = make_trainer(tmp_path, max_steps=4)
    assert resumed.fit(epoch_maker(PAIRS, 4)) is None and resumed.state.step == 4
