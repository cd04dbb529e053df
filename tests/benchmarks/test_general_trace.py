"""`benchmarks/general_trace.py`: an update of the general program against an exact one."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "general_trace.py"


def test_prints_both_programs_and_their_ratio():
    out = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--shape", "8x6",
                          "--device", "cpu", "--warmup", "1", "--runs", "2"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "tiny (P_drop 0.0), float32, no XLA on /cpu:0, batch 8x6" in out
    for kind in ("general", "exact"):
        assert re.search(rf"^{kind} program: median [\d.]+ s, min [\d.]+ s \(2 updates\)$", out,
                         re.M), out
    assert re.search(r"^general / exact: [\d.]+$", out, re.M), out
