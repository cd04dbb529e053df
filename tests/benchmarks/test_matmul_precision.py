"""`benchmarks/matmul_precision.py`: the bfloat16-against-float32 timing `--precision auto` makes,
printed for each shape, and the choice `auto` draws from it on this CPU."""

import re
import subprocess
import sys
from pathlib import Path

from vtx.training.precision import cpu_flags

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "matmul_precision.py"


def test_prints_each_shapes_timing_and_autos_choice():
    out = subprocess.run([sys.executable, str(SCRIPT), "--rows", "16", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = re.findall(r"^(\w[\w ]+?)\s+16 x (\d+) x (\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x",
                      out, re.M)
    assert [name for name, *_ in rows] == ["quickstart ffn in", "quickstart ffn out",
                                           "quickstart vocab 8000", "base ffn in",
                                           "base vocab 37000", "big ffn in"]
    for _, _, _, f32, bf16, speedup in rows:
        assert float(f32) > 0 and float(bf16) > 0 and float(speedup) > 0
    choice = re.search(r"^auto on this CPU .*: (float32|mixed_bfloat16) \((.*)\)$", out, re.M)
    assert choice, out
    if not {"avx512_bf16", "amx_bf16"} & cpu_flags():
        assert choice.group(1) == "float32" and "neither" in choice.group(2)
