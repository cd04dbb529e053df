"""benchmarks/translate_speed.py times the plain search and, with --modes, every decoding mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "translate_speed.py"
MODES = ("sampling", "sampling, top-p 0.9", "sampling, top-k 10", "prefix (1 word)",
         "ensemble of 2", "positional scores", "alignments")


def test_modes_each_get_a_timed_call_and_a_cost_against_the_plain_search():
    run = subprocess.run([sys.executable, str(SCRIPT), "--limit", "8", "--repeat", "1",
                          "--modes"], capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    assert any(line.startswith("vtx ") and "call 1" in line for line in lines), run.stdout
    for mode in MODES:
        row = [line for line in lines if line.startswith(f"mode {mode} ")]
        assert len(row) == 1 and row[0].endswith("x the plain search"), run.stdout
