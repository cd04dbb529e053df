import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_ROOT, as_traced_update
from tests.training.synthetic import epoch_maker, make_pairs, to_batch
from vtx import config
from vtx import checkpoints
from vtx.training.stream import BatchStream
from vtx.errors import TrainingError
from vtx.training.trainer import Trainer


def driver(save_dir, *args, env=None, wait=True):
    command = [sys.executable, "-m", "tests.training.driver", str(save_dir), *map(str, args)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
    return finished(process) if wait else process


def finished(process):
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    return output


def final_weights(save_dir, worker=0):
    with np.load(save_dir / f"final_weights_{worker}.npz") as data:
        return [data[k] for k in sorted(data.files)]


def first_loss(output):
    return float(next(l for l in output.splitlines() if l.startswith("loss-step-1:")).split()[1])


def test_tiny_learns_to_reverse_50_pairs(tmp_path):
    """Training works end to end: the loss of a learnable task falls far (on every CPU the loss is
    below a fifth of its start by step 150; at 200, the bound has a wide margin, no near-tie)."""
    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    train_config = config.TrainConfig(max_steps=200, warmup_steps=50, lr_scale=0.2,
                                      label_smoothing=0.0, log_interval_steps=50,
                                      validate_interval_steps=0, save_interval_minutes=0)
    trainer = Trainer(model_config, train_config, tmp_path, log=lambda line: None)
    trainer.fit(epoch_maker(make_pairs(50, 20), 10))
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    losses = [json.loads(l)["train_loss"] for l in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert len(losses) == 4 and losses[-1] < losses[0] / 5


@pytest.mark.slow
def test_one_and_eight_replicas_train_the_same_model(tmp_path):
    """With a cooldown too (update 3 at half its rate): every replica's Adam reads it."""
    # Side by side: each spends most of its time tracing in Python, on one core. One layer: how
    # the replicas' gradients are summed does not depend on the depth, and it traces faster.
    steps = ("--max-steps", 3, "--cooldown", 0.5, "--layers", 1)
    one = driver(tmp_path / "one", *steps, "--devices", 1, "--update-freq", 8, wait=False)
    eight = driver(tmp_path / "eight", *steps, "--devices", 8, "--update-freq", 1, wait=False)
    one, eight = finished(one), finished(eight)
    assert first_loss(one) == pytest.approx(first_loss(eight), abs=1e-5)
    for a, b in zip(final_weights(tmp_path / "one"), final_weights(tmp_path / "eight")):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.slow
def test_two_replicas_under_xla_train_the_model_they_train_without(tmp_path):
    """Under XLA each replica's Adam step is a program of its own, run on that replica's copy of
    the variables: after 3 updates the weights are those of the same updates without XLA, with
    a cooldown (update 3 at half its rate) read by each replica's program."""
    # One layer: the per-replica programs do not depend on the depth, and XLA compiles it faster.
    steps = ("--max-steps", 3, "--devices", 2, "--cooldown", 0.5, "--layers", 1)
    xla = driver(tmp_path / "xla", *steps, "--jit", wait=False)
    graph = driver(tmp_path / "graph", *steps, wait=False)
    xla, graph = finished(xla), finished(graph)
    assert first_loss(xla) == pytest.approx(first_loss(graph), abs=1e-5)
    for a, b in zip(final_weights(tmp_path / "xla"), final_weights(tmp_path / "graph")):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow
def test_packed_batches_on_two_replicas_train_as_two_micro_batches_on_one(tmp_path):
    steps = ("--max-steps", 3, "--pack", "--layers", 1)  # packing does not depend on the depth
    one = driver(tmp_path / "one", *steps, "--devices", 1, "--update-freq", 2, wait=False)
    two = driver(tmp_path / "two", *steps, "--devices", 2, "--update-freq", 1, wait=False)
    one, two = finished(one), finished(two)
    assert first_loss(one) == pytest.approx(first_loss(two), abs=1e-5)
    for a, b in zip(final_weights(tmp_path / "one"), final_weights(tmp_path / "two")):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.slow
def test_batches_read_ahead_onto_each_replicas_device_train_the_same_model(tmp_path):
    """`fit` reads batches ahead on a thread and places each on its replica's device (a GPU's
    update then waits for no copy), as int64 (int32 tensors of a GPU live in the host's memory):
    the same model as batches made and placed as each update starts."""
    steps = ("--max-steps", 5, "--devices", 2, "--dropout", 0.1, "--show-placement")
    ahead = driver(tmp_path / "ahead", *steps, wait=False)
    inline = driver(tmp_path / "inline", *steps, "--prefetch", 0, wait=False)
    on_replicas = ("batch devices: /job:localhost/replica:0/task:0/device:CPU:0 int64 "
                   "/job:localhost/replica:0/task:0/device:CPU:1 int64")
    for output in finished(ahead), finished(inline):
        assert on_replicas in output.splitlines(), output
    for a, b in zip(final_weights(tmp_path / "ahead"), final_weights(tmp_path / "inline")):
        np.testing.assert_array_equal(a, b)  # bit for bit


@pytest.mark.slow
def test_run_killed_with_sigkill_resumes_to_the_same_weights(tmp_path):
    steps = ("--max-steps", 16, "--dropout", 0.1, "--save-every", 3)
    straight = driver(tmp_path / "straight", *steps, wait=False)  # side by side with the victim
    victim = driver(tmp_path / "killed", *steps, "--step-sleep", 0.3, wait=False)
    deadline = time.time() + 300
    while not checkpoints.list_checkpoints(tmp_path / "killed") and time.time() < deadline:
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    saved = checkpoints.list_checkpoints(tmp_path / "killed")
    assert saved and checkpoints.load(saved[-1]).meta["step"] < 16
    output = driver(tmp_path / "killed", *steps)
    assert "resumed from" in output
    finished(straight)
    for a, b in zip(final_weights(tmp_path / "straight"), final_weights(tmp_path / "killed")):
        np.testing.assert_array_equal(a, b)  # bit for bit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_workers(tmp_path, *args, worker_args=((), ()), drop_env=()):
    """Two driver processes as workers 0 and 1 of one cluster on this host, each with its own
    save dir (tmp_path/w0, w1), `args` then its own `worker_args`, and this environment without
    the variables `drop_env` names; their processes."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]}
    processes = []
    for index in range(2):
        env = {key: value for key, value in os.environ.items() if key not in drop_env}
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": index}})
        processes.append(driver(tmp_path / f"w{index}", *args, *worker_args[index], env=env,
                                wait=False))
    return processes


@pytest.mark.slow
def test_two_workers_with_tf_config_end_with_identical_weights_and_resume_together(tmp_path):
    # SIGTERM to worker 1 alone at step 5: both stop there, each saying why.
    outputs = [finished(process) for process in two_workers(
        tmp_path, "--max-steps", 9, worker_args=((), ("--sigterm-at", 5)))]
    for worker, output in enumerate(outputs):
        this = " (this one)" if worker == 1 else ""
        assert f"stopping at step 5, saved: worker 1{this} received signal 15 (SIGTERM)" in output
        assert "finished at step 5" in output
    for a, b in zip(final_weights(tmp_path / "w0", 0), final_weights(tmp_path / "w1", 1)):
        np.testing.assert_array_equal(a, b)
    # The history is the chief's (in a shared save dir each row once).
    assert (tmp_path / "w0" / "history.jsonl").exists()
    assert not (tmp_path / "w1" / "history.jsonl").exists()
    # Only the chief wrote a checkpoint, so in separate save dirs worker 1 would start again at
    # step 0 beside a chief at step 5: both refuse, naming the steps and the remedy.
    for process in two_workers(tmp_path, "--max-steps", 6):
        output, _ = process.communicate(timeout=600)
        assert process.returncode != 0
        assert "the workers resumed at different steps (worker 0: 5, worker 1: 0;" in output
        assert "copy the chief's newest checkpoint_*.npz into each worker's --save-dir" in output
    newest = checkpoints.list_checkpoints(tmp_path / "w0")[-1]
    shutil.copy(newest, tmp_path / "w1" / newest.name)  # the remedy it names
    for process in two_workers(tmp_path, "--max-steps", 6):
        assert "finished at step 6" in finished(process)
    for a, b in zip(final_weights(tmp_path / "w0", 0), final_weights(tmp_path / "w1", 1)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_two_workers_begin_and_end_a_time_budgets_cooldown_together(tmp_path):
    """Each worker has its own clock: they agree on the step the cooldown begins at and on the
    step it ends at (the soonest estimate), and so keep identical weights."""
    outputs = [finished(process) for process in two_workers(
        tmp_path, "--max-steps", 10_000, "--max-minutes", 0.3, "--cooldown", 0.5,
        "--step-sleep", 0.05)]
    said = [[line.split("minutes in")[0].split(",")[0] + line.split("by step")[1].split(",")[0]
             for line in output.splitlines() if line.startswith("cooldown from step")]
            for output in outputs]
    assert said[0] == said[1] and len(said[0]) == 1, said
    for a, b in zip(final_weights(tmp_path / "w0", 0), final_weights(tmp_path / "w1", 1)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_worker_whose_peer_dies_says_so_and_keeps_the_checkpoints(tmp_path):
    """One of two workers killed mid-training (a host lost, or out of memory there): the other's
    next collective fails (TensorFlow notices the missing heartbeats within seconds) and it
    exits saying that another worker is gone and how to resume, not with TensorFlow's
    traceback; the chief's checkpoints stay."""
    chief, other = two_workers(tmp_path, "--max-steps", 200, "--step-sleep", 0.2,
                               "--save-every", 2)
    for line in chief.stdout:
        if line.startswith("step 4/"):
            break
    other.kill()
    output, _ = chief.communicate(timeout=300)
    assert chief.returncode != 0
    assert ("TrainingError: another worker of this run stopped or cannot be reached "
            "(UnavailableError: ") in output, output[-3000:]
    assert ("the checkpoints written are kept: see that worker's log for why, then start every "
            "worker again (the same TF_CONFIG, or srun) to resume from the newest") in output
    assert checkpoints.list_checkpoints(tmp_path / "w0")


@pytest.mark.slow
def test_two_workers_keep_the_best_by_the_chiefs_task_metric(tmp_path):
    """Each worker decodes the validation set in batches sized by its own memory, which can move
    a beam tie: the workers must still agree on the best and on patience (or one would stop
    while the other waits in the next update's collectives). Scores scripted to disagree."""
    processes = two_workers(tmp_path, "--max-steps", 3,
                            worker_args=(("--scores", "5,9,7"), ("--scores", "5,7,9")))
    for process in processes:
        output = finished(process)
        assert "finished at step 3" in output
        assert "best_score 9.0 since_best 1" in output  # the chief's: step 2 the best
    assert checkpoints.load(tmp_path / "w0" / checkpoints.BEST_NAME).meta["step"] == 2


@pytest.mark.slow
def test_two_workers_train_in_one_precision_when_their_timings_disagree(tmp_path):
    """`auto` on two CPUs with avx512_bf16 and no AMX (flags mocked), where worker 0 times
    bfloat16 at 2x float32 and worker 1 at 0.5x (stubbed): both train in float32, alike."""
    processes = two_workers(tmp_path, "--max-steps", 2, "--precision", "auto",
                            "--cpu-flags", "avx2 avx512f avx512_bf16",
                            worker_args=(("--bf16-speedup", 2.0), ("--bf16-speedup", 0.5)),
                            drop_env=("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"))
    outputs = [finished(process) for process in processes]
    for output, timed in zip(outputs, ("2.00x", "0.50x")):
        line = next(line for line in output.splitlines() if line.startswith("precision: "))
        assert line.startswith("precision: float32 (") and f"ran {timed} float32's" in line
        assert "1 of 2 workers chose bfloat16 and 1 float32" in line
        assert "finished at step 2" in output
    for a, b in zip(final_weights(tmp_path / "w0", 0), final_weights(tmp_path / "w1", 1)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("jit_compile", [False, True])  # a branch; XLA's selection
def test_non_finite_losses_in_a_row_stop_with_a_clear_error(tmp_path, jit_compile):
    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    train_config = config.TrainConfig(max_steps=5, max_nonfinite_in_a_row=2,
                                      save_interval_minutes=0, validate_interval_steps=0,
                                      jit_compile=jit_compile)
    trainer = Trainer(model_config, train_config, tmp_path, log=lambda line: None)
    assert trainer.engine._select_skip == jit_compile
    trainer.model.embedding.embeddings.assign(
        np.full(trainer.model.embedding.embeddings.shape, np.nan, np.float32))
    before = [v.numpy() for v in trainer.model.trainable_variables[1:]]
    with pytest.raises(TrainingError, match="2 non-finite updates in a row at step 1") as error:
        trainer.fit(epoch_maker(make_pairs(8, 20), 4))
    assert trainer.state.skipped == 2 and trainer.state.step == 0
    assert int(trainer.engine.optimizer.iterations.numpy()) == 0
    for a, b in zip(before, trainer.model.trainable_variables[1:]):  # all but the NaN embedding
        np.testing.assert_array_equal(a, b.numpy())
    # Adam's moments still 0
    assert not any(np.any(m.numpy()) for m in trainer.engine.optimizer.variables[1:])
    assert str(error.value).endswith("; resume with a lower --lr-scale (now 1), or resume with "
                                     "--precision float32")


def test_the_non_finite_error_of_mixed_float16_advises_only_what_resumes(tmp_path):
    """A mixed_float16 checkpoint does not resume under float32 (the loss scale is optimizer
    state): the advice was "use float32", which the resumed run then refused."""
    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    train_config = config.TrainConfig(max_steps=5, max_nonfinite_in_a_row=2,
                                      save_interval_minutes=0, validate_interval_steps=0,
                                      precision="mixed_float16")
    trainer = Trainer(model_config, train_config, tmp_path, log=lambda line: None)
    trainer.model.embedding.embeddings.assign(
        np.full(trainer.model.embedding.embeddings.shape, np.nan, np.float32))
    with pytest.raises(TrainingError, match="2 non-finite updates in a row at step 1") as error:
        trainer.fit(epoch_maker(make_pairs(8, 20), 4))
    assert str(error.value).endswith(
        "; resume with a lower --lr-scale (now 1), or train with --precision float32 in another "
        "--save-dir (a mixed_float16 checkpoint resumes with mixed_float16 only)")


def test_a_diverging_run_is_warned_then_stopped_keeping_the_checkpoints_before_it(tmp_path):
    lines = []
    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    train_config = config.TrainConfig(max_steps=40, max_diverged_in_a_row=3, warmup_steps=10,
                                      save_interval_minutes=0, save_interval_steps=1,
                                      validate_interval_steps=0, log_interval_steps=1)
    make_epoch = epoch_maker(make_pairs(32, 20), 4)
    healthy = Trainer(model_config, train_config, tmp_path / "healthy", log=lines.append)
    healthy.fit(make_epoch)  # the loss falls: nothing is flagged
    assert healthy.state.diverged == 0 and not any("far above" in line for line in lines)
    # A learning rate 1000x the schedule's: from the second update on, losses of tens to
    # thousands of nats per token (measured; `--lr-scale 1e6` reached 2.8e6 and exited 0).
    diverging = Trainer(model_config, dataclasses.replace(train_config, lr_scale=1e3),
                        tmp_path / "diverging", log=lines.append)
    with pytest.raises(TrainingError, match=r"training diverged: the loss stayed far above its "
                                            r"running mean [\d.]+ for 3 updates .* lower "
                                            r"--lr-scale \(now 1000\)"):
        diverging.fit(make_epoch)
    warnings = [line for line in lines if line.startswith("warning: loss")]
    assert len(warnings) == 3 and diverging.state.diverged == 3 and diverging.state.step == 4
    # Only the update before the loss took off was saved.
    assert [checkpoints.load(p).meta["step"] for p in
            checkpoints.list_checkpoints(tmp_path / "diverging")] == [1]


def test_divergence_is_judged_against_updates_of_the_same_batch_length(tmp_path):
    """The loss per token grows with the pairs' length: the WSJ sample's one batch of its two
    longest trees stood at 2.761 against ~1.27 for the rest (docs/results.md) and was flagged once
    an epoch. Its length has its own running mean; a real spike at a common length is flagged."""
    from vtx.training.loop import _LoopState

    lines = []
    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    trainer = Trainer(model_config, config.TrainConfig(update_freq=2), tmp_path,
                      log=lines.append)
    # The update's longest target row, recorded when it is launched, for the loop to read.
    batches = [to_batch(make_pairs(4, 20, seed=1, max_len=4), (6, 7)),
               to_batch(make_pairs(4, 20, seed=2, max_len=8), (9, 12))]
    trainer.engine.start_update(BatchStream(lambda epoch, skip: batches[skip:]))
    assert list(trainer.engine.launched_lengths) == [12]

    watch = _LoopState(started=0.0).watch
    for _ in range(20):
        assert not trainer.loop._watch_divergence(1.3, watch, 24)
    assert not trainer.loop._watch_divergence(2.8, watch, 756)  # the first of its length
    assert not trainer.loop._watch_divergence(2.7, watch, 756)  # as high as its own length's
    assert not trainer.loop._watch_divergence(1.31, watch, 24)
    assert trainer.state.diverged == 0 and not any("far above" in line for line in lines)
    assert trainer.loop._watch_divergence(2.9, watch, 24)  # far above the updates as long
    assert trainer.state.diverged == 1 and "far above its running mean 1.300" in lines[-1]
    # A length not seen before is not judged, and does not end a diverging series.
    assert not trainer.loop._watch_divergence(5.0, watch, 99)
    assert trainer.loop._watch_divergence(3.0, watch, 24)
    assert "(2 such updates in a row, 2 in all)" in lines[-1]
    # With several workers (length None) one mean for all, as every worker must agree.
    single = _LoopState(started=0.0).watch
    for _ in range(20):
        trainer.loop._watch_divergence(1.3, single, None)
    assert trainer.loop._watch_divergence(2.8, single, None)


def test_one_spiking_update_on_a_validation_step_still_saves_the_best_checkpoint(tmp_path):
    """A batch can be far harder than the rest (long or odd pairs) and spike alone; when the
    validation right after it is the best yet, that checkpoint is the one to keep."""
    lines = []
    pairs = make_pairs(50, 20)
    rng = np.random.default_rng(7)
    # Targets unrelated to their sources: a model that has learnt to reverse (loss ~0.1 nats
    # per token by step 149) loses ~5 nats per token on them, far above twice its running mean.
    hard = to_batch([(source, rng.integers(4, 20, 8).tolist()) for source, _ in pairs[:10]])
    regular = epoch_maker(pairs, 10)

    def make_epoch(epoch, skip):
        batches = regular(epoch, 0)
        if epoch == 29:  # 5 batches an epoch: the 150th update
            batches[4] = hard
        return batches[skip:]

    model_config = config.preset("tiny", vocab_size=20, dropout=0.0)
    train_config = config.TrainConfig(max_steps=152, warmup_steps=50, lr_scale=0.2,
                                      label_smoothing=0.0, save_interval_minutes=0,
                                      save_interval_steps=0, validate_interval_steps=150)
    trainer = Trainer(model_config, train_config, tmp_path, log=lines.append)
    trainer.fit(make_epoch, lambda: regular(0, 0))
    assert "150" in [line.split(" at step ")[1].split()[0] for line in lines
                     if line.startswith("warning: loss")]
    assert any(line.startswith("valid step 150 ") and line.endswith("| best") for line in lines)
    assert checkpoints.load(tmp_path / checkpoints.BEST_NAME).meta["step"] == 150


def test_resuming_with_another_architecture_is_refused(tmp_path):
    pairs = make_pairs(8, 20)
    train_config = config.TrainConfig(max_steps=1, save_interval_minutes=0,
                                      validate_interval_steps=0)
    Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
            log=lambda line: None).fit(epoch_maker(pairs, 4))
    other = Trainer(config.preset("tiny", vocab_size=20, d_ff=64), train_config, tmp_path,
                    log=lambda line: None)
    with pytest.raises(TrainingError, match="different architecture"):
        other.fit(epoch_maker(pairs, 4))


def test_out_of_memory_names_what_lowers_the_memory_of_a_fresh_and_of_a_resumed_packed_run(
        tmp_path):
    """A fresh run: lower --max-tokens. A resumed packed run keeps its checkpoint's rows whatever
    --max-tokens says, so the advice is another --save-dir (or more memory), naming the rows."""
    pairs = make_pairs(8, 20)
    model_config = config.preset("tiny", vocab_size=20)
    train_config = config.TrainConfig(max_steps=1, max_tokens=64, save_interval_minutes=0,
                                      validate_interval_steps=0)
    Trainer(model_config, train_config, tmp_path, log=lambda line: None).fit(epoch_maker(pairs, 4))
    path = checkpoints.list_checkpoints(tmp_path)[-1]
    saved = checkpoints.load(path)  # as a packed run's checkpoint: its rows recorded
    checkpoints.save(path, dataclasses.replace(saved, meta={**saved.meta,
                                                            "packed_shapes": [[4, 12, 16]]}))

    def out_of_memory(*args):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating a tensor")

    batch = to_batch(pairs[:4])
    for resume, advice in ((False, "; lower --max-tokens (now 64) and raise --update-freq"),
                           (True, f"; this run resumed from {path} and keeps its packed batch "
                                  f"shapes (4x12x16) whatever --max-tokens says")):
        trainer = Trainer(model_config, train_config, tmp_path, log=lambda line: None)
        if resume:
            trainer.resume()
        # the allocator refusing the update
        trainer.engine._update = as_traced_update(out_of_memory)
        with pytest.raises(TrainingError, match="out of memory on a batch of source") as raised:
            trainer.engine.start_update(BatchStream(lambda epoch, skip: iter([batch] * 2)))
        assert advice in str(raised.value)
        assert ("start a new run (another --save-dir) with a lower --max-tokens (now 64)"
                in str(raised.value)) == resume
    trainer.engine._evaluate = out_of_memory  # the validation loss's forward pass
    with pytest.raises(TrainingError, match=r"^out of memory on a validation batch of source "
                                            r"\(4, \d+\) target \(4, \d+\); this run resumed"):
        trainer.engine.evaluate([batch])


@pytest.mark.parametrize("prefetch", [2, 0])
def test_out_of_memory_placing_a_batch_names_prefetch_when_batches_are_read_ahead(tmp_path,
                                                                                  prefetch):
    """The read-ahead keeps --prefetch batches on the device: running out of memory placing one
    (on the read-ahead's thread, or as the update starts with --prefetch 0) names it too when
    there is one."""
    pairs = make_pairs(8, 20)
    train_config = config.TrainConfig(max_steps=1, max_tokens=64, save_interval_minutes=0,
                                      validate_interval_steps=0)
    trainer = Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
                      log=lambda line: None, prefetch=prefetch)

    def out_of_memory(batch, index):  # the device's allocator refusing the batch
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating a tensor")

    trainer.engine.place_batch = out_of_memory
    with pytest.raises(TrainingError, match=r"^out of memory; lower --max-tokens \(now 64\) "
                                            r"and raise --update-freq") as raised:
        trainer.fit(epoch_maker(pairs, 4))
    assert ("; or lower --prefetch (now 2: batches kept on the device ahead of the updates; 0 "
            "keeps none)" in str(raised.value)) == bool(prefetch)


def test_negative_time_budget_is_refused():
    with pytest.raises(ValueError, match="max_minutes must be >= 0, got -1"):
        config.TrainConfig(max_minutes=-1)
