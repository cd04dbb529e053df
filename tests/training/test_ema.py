"""The weights' exponential moving average (`vtx train --ema-decay`): stepped in the compiled
update on every replica, kept in every checkpoint, scored by --validate-with-ema."""

import json
import re

import numpy as np
import pytest

from tests.training.synthetic import epoch_maker, make_pairs
from tests.training.test_trainer import driver
from vtx import checkpoints, config
from vtx.training.trainer import Trainer

PAIRS = make_pairs(16, 20)
# One batch shape: under XLA one program.
EPOCH = epoch_maker(PAIRS, 4, lengths=[(8, 9)])


def make_trainer(save_dir, lines=None, dropout=0.1, **options) -> Trainer:
    train_config = config.TrainConfig(**{"max_steps": 3, "save_interval_minutes": 0,
                                         "save_interval_steps": 1, "validate_interval_steps": 0,
                                         "warmup_steps": 10, **options})
    model = config.preset("tiny", vocab_size=20, dropout=dropout)
    return Trainer(model, train_config, save_dir,
                   log=lines.append if lines is not None else lambda line: None)


def hand_ema(initial, steps, decay, start_step):
    """The EMA of the trainable weights after each saved step's weights, by the formula."""
    ema = [np.asarray(array, np.float32) for array in initial]
    for step, weights in steps:
        factor = np.float32(decay if step > start_step else 0.0)
        ema = [factor * average + (np.float32(1) - factor) * weight
               for average, weight in zip(ema, weights)]
    return ema


def trainable(checkpoint_arrays, trainer):
    return [array for array, variable in zip(checkpoint_arrays, trainer.model.variables)
            if variable.trainable]


@pytest.mark.parametrize("start_step, jit", [
    (0, False), (1, False), pytest.param(1, True, marks=pytest.mark.slow)])
def test_the_ema_after_three_updates_is_the_formulas(tmp_path, jit, start_step):
    trainer = make_trainer(tmp_path, ema_decay=0.75, ema_start_step=start_step,
                           jit_compile=jit)
    initial = [v.numpy() for v in trainer.model.variables if v.trainable]
    trainer.fit(EPOCH)
    saved = [checkpoints.load(checkpoints.checkpoint_path(tmp_path, step)) for step in (1, 2, 3)]
    steps = [(step, trainable(c.model, trainer)) for step, c in zip((1, 2, 3), saved)]
    expected = hand_ema(initial, steps, 0.75, start_step)
    for ours, theirs in zip(trainable(saved[-1].ema, trainer), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    # The integer variables (dropout's random state) are the model's.
    for ema, model, variable in zip(saved[-1].ema, saved[-1].model, trainer.model.variables):
        if not variable.trainable:
            np.testing.assert_array_equal(ema, model)
    assert not np.allclose(trainable(saved[-1].ema, trainer)[0], steps[-1][1][0])


def test_an_ema_of_decay_0_is_the_weights_bit_for_bit(tmp_path):
    make_trainer(tmp_path, ema_decay=0.0).fit(EPOCH)
    for path in checkpoints.list_checkpoints(tmp_path):
        checkpoint = checkpoints.load(path)
        for ema, weights in zip(checkpoint.ema, checkpoint.model):
            np.testing.assert_array_equal(ema, weights)


def test_a_run_without_ema_saves_none_and_its_ema_is_refused_naming_the_file(tmp_path):
    make_trainer(tmp_path, max_steps=1).fit(EPOCH)
    path = checkpoints.checkpoint_path(tmp_path, 1)
    assert checkpoints.load(path).ema is None
    with pytest.raises(ValueError, match=f"{path} holds no EMA of its weights .*leave --ema out"):
        checkpoints.load(path, ema=True)


def test_resuming_a_checkpoint_without_ema_starts_the_ema_from_its_weights(tmp_path):
    make_trainer(tmp_path, max_steps=1).fit(EPOCH)
    lines = []
    trainer = make_trainer(tmp_path, lines, max_steps=1, ema_decay=0.9)
    trainer.resume()
    assert (f"warning: {checkpoints.checkpoint_path(tmp_path, 1)} holds no EMA of the weights "
            f"(trained without --ema-decay): this run's EMA starts from its weights") in lines
    for average, variable in zip(trainer.engine.ema.arrays(), trainer.engine.ema.weights):
        np.testing.assert_array_equal(average, variable.numpy())


def test_validate_ema_scores_the_averaged_weights_and_leaves_the_trained_ones(tmp_path):
    """The validation loss of --validate-with-ema is that of the EMA's weights; the checkpoint saved
    after it holds the trained weights and the EMA apart, as before the validation."""
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    trainer = make_trainer(tmp_path / "run", max_steps=2, ema_decay=0.5, validate_ema=True,
                           validate_interval_steps=2)
    trainer.fit(EPOCH, lambda: valid)
    saved = checkpoints.load(checkpoints.checkpoint_path(tmp_path / "run", 2))
    logged = json.loads((tmp_path / "run" / "history.jsonl").read_text().splitlines()[-1])
    for variable, array in zip(trainer.model.variables, saved.model):
        np.testing.assert_array_equal(variable.numpy(), array)
    other = make_trainer(tmp_path / "other", max_steps=2)
    for variable, array in zip(other.model.variables, saved.ema):
        variable.assign(array)
    loss, _ = other.engine.evaluate(valid)
    assert logged["valid_loss"] == pytest.approx(loss, rel=1e-6)
    for variable, array in zip(other.model.variables, saved.model):
        variable.assign(array)
    assert other.engine.evaluate(valid)[0] != pytest.approx(loss, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("devices, jit", [(3, False), (2, True)])
def test_replicas_step_the_ema_on_each_device_as_the_formula_says(tmp_path, devices, jit):
    """MirroredStrategy (3 logical CPU devices, more than a pair; 2 under XLA, where each
    replica's EMA step is a program of its own): each replica's copy of the EMA follows the
    formula from the weights of each step, and the copies agree."""
    driver(tmp_path, "--max-steps", 3, "--devices", devices, "--save-every", 1, "--ema-decay",
           0.75, "--ema-start-step", 1, *(["--jit"] if jit else []))
    saved = [checkpoints.load(checkpoints.checkpoint_path(tmp_path, step)) for step in (1, 2, 3)]
    floating = [i for i, a in enumerate(saved[0].model) if np.issubdtype(a.dtype, np.floating)]
    steps = [(step, [c.model[i] for i in floating]) for step, c in zip((1, 2, 3), saved)]
    expected = hand_ema(steps[0][1], steps, 0.75, 1)
    for ours, theirs in zip([saved[-1].ema[i] for i in floating], expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    with np.load(tmp_path / "final_ema_0.npz") as data:
        replicas = [data[key] for key in sorted(data.files)]
    first = replicas[:len(replicas) // devices]
    for copy in range(1, devices):
        for ours, theirs in zip(replicas[copy * len(first):(copy + 1) * len(first)], first):
            np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("options, says", [
    (dict(ema_decay=1.0), "ema_decay must be in [0, 1), got 1.0"),
    (dict(ema_decay=-0.1), "ema_decay must be in [0, 1), got -0.1"),
    (dict(validate_ema=True), "ema_start_step and validate_ema need an EMA (ema_decay)"),
    (dict(ema_start_step=3), "ema_start_step and validate_ema need an EMA (ema_decay)"),
])
def test_ema_settings_out_of_range_are_refused(options, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        config.TrainConfig(**options)
