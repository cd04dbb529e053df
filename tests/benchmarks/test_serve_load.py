"""benchmarks/serve_load.py loads a `vtx serve` with concurrent clients and finds their outputs
identical to the offline Translator's."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_load_reports_its_figures_and_identical_outputs(shared_data):
    # float32: in bfloat16 (auto's choice on a CPU with avx512_bf16 or AMX) a line's rounding
    # depends on the batch it lands in, so served lines can differ from offline ones.
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), "--duration", "2",
         "--clients", "3", "--input", str(shared_data / "multi30k" / "test_2016_flickr.en.gz"),
         "--search-threads", "2", "--alone", "5", "--precision", "float32",
         "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["lines"] >= summary["requests"] > 0
    assert summary["identical_lines"] == summary["lines"] and summary["differing_lines"] == 0
    assert summary["rss_mib"] and summary["offline_lines_per_s"] > 0
    assert set(summary["latency_s"]) == {"p50", "p95", "p99"}
    assert summary["alone_p50_s"] > 0 and summary["p50_over_alone"] > 0
    assert result.stdout.startswith("machine: ") and summary["precision"] == "float32"
    assert "precision: float32 (--precision float32)" in result.stdout
