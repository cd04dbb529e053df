"""benchmarks/search_memory.py measures a search in a fresh process and prints one row each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "search_memory.py"


def test_each_setting_gets_a_row_with_its_estimate_and_a_measured_growth():
    run = subprocess.run([sys.executable, str(SCRIPT), "--vocab", "300", "--beam", "2,40",
                          "--batch", "1", "--source-length", "8"], capture_output=True,
                         text=True, timeout=600, check=True)
    rows = [line.split() for line in run.stdout.splitlines()[2:]]
    assert [row[:3] for row in rows] == [["300", "2", "1"], ["300", "40", "1"]]
    for _, _, _, measured, estimated, ratio in rows:
        assert float(measured) > 0 and float(estimated) > 0 and float(ratio) > 0
    estimates = [float(row[4]) for row in rows]
    assert estimates[1] > estimates[0]  # a wider beam is estimated to need more
