from click.testing import CliRunner

from vtx_cli.main import main


def _run(*args):
    return CliRunner().invoke(main, ["prepare-parse", *map(str, args)])


def test_explicit_file_globs(tmp_path, shared_data):
    sample = shared_data / "ptb_sample"
    result = _run("--train-files", sample / "wsj_000[1-3].mrg", "--train-files", sample / "wsj_0004.mrg",
                  "--valid-files", sample / "wsj_0005.mrg", "--destdir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    # SOURCE.md: wsj_0001-0004 hold 2 + 1 + 30 + 17 trees, wsj_0005 holds 3.
    assert "train: 4 files, 50 sentences" in result.output and "valid: 1 files, 3 sentences" in result.output
    assert len((tmp_path / "out" / "train.trees").read_text().splitlines()) == 50
    assert not (tmp_path / "out" / "test.words").exists()


def test_glob_matching_nothing_is_named(tmp_path, shared_data):
    result = _run("--train-files", shared_data / "ptb_sample" / "wsj_0001.mrg",
                  "--valid-files", tmp_path / "none_*.mrg", "--destdir", tmp_path / "out")
    assert result.exit_code == 2 and "--valid-files" in result.output and "none_*.mrg" in result.output


def test_treebank_needs_the_ldc_layout(tmp_path, shared_data):
    result = _run("--treebank", shared_data / "ptb_sample", "--destdir", tmp_path / "out")
    assert result.exit_code == 1 and "wsj/SS/wsj_SSNN.mrg" in result.output


def test_sources_must_be_given_one_way(tmp_path):
    assert "not both" in _run("--treebank", tmp_path, "--train-files", "x", "--destdir", tmp_path).output
    assert "--treebank DIR" in _run("--train-files", "x", "--destdir", tmp_path).output


def test_malformed_treebank_file(tmp_path):
    (tmp_path / "bad.mrg").write_text("( (S (NN a))\n")
    result = _run("--train-files", tmp_path / "bad.mrg", "--valid-files", tmp_path / "bad.mrg",
                  "--destdir", tmp_path / "out")
    assert result.exit_code == 1 and "bad.mrg" in result.output and "never closed" in result.output
    assert not (tmp_path / "out").exists()  # no empty folder left behind
    kept = tmp_path / "kept"
    kept.mkdir()
    _run("--train-files", tmp_path / "bad.mrg", "--valid-files", tmp_path / "bad.mrg",
         "--destdir", kept)
    assert kept.is_dir() and not list(kept.iterdir())  # a folder the user made stays


def test_keep_tags_with_other_slots_is_refused(tmp_path):
    # --keep-tags took precedence over --slots words without a word.
    result = _run("--train-files", "x.mrg", "--valid-files", "y.mrg", "--destdir",
                  tmp_path / "t", "--keep-tags", "--slots", "words")
    assert result.exit_code == 2
    assert "--keep-tags means --slots tags, not --slots words" in result.output
    assert not (tmp_path / "t").exists()


def test_outputs_already_there_are_replaced_only_with_force(tmp_path, shared_data):
    sample = sorted((shared_data / "ptb_sample").glob("wsj_*.mrg"))
    args = ["--train-files", sample[0], "--valid-files", sample[1], "--destdir", tmp_path]
    assert _run(*args).exit_code == 0
    (tmp_path / "valid.gold").write_text("kept\n")
    result = _run(*args)  # were overwritten without a word
    assert result.exit_code == 1
    assert (f"{tmp_path / 'train.words'} already exists (and 6 more of the outputs) (use "
            f"--force to replace the outputs)") in result.output
    assert (tmp_path / "valid.gold").read_text() == "kept\n"
    assert _run(*args, "--force").exit_code == 0
    assert (tmp_path / "valid.gold").read_text() != "kept\n"
