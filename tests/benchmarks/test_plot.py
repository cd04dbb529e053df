"""benchmarks/plot.py draws every plot from the results CSVs, and each row holds what it reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "plot.py"
RESULTS = ROOT / "benchmarks" / "results"
plot = load_script("plot")


@pytest.mark.parametrize("name", sorted(plot.PLOTS))
def test_every_row_of_a_results_csv_holds_the_columns_its_plot_reads(name):
    columns, _, _ = plot.PLOTS[name]
    rows = plot.read_rows(RESULTS / name)
    assert rows, f"{name} has no rows"
    for number, row in enumerate(rows, start=2):
        empty = [column for column in columns if not row.get(column)]
        assert not empty, f"{name} line {number}: no {', '.join(empty)}"


def test_every_results_csv_has_a_plot_or_a_table():
    tables = load_script("tables")
    used = set(plot.PLOTS) | {name for name, _ in tables.TABLES.values()}
    assert sorted(path.name for path in RESULTS.glob("*.csv")) == sorted(used)


def test_the_script_writes_every_png_without_tensorflow(tmp_path):
    # A fresh interpreter, so that the check sees what the script itself imports.
    check = (
        "import runpy, sys; sys.argv = ['plot.py', '--out', sys.argv[1]];"
        f" runpy.run_path({str(SCRIPT)!r}, run_name='__main__');"
        " assert 'tensorflow' not in sys.modules, 'plot.py imported TensorFlow'"
    )
    subprocess.run([sys.executable, "-c", check, str(tmp_path)], check=True, capture_output=True)
    for _, _, png in plot.PLOTS.values():
        written = tmp_path / png
        assert written.stat().st_size > 10_000, f"{png} missing or empty"
        assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
