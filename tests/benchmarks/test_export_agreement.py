"""benchmarks/export_agreement.py compares every export with `vtx translate` line for line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "export_agreement.py"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "multi30k_tiny.npz"


@pytest.mark.slow
def test_each_export_gets_a_row_per_search_and_the_greedy_ones_agree():
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint", str(FIXTURE),
                          "--limit", "12"], capture_output=True, text=True, timeout=900,
                         check=True)
    figures = json.loads(run.stdout.splitlines()[-1].removeprefix("RESULT "))
    rows = figures["rows"]
    assert figures["lines"] == 12
    assert [(row["export"], row["search"].split(",")[0]) for row in rows] == [
        ("ctranslate2", "greedy"), ("ctranslate2", "beam 4"), ("ctranslate2", "beam 4"),
        ("transformers", "greedy"), ("transformers", "beam 4"),
        ("keras-hub", "greedy"), ("keras-hub", "beam 4")], run.stdout
    # Greedy is one search in every system. CTranslate2 and keras-hub compute what vtx
    # computes: the same 12 lines, so the same BLEU. Marian's layer-norm epsilon (1e-5, vtx's
    # 1e-6) may flip a near tie on some CPU: 11 of 12 at least.
    for row in rows:
        if row["search"] == "greedy":
            assert row["identical"] >= (11 if row["export"] == "transformers" else 12), row
            assert row["identical"] < 12 or row["bleu_export"] == row["bleu_vtx"], row
    assert figures["transformers_log_prob_gap"]["max"] < 3e-4, run.stdout
