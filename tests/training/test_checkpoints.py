import numpy as np
import pytest

from tests.conftest import TOY_MODEL, toy_weights
from vtx import checkpoints
from vtx.checkpoints import Checkpoint
from vtx.errors import ArchitectureError


def make(step, scale, config=TOY_MODEL):
    model = toy_weights([np.full((2, 3), scale, np.float32), np.array([7, step], np.int64),
                         np.full((4,), 2 * scale, np.float32)], config)
    return Checkpoint(model=model, optimizer=[np.array(step, np.int64)],
                      meta={"step": step, "model_config": config}, vocab=b"spm")


def test_save_load_round_trip_leaves_no_temporary_file(tmp_path):
    path = checkpoints.checkpoint_path(tmp_path, 12)
    checkpoints.save(path, make(12, 1.5))
    loaded = checkpoints.load(path)
    assert loaded.meta == {"step": 12, "model_config": TOY_MODEL}
    assert loaded.vocab == b"spm"
    np.testing.assert_array_equal(loaded.model[0], np.full((2, 3), 1.5))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_00000012.npz"]


def test_list_checkpoints_orders_by_step_and_ignores_others(tmp_path):
    for step in (100, 20, 3):
        checkpoints.save(checkpoints.checkpoint_path(tmp_path, step), make(step, 1.0))
    checkpoints.save(tmp_path / checkpoints.BEST_NAME, make(20, 1.0))
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == [
        "checkpoint_00000003.npz", "checkpoint_00000020.npz", "checkpoint_00000100.npz"]


def test_averaging_n_copies_of_one_checkpoint_returns_it(tmp_path):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"copy{i}.npz")
        checkpoints.save(paths[-1], make(5, 0.1234567))
    averaged = checkpoints.average(paths)
    for got, want in zip(averaged.model, make(5, 0.1234567).model):
        np.testing.assert_array_equal(got, want)


def test_averaging_two_checkpoints_equals_the_hand_mean_and_copies_integers(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    checkpoints.save(a, make(10, 1.0))
    checkpoints.save(b, make(20, 4.0))
    averaged = checkpoints.average([b, a])
    np.testing.assert_allclose(averaged.model[0], np.full((2, 3), 2.5))
    np.testing.assert_allclose(averaged.model[2], np.full((4,), 5.0))
    np.testing.assert_array_equal(averaged.model[1], [7, 20])  # integer state of the newest
    assert averaged.meta["step"] == 20 and averaged.meta["averaged_from"] == [10, 20]


def test_an_average_holds_the_weights_only_unless_the_optimizer_state_is_kept(tmp_path):
    """Adam's moments are twice the weights and nothing reads them from an average; who wants
    them asks (the newest checkpoint's, as the integer state)."""
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    checkpoints.save(a, make(10, 1.0))
    checkpoints.save(b, make(20, 4.0))
    checkpoints.save(tmp_path / "average.npz", checkpoints.average([a, b]))
    assert checkpoints.load(tmp_path / "average.npz").optimizer == []
    kept = checkpoints.average([a, b], keep_optimizer=True)
    np.testing.assert_array_equal(kept.optimizer, [np.array(20, np.int64)])


def test_different_architectures_are_refused(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    checkpoints.save(a, make(10, 1.0, {**TOY_MODEL, "d_model": 8}))
    checkpoints.save(b, make(20, 1.0, {**TOY_MODEL, "d_model": 16}))
    with pytest.raises(ArchitectureError,
                       match=r"a.npz holds a different architecture \(d_model 8, expected 16\); "
                             r"every averaged checkpoint must match the newest"):
        checkpoints.average([a, b])


def test_a_non_checkpoint_file_is_named_in_the_error(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_text("hello")
    with pytest.raises(ValueError, match="junk.npz: not a readable vtx checkpoint"):
        checkpoints.load(junk)
