"""`benchmarks/matmul_precision.py`: the bfloat16-against-float32 timing `--precision auto` makes,
printed for each shape, and the choice `auto` draws from it on this CPU."""

import json
import subprocess
import sys
from pathlib import Path

from vtx.training.precision import cpu_flags

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "matmul_precision.py"


def test_prints_each_shapes_timing_and_autos_choice():
    out = subprocess.run([sys.executable, str(SCRIPT), "--rows", "16", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    figures = json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    assert [shape["shape"] for shape in figures["shapes"]] == [
        "quickstart ffn in", "quickstart ffn out", "quickstart vocab 8000", "base ffn in",
        "base vocab 37000", "big ffn in"]
    for shape in figures["shapes"]:
        assert shape["rows"] == 16
        assert shape["float32_s"] > 0 and shape["bfloat16_s"] > 0 and shape["speedup"] > 0
    assert figures["auto"]["precision"] in ("float32", "mixed_bfloat16")
    if not {"avx512_bf16", "amx_bf16"} & cpu_flags():
        assert figures["auto"]["precision"] == "float32"
        assert "neither" in figures["auto"]["reason"]
