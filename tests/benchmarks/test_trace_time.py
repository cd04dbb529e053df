"""`benchmarks/trace_time.py`: the update's and the search's traces with and without AutoGraph."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_time.py"


def test_prints_each_process_trace_times_and_the_ratio_of_their_medians():
    out = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--runs", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.startswith("tiny, float32 on /cpu:0: seconds to trace, each in a fresh process")
    for mode in ("on", "off"):
        assert re.search(rf"^run 1, AutoGraph {mode}: update [\d.]+ s, search [\d.]+ s$", out,
                         re.M), out
    for kind in ("update", "search"):
        assert re.search(rf"^{kind}: median [\d.]+ s with AutoGraph, [\d.]+ s without; "
                         rf"on / off: [\d.]+$", out, re.M), out
