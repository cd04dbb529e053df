"""benchmarks/serve_abuse.py runs honest clients alone, then beside each kind of hostile one,
and reports what the hostile requests were answered."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_abused_run_reports_both_runs_and_every_kind_of_abuse(shared_data, tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "serve_abuse.py"), "--duration", "4",
         "--clients", "2", "--input",
         str(shared_data / "multi30k" / "test_2016_flickr.en.gz"), "--csv",
         str(tmp_path / "abuse.csv")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = json.loads(result.stdout.splitlines()[-1].removeprefix("RESULT "))
    answers = summary["abused"]["hostile_answers"]
    # Each kind refused with its own status, or (churn) served.
    kinds = {key.split()[0]: int(key.split()[1]) for key in answers}
    assert kinds.get("cost") == 400 and kinds.get("constraints") == 400
    assert kinds.get("whitespace") == 400 and kinds.get("glossary") == 400
    assert kinds.get("malformed") == 400 and kinds.get("churn") == 200
    assert {int(key.split()[1]) for key in answers if key.startswith("foreign")} <= {403, 415}
    # The LibreTranslate mix: each client from its own address, so none is refused for its
    # neighbours' requests.
    assert kinds.get("libre-markup") == 400 and kinds.get("libre-form") == 400
    assert kinds.get("libre-shapes") == 400 and kinds.get("libre-detect") == 200
    assert kinds.get("libre-alternatives") == 200
    assert summary["mix"] == "both" and summary["hostile"] == 13
    assert summary["clean"]["lines_per_s"] > 0 and summary["abused"]["lines_per_s"] > 0
    assert summary["server_exit"] == 0
    assert len((tmp_path / "abuse.csv").read_text().splitlines()) == 2
