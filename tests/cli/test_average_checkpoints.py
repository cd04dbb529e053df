import numpy as np
from click.testing import CliRunner

from vtx import checkpoints
from vtx.checkpoints import Checkpoint
from vtx_cli.main import main


def write(path, step, value, config=None):
    checkpoints.save(path, Checkpoint(model=[np.full((3,), value, np.float32)], optimizer=[],
                                      meta={"step": step, "model_config": config or {"n": 1}}))


def test_num_last_averages_the_newest_checkpoints_of_a_directory(tmp_path):
    for step, value in ((1, 100.0), (2, 1.0), (3, 2.0), (4, 6.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    out = tmp_path / "avg.npz"
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                       "--num-last", "3", "--output", str(out)])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(checkpoints.load(out).model[0], [3.0, 3.0, 3.0])
    assert "steps [2, 3, 4]" in result.output


def test_explicit_files_and_architecture_mismatch(tmp_path):
    write(tmp_path / "a.npz", 1, 1.0)
    write(tmp_path / "b.npz", 2, 2.0, {"n": 2})
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path / "a.npz"),
                                       "--inputs", str(tmp_path / "b.npz"),
                                       "--output", str(tmp_path / "o.npz")])
    assert result.exit_code == 1
    assert "different architecture" in result.output
    assert not (tmp_path / "o.npz").exists()


def test_too_few_checkpoints_is_an_error_naming_the_count(tmp_path):
    write(checkpoints.checkpoint_path(tmp_path, 1), 1, 1.0)
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                       "--num-last", "5", "--output", str(tmp_path / "o.npz")])
    assert result.exit_code == 1
    assert "--num-last 5" in result.output and "only 1" in result.output


def test_upper_bound_best_averages_the_checkpoints_ending_at_the_best_one(tmp_path):
    for step, value in ((1, 100.0), (2, 1.0), (3, 2.0), (4, 6.0), (5, 50.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    write(tmp_path / checkpoints.BEST_NAME, 4, 6.0)
    average = lambda *flags: CliRunner().invoke(main, [
        "average-checkpoints", "--inputs", str(tmp_path), "--num-last", "3",
        "--output", str(tmp_path / "avg.npz"), "--force", *flags])
    result = average("--upper-bound", "best")
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(checkpoints.load(tmp_path / "avg.npz").model[0], [3.0] * 3)
    assert "steps [2, 3, 4]" in result.output
    assert "steps [1, 2, 3]" in average("--upper-bound", "3").output
    result = average("--upper-bound", "2")
    assert result.exit_code == 1 and "only 2 numbered checkpoints" in result.output
    assert "step <= 2" in result.output
    result = average("--upper-bound", "latest")
    assert result.exit_code == 2 and "--upper-bound" in result.output and "'latest'" in result.output
    (tmp_path / checkpoints.BEST_NAME).unlink()
    result = average("--upper-bound", "best")
    assert result.exit_code == 1 and checkpoints.BEST_NAME in result.output
