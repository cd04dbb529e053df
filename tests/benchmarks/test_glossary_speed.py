"""benchmarks/glossary_speed.py times glossary searches and prints one row each."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "glossary_speed.py"


def test_each_glossary_and_line_gets_a_row_and_the_request_s_glossary_one_more(capsys):
    spec = importlib.util.spec_from_file_location("glossary_speed", SCRIPT)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    benchmark.main(["--spaces", "100,200", "--terms", "5,10", "--request-terms", "3",
                    "--repeat", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[:2] for row in rows] == [["5", "100"], ["5", "200"], ["10", "100"],
                                         ["10", "200"], ["10+3", "200"]]
    assert all(float(row[2]) >= 0 and float(row[3]) >= 0 for row in rows)
