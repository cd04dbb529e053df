"""benchmarks/translate_speed.py times the plain search and, with --modes, every decoding mode;
with --ctranslate2, CTranslate2 on the same lines at each setting of a sweep."""

from __future__ import annotations

import csv
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "translate_speed.py"
RESULTS = ROOT / "benchmarks" / "results" / "decoding_vs_ct2.csv"
MODES = ("sampling", "sampling, top-p 0.9", "sampling, top-k 10", "prefix (1 word)",
         "ensemble of 2", "positional scores", "alignments", "constraints (2 words)")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look up their own module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def speed():
    return _load(SCRIPT, "translate_speed")


def test_modes_each_get_a_timed_call_and_a_cost_against_the_plain_search():
    run = subprocess.run([sys.executable, str(SCRIPT), "--limit", "8", "--repeat", "1",
                          "--modes"], capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    assert any(line.startswith("vtx ") and "call 1" in line for line in lines), run.stdout
    for mode in MODES:
        row = [line for line in lines if line.startswith(f"mode {mode} ")]
        assert len(row) == 1 and row[0].endswith("x the plain search"), run.stdout


def test_the_two_longest_words_of_a_translation_are_its_constraints(speed):
    assert speed.longest_words("Ein Mann fährt Fahrrad.", 2) == ["fährt", "Fahrrad"]
    assert speed.longest_words("Ja.", 2) == ["Ja"] and speed.longest_words("", 2) == []


def test_the_steady_call_is_the_fastest_after_the_warm_up(speed):
    assert speed.steady([(1.0, ["a"]), (3.0, ["b"]), (2.0, ["c"])]) == (2.0, ["c"])
    assert speed.steady([(5.0, ["a"])]) == (5.0, ["a"])


def test_the_sweep_takes_each_batch_types_own_sizes_unless_given(speed):
    defaults = speed.ct2_settings(["float16", "int8"], [1, 2], ["examples", "tokens"], None)
    assert [(s.batch_type, s.max_batch_size) for s in defaults[:9]] == [
        ("examples", size) for size in speed.CT2_MAX_BATCH_SIZES["examples"]] + [
        ("tokens", size) for size in speed.CT2_MAX_BATCH_SIZES["tokens"]]
    assert [(s.compute_type, s.inter_threads) for s in defaults] == (
        [("float16", 1)] * 9 + [("float16", 2)] * 9 + [("int8", 1)] * 9 + [("int8", 2)] * 9)
    given = speed.ct2_settings(["float32"], [2], ["examples", "tokens"], [64])
    assert given == [speed.Setting("float32", 2, "examples", 64),
                     speed.Setting("float32", 2, "tokens", 64)]


def test_vtxs_sweep_takes_every_precision_with_every_quantization_and_batch_size(speed):
    settings = speed.vtx_settings(["float32", "bfloat16"], ["none", "int8"], [512, 16384])
    assert len(settings) == 8 and settings[0].is_float32 and not settings[2].is_float32
    assert [(s.quantize, s.max_tokens) for s in settings[:4]] == [
        ("none", 512), ("none", 16384), ("int8", 512), ("int8", 16384)]
    assert {s.precision for s in settings[4:]} == {"bfloat16"}


def test_auto_among_the_precisions_is_what_vtx_translate_chooses_here_once(speed, monkeypatch,
                                                                          capsys):
    from vtx import precision

    monkeypatch.setattr(precision, "resolve_decoding_precision", lambda requested, **kwargs:
                        precision.DecodingPrecision("float32", reason="auto: no bf16"))
    assert speed.resolved_precisions(["auto", "float32", "bfloat16"], False) == [
        "float32", "bfloat16"]
    assert capsys.readouterr().out == "--precisions auto: float32 (auto: no bf16)\n"


@pytest.mark.parametrize("flag, value", [("--precisions", "float32,mixed_bfloat16"),
                                         ("--quantize", "int4")])
def test_an_unknown_vtx_setting_is_refused_naming_flag_and_value(flag, value):
    run = subprocess.run([sys.executable, str(SCRIPT), flag, value], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2
    assert f"{flag}: unknown {value.split(',')[-1]} (known: " in run.stderr


def test_compute_types_the_device_lacks_are_skipped_and_named(speed, monkeypatch, capsys):
    import ctranslate2

    monkeypatch.setattr(ctranslate2, "get_supported_compute_types",
                        lambda device: {"float32", "int8"})
    assert speed.supported_compute_types("cpu", ["float32", "bfloat16", "int8"]) == [
        "float32", "int8"]
    assert "compute types skipped, cpu lacks them: bfloat16" in capsys.readouterr().out


def test_csv_rows_go_only_under_the_sweeps_own_columns(speed, tmp_path):
    assert speed.csv_header_error(tmp_path / "new.csv") is None
    assert speed.csv_header_error(RESULTS) is None
    other = tmp_path / "other.csv"
    other.write_text("machine,vtx_s\nx,1\n")
    assert "its columns are machine,vtx_s" in speed.csv_header_error(other)


def test_the_ctranslate2_sweep_prints_a_row_per_setting_and_appends_them_to_the_csv(tmp_path):
    """One compute type and inter_threads, both batch types, two sizes each, vtx in bfloat16
    with two --max-tokens and 2 search threads: vtx's two rows, a profile of its fastest,
    CTranslate2's four table rows and four CSV rows under the results' own, the fastest setting
    of each and vtx against CTranslate2's."""
    table = tmp_path / "decoding_vs_ct2.csv"
    shutil.copy(RESULTS, table)
    before = list(csv.DictReader(RESULTS.open(encoding="utf-8")))
    run = subprocess.run([sys.executable, str(SCRIPT), "--limit", "4", "--repeat", "1",
                          "--precisions", "bfloat16", "--max-tokens", "512,16384",
                          "--search-threads", "2", "--profile", str(tmp_path / "profile"),
                          "--ctranslate2", "--ct2-device", "cpu",
                          "--ct2-inter-threads", "2", "--ct2-compute-types", "float32",
                          "--ct2-batch-types",
                          "examples,tokens", "--ct2-max-batch-sizes", "2,64", "--csv",
                          str(table)], capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    settings = [("examples", "2"), ("examples", "64"), ("tokens", "2"), ("tokens", "64")]
    rows = [line.split(" | ") for line in lines if line.startswith("| float32 |")]
    assert [(row[2], row[3]) for row in rows] == settings, run.stdout
    assert all(row[1] == "2" and row[4].endswith(" s") and row[6].endswith("/4")
               for row in rows), run.stdout
    ours = [line.split(" | ")[:3] for line in lines if line.startswith("| bfloat16 |")]
    assert ours == [["| bfloat16", "none", "512"], ["| bfloat16", "none", "16384"]], run.stdout
    assert any(line.startswith("profile of 1 update(s) on /host:CPU") for line in lines), \
        run.stdout  # --profile: one call traced and summarized
    assert list((tmp_path / "profile").rglob("*.xplane.pb"))
    fastest = next(line for line in lines if line.startswith("fastest vtx setting: "))
    assert fastest.startswith("fastest vtx setting: --precision bfloat16 --quantize none ")
    assert any(line.startswith("fastest CTranslate2 setting: float32, inter_threads 2, "
                               "batch_type ")
               for line in lines), run.stdout
    assert lines[-2].startswith("vtx / CTranslate2 at its fastest (sentences/s): ") and \
        lines[-2].endswith("x faster"), run.stdout
    assert lines[-1] == f"4 rows appended to {table}"
    after = list(csv.DictReader(table.open(encoding="utf-8")))
    assert after[:len(before)] == before
    added = after[len(before):]
    assert [(row["batch_type"], row["max_batch_size"]) for row in added] == settings
    plotted, _, _ = _load(ROOT / "benchmarks" / "plot.py", "benchmark_plot").PLOTS[RESULTS.name]
    for row in added:
        assert (row["compute_type"], row["device"], row["lines"], row["precision"],
                row["vtx_quantize"], row["vtx_search_threads"], row["ct2_inter_threads"]) == (
            "float32", "cpu", "4", "bfloat16", "none", "2", "2")
        assert row["vtx_max_tokens"] == fastest.split("--max-tokens ")[1].split(":")[0]
        assert 0 <= float(row["vtx_bleu"]) <= 100 and 0 <= float(row["ct2_bleu"]) <= 100
        assert 0 <= int(row["identical_lines"]) <= 4
        assert all(row[column] for column in plotted), row


@pytest.fixture(scope="module")
def opus_mt_tiny(tmp_path_factory) -> Path:
    """benchmarks/opus_mt_folder.py's folder at its test size (opus-mt-en-de's configuration
    but for its widths), written by the script as a user runs it."""
    folder = tmp_path_factory.mktemp("opus_mt") / "opus-mt-en-de-tiny"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "opus_mt_folder.py"), str(folder),
                    "--sizes", "tiny", "--pieces", "1000"], check=True, capture_output=True,
                   timeout=600)
    return folder


def test_opus_mt_folders_model_never_ends_a_line_and_writes_german_pieces_only(opus_mt_tiny):
    import json

    import sentencepiece
    from safetensors.numpy import load_file

    bias = load_file(str(opus_mt_tiny / "model.safetensors"))["final_logits_bias"][0]
    vocabulary = json.loads((opus_mt_tiny / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((opus_mt_tiny / "config.json").read_text(encoding="utf-8"))
    assert len(vocabulary) == len(bias) == config["vocab_size"] == 58101
    assert vocabulary["<pad>"] == config["pad_token_id"] == 58100
    target = sentencepiece.SentencePieceProcessor(model_file=str(opus_mt_tiny / "target.spm"))
    german = {vocabulary[target.id_to_piece(i)] for i in range(target.get_piece_size())
              if not (target.is_control(i) or target.is_unknown(i))}
    allowed = {int(i) for i in (bias > -1e8).nonzero()[0]}
    assert allowed == german and vocabulary["</s>"] not in allowed


def test_a_marian_folder_is_timed_on_both_sides_at_a_fixed_length(opus_mt_tiny):
    """vtx reads the folder as `vtx import` does, CTranslate2 converts it with its own
    converter; at a fixed length both run the same steps and, in float32, give the same
    lines."""
    run = subprocess.run([sys.executable, str(SCRIPT), "--marian", str(opus_mt_tiny),
                          "--fixed-length", "6", "--limit", "4", "--repeat", "1",
                          "--precisions", "float32", "--ctranslate2", "--ct2-device", "cpu",
                          "--ct2-inter-threads", "1", "--ct2-compute-types", "float32",
                          "--ct2-batch-types", "examples", "--ct2-max-batch-sizes", "4"],
                         capture_output=True, text=True, timeout=600, check=True)
    lines = run.stdout.splitlines()
    assert any(line.startswith("opus-mt-en-de-tiny: 4 lines of ") and
               "every line's length 6;" in line for line in lines), run.stdout
    rows = [line.split(" | ") for line in lines if line.startswith("| float32 | 1 |")]
    assert len(rows) == 1 and rows[0][6] == "4/4", run.stdout


def test_a_fixed_length_below_one_piece_is_refused():
    run = subprocess.run([sys.executable, str(SCRIPT), "--fixed-length", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "--fixed-length: 0 is not a positive number of pieces" in run.stderr
