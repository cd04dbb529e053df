"""`benchmarks/dropout.py`: vtx's 16-bit dropout mask against Keras's, alternated in one process."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dropout.py"


def test_prints_both_masks_rounds_and_their_ratio():
    out = subprocess.run([sys.executable, str(SCRIPT), "--arch", "tiny", "--tokens", "64",
                          "--length", "8", "--rounds", "2", "--updates", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "tiny, P_drop 0.1, 8 x 8, float32, no XLA, cpu" in out
    rounds = re.findall(r"^round (\d): keras +([\d.]+) ms wall +([\d.]+) ms cpu \| "
                        r"vtx +([\d.]+) ms wall +([\d.]+) ms cpu \| vtx/keras wall ([\d.]+) "
                        r"cpu ([\d.]+)$", out, re.M)
    assert [r[0] for r in rounds] == ["1", "2"], out
    assert all(float(value) > 0 for r in rounds for value in r[1:])
    assert re.search(r"^mean vtx/keras over 2 rounds: wall [\d.]+, cpu [\d.]+$", out, re.M)
