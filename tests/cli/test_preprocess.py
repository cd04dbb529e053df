"""`vtx preprocess` on the command line: summary, exit codes, one clear line per bad input."""

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from tests.data.conftest import small_corpus, write_lines  # noqa: F401  (a fixture)
from vtx_cli.main import main


def run(*args):
    return CliRunner().invoke(main, ["preprocess", "-s", "en", "-t", "de", *map(str, args)])


@pytest.fixture()
def corpus(small_corpus):  # noqa: F811
    """Arguments naming the small corpus: 2000 training pairs, 200 validation pairs."""
    return ["--trainpref", small_corpus / "train", "--validpref", small_corpus / "valid",
            "--vocab-size", 1000]


def test_preprocess_writes_the_directory_and_prints_counts(corpus, small_corpus,  # noqa: F811
                                                           tmp_path):
    valid = small_corpus / "valid"
    result = run(*corpus, "--testpref", f"{valid},{valid}", "--destdir",
                 tmp_path / "bin", "--workers", 2)
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "bin" / "meta.json").read_text())
    assert list(meta["splits"]) == ["train", "valid", "test", "test1"]
    assert "train: 2000 pairs kept" in result.output
    assert "filtered 0 (empty 0, too_long 0, length_ratio 0)" in result.output
    assert "vocabulary: 1000 ids, trained (bpe)" in result.output


def assert_fails_cleanly(result, message, tmp_path, expected_files=()):
    assert result.exit_code != 0
    assert message in result.output
    assert sum("Error:" in line for line in result.output.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected_files)


def test_a_vocab_size_too_small_for_the_characters_says_the_size_to_give(small_corpus,  # noqa: F811
                                                                           tmp_path):
    """SentencePiece's own words named flags vtx lacks (vocab_size, --character_coverage)."""
    result = run("--trainpref", small_corpus / "train", "--destdir", tmp_path / "bin",
                 "--vocab-size", 5)
    said = re.search(r"Error: --vocab-size 5 is too small for the characters of the training "
                     r"text: SentencePiece needs at least (\d+) pieces for them; raise "
                     r"--vocab-size to at least (\d+)\n", result.output)
    assert said and said[1] == said[2], result.output
    assert "character_coverage" not in result.output
    assert_fails_cleanly(result, "--vocab-size 5", tmp_path)
    assert run("--trainpref", small_corpus / "train", "--destdir", tmp_path / "bin",
               "--vocab-size", said[1]).exit_code == 0


def test_a_vocab_size_too_small_counts_the_whole_word_symbols_in_the_minimum(
        small_corpus, tmp_path):  # noqa: F811
    """Each symbol takes a piece of SentencePiece's minimum: not the characters alone to blame."""
    symbols = tmp_path / "symbols.txt"
    symbols.write_text("".join(f"(X{i}\n" for i in range(50)))
    without = run("--trainpref", small_corpus / "train", "--destdir", tmp_path / "bin",
                  "--vocab-size", 5)
    characters = int(re.search(r"needs at least (\d+) pieces", without.output)[1])
    result = run("--trainpref", small_corpus / "train", "--destdir", tmp_path / "bin",
                 "--vocab-size", 5, "--whole-word-symbols", symbols)
    minimum = characters + 50
    assert (f"Error: --vocab-size 5 is too small for the characters of the training text and the "
            f"--whole-word-symbols: SentencePiece needs at least {minimum} pieces for them, 50 "
            f"of them for the 50 symbols; raise --vocab-size to at least {minimum}\n"
            in result.output), result.output
    assert_fails_cleanly(result, "--vocab-size 5", tmp_path, ["symbols.txt"])
    assert run("--trainpref", small_corpus / "train", "--destdir", tmp_path / "bin",
               "--vocab-size", minimum, "--whole-word-symbols", symbols).exit_code == 0


def test_missing_file(tmp_path):
    result = run("--trainpref", tmp_path / "nope", "--destdir", tmp_path / "bin")
    assert_fails_cleanly(result, f"missing file: neither {tmp_path}/nope.en nor "
                                 f"{tmp_path}/nope.en.gz exists", tmp_path)


def test_unequal_line_counts_name_both_files_and_counts(small_corpus, tmp_path):  # noqa: F811
    write_lines(tmp_path / "v.en", ["a", "b", "c"])
    write_lines(tmp_path / "v.de", ["a", "b"])
    result = run("--trainpref", small_corpus / "train", "--validpref", tmp_path / "v",
                 "--destdir", tmp_path / "bin", "--vocab-size", 1000)
    assert_fails_cleanly(result, f"line counts differ: {tmp_path}/v.en has 3 lines, "
                                 f"{tmp_path}/v.de has 2 lines", tmp_path, ["v.en", "v.de"])


def test_invalid_utf8_names_file_and_line(tmp_path):
    write_lines(tmp_path / "t.en.gz", ["one", "two", "three"])
    (tmp_path / "t.de").write_bytes(b"eins\nzwei\ndr\xe9i\n")
    result = run("--trainpref", tmp_path / "t", "--destdir", tmp_path / "bin")
    assert_fails_cleanly(result, f"{tmp_path}/t.de:3: invalid UTF-8", tmp_path,
                         ["t.en.gz", "t.de"])


def test_non_empty_destdir_needs_force(corpus, tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "keep.txt").write_text("x")
    result = run(*corpus, "--destdir", tmp_path / "bin")
    assert_fails_cleanly(result, f"--destdir {tmp_path}/bin exists and is not empty (use "
                                 f"--force to replace it)", tmp_path, ["bin"])
    assert (tmp_path / "bin" / "keep.txt").exists()


def test_force_replaces_a_data_directory_only(corpus, tmp_path):
    """--force deletes the folder whole: it replaces an earlier `vtx preprocess` output, and
    refuses a folder of other files or one that holds checkpoints (a save dir), which it would
    have deleted."""
    destdir = tmp_path / "bin"
    assert run(*corpus, "--destdir", destdir).exit_code == 0
    (destdir / "notes.txt").write_text("kept by the data directory's user")
    assert run(*corpus, "--destdir", destdir, "--force").exit_code == 0
    assert not (destdir / "notes.txt").exists() and (destdir / "meta.json").is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    assert_fails_cleanly(run(*corpus, "--destdir", other, "--force"),
                         f"--destdir {other} is not a data directory of `vtx preprocess` (no "
                         f"meta.json): --force replaces only those", tmp_path, ["bin", "other"])
    assert (other / "keep.txt").read_text() == "x"
    save = tmp_path / "save"
    shutil.copytree(destdir, save)  # a data directory that also holds a run's checkpoints
    for name in ("checkpoint_00000001.npz", "checkpoint_best.npz"):
        (save / name).write_bytes(b"weights")
    assert_fails_cleanly(run(*corpus, "--destdir", save, "--force"),
                         f"--destdir {save} holds checkpoints (checkpoint_00000001.npz, "
                         f"checkpoint_best.npz): --force would delete them; choose another "
                         f"--destdir", tmp_path, ["bin", "other", "save"])
    assert sorted(p.name for p in save.glob("checkpoint*")) == ["checkpoint_00000001.npz",
                                                                "checkpoint_best.npz"]


def test_bad_spm_model_is_named(small_corpus, tmp_path):  # noqa: F811
    (tmp_path / "x.model").write_text("junk")
    result = run("--validpref", small_corpus / "valid", "--spm-model", tmp_path / "x.model", "--destdir",
                 tmp_path / "bin")
    assert_fails_cleanly(result, f"cannot load SentencePiece model {tmp_path}/x.model",
                         tmp_path, ["x.model"])


def test_bad_flag_value_is_named(corpus, tmp_path):
    result = run(*corpus, "--destdir", tmp_path / "bin", "--workers", 0)
    assert_fails_cleanly(result, "--workers must be positive, got 0", tmp_path)


def _workers_of(pid):
    """The encoding workers (spawned processes) whose parent is `pid`, read from /proc."""
    from pathlib import Path
    workers = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
        if parent == pid and b"spawn_main" in command:
            workers.append(stat.parent.name)
    return workers


def test_ctrl_c_while_workers_encode_stops_without_their_tracebacks(small_corpus, tmp_path):  # noqa: F811
    """Ctrl-C reaches the whole process group, yet no encoding worker prints a KeyboardInterrupt
    traceback: the workers never see it; the main process stops, ends them and leaves no
    output, exiting 130 with one line."""
    import gzip
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    for lang in ("en", "de"):  # 160,000 pairs in 800 shards: seconds of encoding
        lines = gzip.decompress((small_corpus / f"train.{lang}.gz").read_bytes())
        (tmp_path / f"big.{lang}").write_bytes(lines * 80)
    vtx = Path(sys.executable).with_name("vtx")
    process = subprocess.Popen(
        [str(vtx), "preprocess", "-s", "en", "-t", "de", "--trainpref", "big", "--destdir", "bin",
         "--vocab-size", "500", "--workers", "2", "--shard-size", "200"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # a process group of its own, as a terminal's job has
    deadline = time.monotonic() + 120
    while len(_workers_of(process.pid)) < 2 and time.monotonic() < deadline \
            and process.poll() is None:
        time.sleep(0.05)
    assert len(_workers_of(process.pid)) == 2, "the workers never started"
    time.sleep(0.5)  # the workers are encoding
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGINT, (process.returncode, stderr)
    assert stderr.splitlines()[-1] == "vtx preprocess: interrupted (SIGINT)", stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.de", "big.en"]
