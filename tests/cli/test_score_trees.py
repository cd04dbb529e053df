from click.testing import CliRunner

from vtx_cli.main import main

GOLD = "(TOP (S (NP (NP (DT the) (NN man))) (VP (VBD left)) (. .)))\n(TOP (S (NP (NNP Kim)) (VP (VBD ran))))\n"


def _run(*args):
    return CliRunner().invoke(main, ["score-trees", *map(str, args)])


def test_prints_the_evalb_summary(tmp_path):
    (tmp_path / "gold").write_text(GOLD)
    (tmp_path / "test").write_text("(TOP (S (NP (DT the) (NN man)) (VP (VBD left)) (. .)))\n"
                                   "(TOP (S (NP (NNP Kim)) (VP (VBD ran))))\n")
    result = _run(tmp_path / "gold", tmp_path / "test")
    assert result.exit_code == 0, result.output
    # 3 + 3 matches; 4 + 3 gold and 3 + 3 test brackets: recall 85.71, precision 100.00.
    assert "Number of Valid sentence  =      2\n" in result.output
    assert "Bracketing Recall         =  85.71\n" in result.output
    assert "Bracketing FMeasure       =  92.31\n" in result.output
    assert "ID  Len.  Stat." not in result.output
    assert "ID  Len.  Stat." in _run("--per-sentence", tmp_path / "gold", tmp_path / "test").output


def test_missing_file_is_named(tmp_path):
    (tmp_path / "gold").write_text(GOLD)
    result = _run(tmp_path / "gold", tmp_path / "nope")
    assert result.exit_code == 1 and f"no such file: {tmp_path / 'nope'}" in result.output


def test_unparsable_line_names_file_and_line(tmp_path):
    (tmp_path / "gold").write_text(GOLD)
    (tmp_path / "test").write_text(GOLD.splitlines()[0] + "\n(TOP (S (NP (NNP Kim)) (VP (VBD ran)))\n")
    result = _run(tmp_path / "gold", tmp_path / "test")
    assert result.exit_code == 1 and f"{tmp_path / 'test'}, line 2" in result.output


def test_different_line_counts_are_refused(tmp_path):
    (tmp_path / "gold").write_text(GOLD)
    (tmp_path / "test").write_text(GOLD.splitlines()[0] + "\n")
    result = _run(tmp_path / "gold", tmp_path / "test")
    assert result.exit_code == 1 and "has 2 lines but" in result.output and "has 1" in result.output


def test_too_many_errors_stop_like_evalb(tmp_path):
    (tmp_path / "gold").write_text("(TOP (S (NN a)))\n" * 3)
    (tmp_path / "test").write_text("(TOP (S (NN b)))\n" * 3)
    result = _run("--max-errors", 1, tmp_path / "gold", tmp_path / "test")
    assert result.exit_code == 1 and "MAX_ERROR 1" in result.output and "line 3" in result.output
    result = _run(tmp_path / "gold", tmp_path / "test")
    assert result.exit_code == 0 and "Number of Error sentence  =      3" in result.output
    assert "1 : Words unmatch (a|b)\n2 : Words unmatch (a|b)\n3 : Words unmatch (a|b)\n" in (
        result.stderr)
