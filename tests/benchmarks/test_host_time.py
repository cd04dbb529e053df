"""`benchmarks/host_time.py`: an update's cost at base's variable count and tiny widths."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "host_time.py"


def test_prints_the_variables_each_rounds_median_and_the_profiles_events(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--layers", "1", "--steps", "3",
                          "--rounds", "2", "--profile", str(tmp_path), "--top", "40"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "43 trainable variables, XLA on /cpu:0" in out, out
    assert len(re.findall(r"^update median [\d.]+ ms$", out, re.M)) == 2, out
    # The XLA program's own events are among the longest: the table reads the trace.
    assert re.search(r"^  \S.*update_impl.* CPU +[\d.]+ +1\.0$", out, re.M), out


def test_tf_function_too_times_the_same_updates_called_both_ways():
    out = subprocess.run([sys.executable, str(SCRIPT), "--layers", "1", "--steps", "3",
                          "--rounds", "2", "--tf-function-too"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert len(re.findall(r"^update median [\d.]+ ms$", out, re.M)) == 2, out
    assert len(re.findall(r"^  calling thread [\d.]+ ms; through the tf.function: update median "
                          r"[\d.]+ ms, calling thread [\d.]+ ms \([\d.]+x, [\d.]+x\)$", out,
                          re.M)) == 2, out


def test_replicas_split_the_device_and_the_skip_is_chosen():
    out = subprocess.run([sys.executable, str(SCRIPT), "--layers", "1", "--steps", "3",
                          "--rounds", "1", "--replicas", "2", "--skip", "branch"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert ("43 trainable variables, XLA on /cpu:0, /cpu:1, a non-finite update skipped by "
            "branch") in out, out
    assert len(re.findall(r"^update median [\d.]+ ms$", out, re.M)) == 1, out


def test_a_count_below_1_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--steps must be >= 1, got 0" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), "--replicas", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--replicas must be >= 1, got 0" in done.stderr
