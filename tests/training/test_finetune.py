"""`vtx train --finetune-from`: a new run from another run's weights, with a fresh optimizer,
schedule and data position, that resumes exactly once it has checkpoints."""

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from tests.training.synthetic import epoch_maker, make_pairs
from vtx import checkpoints, config
from vtx.training import run
from vtx.training.trainer import Trainer

TRAIN = dict(max_tokens=512, warmup_steps=20, log_interval_steps=1, validate_interval_steps=0,
             save_interval_minutes=0, save_interval_steps=1)


def finetune(data, save, start, steps, lines=None, arch=None, overrides=None, **options):
    """`vtx train --finetune-from start` as a library call (`start` None: a new tiny model);
    its log lines into `lines`."""
    train_config = config.TrainConfig(**{**TRAIN, "max_steps": steps, **options})
    return run.train(data, save, arch, overrides or {}, train_config,
                     log=(lines.append if lines is not None else lambda line: None),
                     finetune_from=start)


@pytest.fixture(scope="module")
def pretrained(multi30k_small, tmp_path_factory):
    """A tiny model trained 3 updates on the small Multi30k data: its checkpoint."""
    save = tmp_path_factory.mktemp("pretrained")
    finetune(multi30k_small / "data", save, None, 3, arch="tiny")
    return checkpoints.checkpoint_path(save, 3)


def test_the_start_holds_the_checkpoints_weights_and_a_fresh_optimizer_and_position(tmp_path):
    """At step 0 of a fine-tuning the weights are the checkpoint's bit for bit; Adam's moments,
    its step count, the dropout's random state and the run state are those of a new run."""
    model = config.preset("tiny", vocab_size=20, dropout=0.1)
    train_config = config.TrainConfig(max_steps=3, save_interval_minutes=0, warmup_steps=10,
                                      validate_interval_steps=0)
    Trainer(model, train_config, tmp_path / "a", log=lambda line: None).fit(
        epoch_maker(make_pairs(16, 20), 4))
    path = checkpoints.checkpoint_path(tmp_path / "a", 3)
    start = checkpoints.load(path)
    fresh = Trainer(model, train_config, tmp_path / "fresh", log=lambda line: None)
    tuned = Trainer(model, train_config, tmp_path / "b", log=lambda line: None)
    tuned.checkpointer.start_from(start, path, tuned.state)
    for variable, saved, new in zip(tuned.model.variables, start.model, fresh.model.variables):
        if variable.trainable:
            np.testing.assert_array_equal(variable.numpy(), saved)
            assert not np.array_equal(saved, new.numpy())  # trained: not the initial weights
        else:  # the dropout's random state: this run's seed's
            np.testing.assert_array_equal(variable.numpy(), new.numpy())
    for mine, new in zip(tuned.engine.optimizer.variables, fresh.engine.optimizer.variables):
        np.testing.assert_array_equal(mine.numpy(), new.numpy())
    assert int(tuned.engine.optimizer.iterations.numpy()) == 0
    assert (tuned.state.step, tuned.state.positions) == (0, [(0, 0)])
    assert tuned.state.finetuned_from == str(path)


@pytest.mark.slow
def test_a_finetuning_trains_from_step_0_on_its_own_schedule_and_resumes_exactly(
        multi30k_small, pretrained, tmp_path):
    data = multi30k_small / "data"
    lines = []
    finetune(data, tmp_path / "straight", pretrained, 4, lines, warmup_steps=7, lr_scale=0.5,
             overrides={"dropout": 0.2})
    assert f"fine-tuning from {pretrained} (step 3): its weights, a fresh optimizer and " \
           f"learning-rate schedule, the data from its start" in lines
    first = checkpoints.load(checkpoints.checkpoint_path(tmp_path / "straight", 1))
    meta = first.meta
    assert meta["step"] == 1 and meta["positions"] == [[0, 1]]
    assert meta["finetuned_from"] == str(pretrained)
    assert (meta["train_config"]["warmup_steps"], meta["train_config"]["lr_scale"]) == (7, 0.5)
    assert meta["model_config"] == {**checkpoints.load(pretrained).meta["model_config"],
                                    "dropout": 0.2}
    # One Adam step from fresh moments: iterations 1, not the pretrained run's 3 + 1.
    assert int(first.optimizer[0]) == 1
    # Killed after step 2: its save dir holds steps 1 and 2; the same command resumes.
    killed = tmp_path / "killed"
    killed.mkdir()
    for step in (1, 2):
        shutil.copy(checkpoints.checkpoint_path(tmp_path / "straight", step), killed)
    lines = []
    finetune(data, killed, pretrained, 4, lines, warmup_steps=7, lr_scale=0.5,
             overrides={"dropout": 0.2})
    assert any(line.startswith(f"warning: --finetune-from {pretrained} ignored: {killed} holds "
                               f"checkpoints") for line in lines), lines
    assert f"resumed from {checkpoints.checkpoint_path(killed, 2)} at step 2" in lines
    ends = [checkpoints.load(checkpoints.checkpoint_path(save, 4))
            for save in (tmp_path / "straight", killed)]
    for ours, theirs in zip(ends[0].model + ends[0].optimizer, ends[1].model + ends[1].optimizer):
        np.testing.assert_array_equal(ours, theirs)  # bit for bit
    assert ends[1].meta["finetuned_from"] == str(pretrained)


@pytest.mark.parametrize("arch, overrides, says", [
    ("base", {}, "--arch base (num_layers 6, d_model 512, d_ff 2048, num_heads 8) is not the "
                 "model of --finetune-from {start} (num_layers 2, d_model 64, d_ff 128, "
                 "num_heads 4): fine-tuning trains the checkpoint's model; leave --arch out"),
    (None, {"d_model": 128}, "--d-model 128 conflicts with --finetune-from {start}, whose d_model "
                             "is 64: fine-tuning trains the checkpoint's model; leave --d-model "
                             "out"),
    (None, {"num_layers": 3}, "--layers 3 conflicts with --finetune-from {start}, whose "
                              "num_layers is 2"),
])
def test_a_model_flag_that_is_not_the_checkpoints_is_refused_naming_both(
        multi30k_small, pretrained, tmp_path, arch, overrides, says):
    with pytest.raises(ValueError) as refused:
        finetune(multi30k_small / "data", tmp_path / "run", pretrained, 2, arch=arch,
                 overrides=overrides)
    assert says.format(start=pretrained) in str(refused.value)
    assert not (tmp_path / "run").exists()  # nothing written


def test_the_checkpoints_own_arch_and_sizes_pass(multi30k_small, pretrained, tmp_path):
    finetune(multi30k_small / "data", tmp_path / "run", pretrained, 1, arch="tiny",
             overrides={"d_model": 64, "num_layers": 2})
    assert checkpoints.list_checkpoints(tmp_path / "run")


def test_a_data_directory_of_another_vocabulary_is_refused_naming_it(multi30k_small, pretrained,
                                                                     tmp_path):
    """The same text and size, unigram pieces instead of BPE: the same number of ids, read as
    other pieces; and a vocabulary of another size."""
    from vtx_cli.main import main

    other = tmp_path / "unigram"
    result = CliRunner().invoke(main, [
        "preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", str(multi30k_small / "train"), "--destdir", str(other),
        "--vocab-size", "1000", "--model-type", "unigram"])
    assert result.exit_code == 0, result.output
    with pytest.raises(ValueError) as refused:
        finetune(other, tmp_path / "run", pretrained, 1)
    said = str(refused.value)
    assert said.startswith(f"--finetune-from {pretrained} was trained on another vocabulary "
                           f"than {other / 'spm.model'}: "), said
    assert "ids name other pieces (id " in said
    smaller = tmp_path / "smaller.npz"
    start = checkpoints.load(pretrained)
    model = config.preset("tiny", vocab_size=20)
    Trainer(model, config.TrainConfig(max_steps=1, save_interval_minutes=0,
                                      validate_interval_steps=0),
            tmp_path / "small", log=lambda line: None).fit(epoch_maker(make_pairs(8, 20), 4))
    shutil.copy(checkpoints.checkpoint_path(tmp_path / "small", 1), smaller)
    with pytest.raises(ValueError, match=rf"--finetune-from {smaller} has a vocabulary of 20 ids, "
                                         rf"the data directory .* one of 1000"):
        finetune(multi30k_small / "data", tmp_path / "run", smaller, 1)
    assert start.vocab is not None and not (tmp_path / "run").exists()


def test_a_missing_or_damaged_start_is_named(multi30k_small, tmp_path):
    with pytest.raises(ValueError, match=f"--finetune-from {tmp_path / 'none.npz'}: no such "
                                         f"checkpoint file"):
        finetune(multi30k_small / "data", tmp_path / "run", tmp_path / "none.npz", 1)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="--finetune-from: .*bad.npz: not a readable vtx "
                                         "checkpoint"):
        finetune(multi30k_small / "data", tmp_path / "run", tmp_path / "bad.npz", 1)
