"""`vtx train` under `srun` on a real one-node Slurm cluster (`slurm_cluster.sh`: Debian's
slurm-wlm and munge, which tests/run.sh installs, 2 CPUs): the tasks join one cluster by Slurm's
variables alone (no TF_CONFIG), train one model and resume it together."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from vtx import checkpoints

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("slurm_cluster.sh")
VTX = str(Path(sys.executable).with_name("vtx"))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment in which `srun` reaches a one-node cluster started for these tests."""
    if not shutil.which("srun") or not shutil.which("munged"):
        pytest.skip("Slurm is not installed: Debian's slurm-wlm and munge (tests/run.sh "
                    "installs them as root)")
    folder = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(["sh", str(SCRIPT), "start", str(folder), "2"], capture_output=True,
                             text=True, timeout=900)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("SLURM_") and key != "TF_CONFIG"}
    yield {**environment, "SLURM_CONF": str(folder / "slurm.conf")}
    subprocess.run(["sh", str(SCRIPT), "stop", str(folder)], timeout=60)


def srun(environment, *command):
    """`srun -n 2 command` from the repository's root; (exit status, both tasks' output)."""
    result = subprocess.run(["srun", "-n", "2", "--kill-on-bad-exit=1", "--chdir",
                             str(REPO_ROOT), *map(str, command)], env=environment,
                            capture_output=True, text=True, timeout=900)
    return result.returncode, result.stdout + result.stderr


def test_two_slurm_tasks_join_one_cluster_and_train_the_same_weights_and_ema(slurm, tmp_path):
    status, output = srun(slurm, sys.executable, "-m", "tests.training.driver", tmp_path,
                          "--max-steps", 3, "--ema-decay", 0.5)
    assert status == 0, output[-3000:]
    for worker in (0, 1):
        assert any(line.startswith("Slurm job ") and "2 workers (" in line
                   and f"this task is worker {worker} (SLURM_PROCID {worker})" in line
                   for line in output.splitlines()), output[-3000:]
    weights = [np.load(tmp_path / f"final_weights_{worker}.npz") for worker in (0, 1)]
    assert sorted(weights[0].files) == sorted(weights[1].files)
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])
    # The weights' EMA, stepped on each worker's device from its own weights: the same too.
    averages = [np.load(tmp_path / f"final_ema_{worker}.npz") for worker in (0, 1)]
    for key in averages[0].files:
        np.testing.assert_array_equal(averages[0][key], averages[1][key])
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path)] == ["checkpoint_00000003.npz"]


def test_vtx_train_under_srun_writes_one_run_and_a_second_srun_resumes_it(slurm, multi30k_small,
                                                                          tmp_path):
    flags = ["--arch", "tiny", "--max-tokens", 512, "--warmup-steps", 20,
             "--validate-interval-steps", 0, "--save-interval-minutes", 0, "--log-interval-steps",
             1, "--save-dir", tmp_path / "run"]
    status, output = srun(slurm, VTX, "train", multi30k_small / "data", *flags, "--max-steps", 2)
    assert status == 0, output[-3000:]
    assert "1 replicas on 2 worker(s)" not in output and "2 replicas on 2 worker(s)" in output
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path / "run")] == [
        "checkpoint_00000002.npz"]
    assert checkpoints.load(checkpoints.checkpoint_path(tmp_path / "run", 2)).meta[
        "num_workers"] == 2
    status, output = srun(slurm, VTX, "train", multi30k_small / "data", *flags, "--max-steps", 4)
    assert status == 0, output[-3000:]
    resumed = f"resumed from {checkpoints.checkpoint_path(tmp_path / 'run', 2)} at step 2"
    assert output.count(resumed) == 2, output[-3000:]  # each task
    assert [p.name for p in checkpoints.list_checkpoints(tmp_path / "run")] == [
        "checkpoint_00000002.npz", "checkpoint_00000004.npz"]
