"""benchmarks/tables.py writes the pages' tables of figures from the results CSVs, and the pages
hold what it writes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.benchmarks import BENCHMARKS, load_script

SCRIPT = BENCHMARKS / "tables.py"
tables = load_script("tables")


@pytest.mark.parametrize("page", tables.PAGES, ids=lambda page: page.name)
def test_every_table_of_a_page_is_the_one_its_csv_rows_make(page):
    text = page.read_text(encoding="utf-8")
    _, changed = tables.rewrite(text)
    assert not changed, (f"{page.name}: these tables differ from their CSV rows: "
                         f"{'; '.join(changed)}; run `python benchmarks/tables.py --write`")


def test_every_table_layout_is_used_by_a_page():
    specs = [match["spec"] for page in tables.PAGES
             for match in tables.BLOCK.finditer(page.read_text(encoding="utf-8"))]
    assert sorted({spec.split()[0] for spec in specs}) == sorted(tables.TABLES)


def test_a_figure_changed_in_its_csv_makes_the_page_differ(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    quickstart = results / "quickstart.csv"
    text = quickstart.read_text(encoding="utf-8")
    assert ",38.84," in text
    quickstart.write_text(text.replace(",38.84,", ",38.85,"), encoding="utf-8")
    page = tables.PAGES[1].read_text(encoding="utf-8")  # results.md
    rewritten, changed = tables.rewrite(page, results)
    assert changed == ["quickstart"]
    assert "**38.85**" in rewritten and "**38.84**" not in rewritten


def test_selectors_keep_rows_equal_to_different_from_containing_or_lacking_a_value():
    rows = [{"machine": "AMD EPYC", "command": "run --steps 30"},
            {"machine": "Intel Xeon", "command": "run --steps 10"}]
    assert tables.select(rows, ["machine=AMD EPYC"]) == rows[:1]
    assert tables.select(rows, ["machine!=AMD EPYC"]) == rows[1:]
    assert tables.select(rows, ["command~--steps 10"]) == rows[1:]
    assert tables.select(rows, ["command!~--steps 10"]) == rows[:1]
    assert tables.select(rows, ["machine~EPYC", "command~30"]) == rows[:1]
    with pytest.raises(ValueError, match="no column gpu"):
        tables.select(rows, ["gpu=H100"])
    with pytest.raises(ValueError, match="not COLUMN=VALUE"):
        tables.select(rows, ["machine"])


def test_a_marker_that_selects_no_row_or_names_no_table_is_refused():
    with pytest.raises(ValueError, match="no row of quickstart.csv"):
        tables.render("quickstart commit=0000000")
    with pytest.raises(ValueError, match="'nonesuch': not one of"):
        tables.render("nonesuch")


def test_provenance_shared_by_every_row_is_said_once_below_the_table():
    rows = [{"machine": "m", "command": "a | b", "commit": "c1"},
            {"machine": "m", "command": "a | b", "commit": "c2"}]
    lines = tables.with_provenance(["x"], [([row], [str(i)]) for i, row in enumerate(rows)],
                                   ("machine", "commit", "command"))
    assert lines == ["| x | commit |", "|---|---|", "| 0 | c1 |", "| 1 | c2 |", "",
                     r"- machine: m; command: `a \| b`"]


def test_check_exits_1_on_a_stale_page_and_write_fixes_it(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("<!-- table: serve_abuse -->\n| stale |\n<!-- /table -->\n", encoding="utf-8")
    monkeypatch.setattr(tables, "PAGES", (page,))
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    assert tables.main(["--check"]) == 1
    assert tables.main(["--write"]) == 0
    assert "| stale |" not in page.read_text(encoding="utf-8")
    assert tables.main(["--check"]) == 0


def test_the_script_runs_without_tensorflow():
    check = (
        "import runpy, sys; sys.argv = ['tables.py', '--check'];"
        f" runpy.run_path({str(SCRIPT)!r}, run_name='not_main');"
        " assert 'tensorflow' not in sys.modules, 'tables.py imported TensorFlow'"
    )
    subprocess.run([sys.executable, "-c", check], check=True, capture_output=True)


def test_commands_that_differ_are_written_once_with_each_rows_own_words_in_its_cell():
    rows = [{"command": "python x.py --threads 1 --csv out.csv"},
            {"command": "python x.py --threads 2 --repeat 2 --csv out.csv"}]
    assert tables.common_words([row["command"] for row in rows]) == (3, 2)
    lines = tables.with_provenance(["x"], [([row], [str(i)]) for i, row in enumerate(rows)],
                                   ("command",))
    assert lines == ["| x | command |", "|---|---|", "| 0 | `1` |", "| 1 | `2 --repeat 2` |", "",
                     "- command: `python x.py --threads … --csv out.csv`"]


# The tables of these pages that hold no benchmark's figures: names, flags, targets, statuses and
# the presets' counted parameters. Any other table there is written from a CSV.
HAND_WRITTEN_TABLES = ("| name here |", "| target | status |", "| capability |", "| preset |")


@pytest.mark.parametrize("page", tables.PAGES, ids=lambda page: page.name)
def test_every_other_table_of_a_page_stands_between_markers(page):
    outside = tables.BLOCK.sub("", page.read_text(encoding="utf-8"))
    headers = [line for number, line in enumerate(outside.splitlines())
               if line.startswith("|") and not outside.splitlines()[number - 1].startswith("|")]
    strays = [header for header in headers if not header.startswith(HAND_WRITTEN_TABLES)]
    assert not strays, f"{page.name}: tables of figures not written by tables.py: {strays}"
