"""`benchmarks/gpu_replicas.py` on the CPU: the device split into logical devices, the replicas'
weights checked against 1 replica x as many micro-batches, the tok/s lines printed."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_replicas.py"


def result(out: str) -> dict:
    """The figures of the script's `RESULT ` JSON line."""
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, out
    return json.loads(lines[0][len("RESULT "):])


def load_script():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_replicas
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gpu_replicas


def test_replicas_train_the_weights_of_one_replica_accumulating_as_many_micro_batches():
    """2 logical CPU devices rather than 8 (the same code path: several replicas under XLA; 8
    trace and compile each program 8 times, ~1 minute more on 2 cores), one layer, float32."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--replicas", "2", "--archs", "tiny",
         "--layers", "1", "--tokens", "64", "--length", "8", "--steps", "2", "--warmup", "1",
         "--precision", "float32", "--floor"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "device: cpu (CPU) split into 2 logical devices" in done.stdout
    figures = result(done.stdout)
    assert [run["label"] for run in figures["runs"]] == [
        "2 replicas", "1 replica", "1 replica x 2 micro-batches", "1 replica x 2 reversed"]
    assert all(run["tok_s"] > 0 and run["failed"] is None for run in figures["runs"])
    assert figures["first_loss"][0] == figures["first_loss"][1]
    # Training moved the weights, and other batches (1 replica) land far outside the tolerance:
    # the check compares something and would see a difference.
    bound = figures["tolerance"] * figures["lr_sum"]
    assert figures["tolerance"] == 1e-3 and figures["moved"] > 0
    assert figures["other_batches_gap"] > 10 * bound
    assert figures["gap"] <= bound and figures["agree"] is True
    assert figures["floor"] is not None


def test_a_run_that_did_not_finish_is_named_and_the_weights_are_not_called_agreeing(capsys):
    """A run whose process TensorFlow aborted (as 1 replica x 8 micro-batches did under XLA on
    an H200) is reported with how it ended; the others' rates are still given, and with the
    accumulated run missing the check fails rather than passes."""
    gpu_replicas = load_script()
    import numpy as np

    args = gpu_replicas.parse_args(["--device", "cpu", "--replicas", "2", "--tokens", "64",
                                    "--length", "8", "--precision", "float32"])
    runs = gpu_replicas.make_runs(["device 0", "device 1"], args)
    for run in runs[:2]:
        run.seconds, run.weights = 1.0, [np.zeros(3, np.float32)]
    runs[2].failed = "killed by signal 6"
    assert gpu_replicas.report(runs, [np.zeros(3, np.float32)], args) is False
    out = capsys.readouterr().out
    figures = result(out)
    assert [(run["label"], run["failed"]) for run in figures["runs"]] == [
        ("2 replicas", None), ("1 replica", None),
        ("1 replica x 2 micro-batches", "killed by signal 6")]
    assert figures["runs"][0]["tok_s"] > 0 and figures["runs"][2]["tok_s"] is None
    assert figures["gap"] is None and figures["agree"] is False
    assert "weights: not compared: 1 replica x 2 micro-batches killed by signal 6" in out


def test_a_gpu_run_that_tensorflow_aborted_runs_again_on_cudas_allocator_once():
    """The BFC allocator's failed check (SIGABRT) gets one more try on `cuda_malloc_async`; an
    exit with an error, a CPU run, or an allocator the user chose does not."""
    gpu_replicas = load_script()
    retry = gpu_replicas.allocator_retry(-6, "gpu", {"PATH": "/bin"})
    assert retry == {"PATH": "/bin", "TF_GPU_ALLOCATOR": "cuda_malloc_async"}
    assert gpu_replicas.allocator_retry(1, "gpu", {}) is None
    assert gpu_replicas.allocator_retry(-6, "cpu", {}) is None
    assert gpu_replicas.allocator_retry(-6, "gpu", {"TF_GPU_ALLOCATOR": "cuda_malloc_async"}) is None
