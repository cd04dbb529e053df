"""benchmarks/translate_speed.py times the plain search and, with --modes, every decoding mode;
with --ctranslate2, CTranslate2 on the same lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "translate_speed.py"
MODES = ("sampling", "sampling, top-p 0.9", "sampling, top-k 10", "prefix (1 word)",
         "ensemble of 2", "positional scores", "alignments", "constraints (2 words)")


def test_modes_each_get_a_timed_call_and_a_cost_against_the_plain_search():
    run = subprocess.run([sys.executable, str(SCRIPT), "--limit", "8", "--repeat", "1",
                          "--modes"], capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    assert any(line.startswith("vtx ") and "call 1" in line for line in lines), run.stdout
    for mode in MODES:
        row = [line for line in lines if line.startswith(f"mode {mode} ")]
        assert len(row) == 1 and row[0].endswith("x the plain search"), run.stdout


def test_the_two_longest_words_of_a_translation_are_its_constraints():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from translate_speed import longest_words
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert longest_words("Ein Mann fährt Fahrrad.", 2) == ["fährt", "Fahrrad"]
    assert longest_words("Ja.", 2) == ["Ja"] and longest_words("", 2) == []


def test_ctranslate2_beside_vtx_prints_both_seconds_and_their_ratio():
    run = subprocess.run([sys.executable, str(SCRIPT), "--limit", "4", "--repeat", "1",
                          "--ctranslate2", "--ct2-device", "cpu"],
                         capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    assert any(line.startswith("CTranslate2  call 1") for line in lines), run.stdout
    assert lines[-1].startswith("steady call seconds: vtx ") and \
        ", CTranslate2 " in lines[-1] and ", vtx / CTranslate2 " in lines[-1], run.stdout
