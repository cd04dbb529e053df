import json

import numpy as np
from click.testing import CliRunner

from tests.conftest import TOY_MODEL, toy_weights
from vtx import checkpoints
from vtx.checkpoints import Checkpoint
from vtx_cli.main import main


def write(path, step, value, config=None):
    config = config or TOY_MODEL
    checkpoints.save(path, Checkpoint(model=toy_weights([np.full((3,), value, np.float32)],
                                                        config), optimizer=[],
                                      meta={"step": step, "model_config": config}))


def test_num_last_averages_the_newest_checkpoints_of_a_directory(tmp_path):
    for step, value in ((1, 100.0), (2, 1.0), (3, 2.0), (4, 6.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    out = tmp_path / "avg.npz"
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                       "--num-last", "3", "--output", str(out)])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(checkpoints.load(out).model[0], [3.0, 3.0, 3.0])
    assert "steps [2, 3, 4]" in result.output


def test_explicit_files_and_architecture_mismatch(tmp_path):
    write(tmp_path / "a.npz", 1, 1.0)
    write(tmp_path / "b.npz", 2, 2.0, {**TOY_MODEL, "d_model": 8})
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path / "a.npz"),
                                       "--inputs", str(tmp_path / "b.npz"),
                                       "--output", str(tmp_path / "o.npz")])
    assert result.exit_code == 1
    assert "different architecture" in result.output
    assert not (tmp_path / "o.npz").exists()


def test_too_few_checkpoints_is_an_error_naming_the_count(tmp_path):
    write(checkpoints.checkpoint_path(tmp_path, 1), 1, 1.0)
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                       "--num-last", "5", "--output", str(tmp_path / "o.npz")])
    assert result.exit_code == 1
    assert "--num-last 5" in result.output and "only 1" in result.output


def test_upper_bound_best_averages_the_checkpoints_ending_at_the_best_one(tmp_path):
    for step, value in ((1, 100.0), (2, 1.0), (3, 2.0), (4, 6.0), (5, 50.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    write(tmp_path / checkpoints.BEST_NAME, 4, 6.0)
    average = lambda *flags: CliRunner().invoke(main, [
        "average-checkpoints", "--inputs", str(tmp_path), "--num-last", "3",
        "--output", str(tmp_path / "avg.npz"), "--force", *flags])
    result = average("--upper-bound", "best")
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(checkpoints.load(tmp_path / "avg.npz").model[0], [3.0] * 3)
    assert "steps [2, 3, 4]" in result.output
    assert "steps [1, 2, 3]" in average("--upper-bound", "3").output
    result = average("--upper-bound", "2")
    assert result.exit_code == 1 and "only 2 numbered checkpoints" in result.output
    assert "step <= 2" in result.output
    result = average("--upper-bound", "latest")
    assert result.exit_code == 2 and "--upper-bound" in result.output and "'latest'" in result.output
    (tmp_path / checkpoints.BEST_NAME).write_bytes(b"PK\x03\x04 cut short")
    result = average("--upper-bound", "best")
    assert result.exit_code == 1 and "--num-last" not in result.output, result.output
    assert f"Error: --upper-bound best: {tmp_path / checkpoints.BEST_NAME}: not a readable" \
        in result.output
    (tmp_path / checkpoints.BEST_NAME).unlink()
    result = average("--upper-bound", "best")
    assert result.exit_code == 1 and checkpoints.BEST_NAME in result.output


def test_a_file_given_twice_is_refused_instead_of_weighing_double(tmp_path):
    write(tmp_path / "a.npz", 1, 1.0)
    write(tmp_path / "b.npz", 2, 4.0)
    (tmp_path / "link.npz").symlink_to(tmp_path / "a.npz")
    for twice in ("a.npz", "link.npz"):
        result = CliRunner().invoke(main, [
            "average-checkpoints", "--inputs", str(tmp_path / "a.npz"), "--inputs",
            str(tmp_path / "b.npz"), "--inputs", str(tmp_path / twice),
            "--output", str(tmp_path / "o.npz")])
        assert result.exit_code == 1, result.output
        assert f"{tmp_path / twice} is given twice" in result.output, result.output
        assert "weigh double" in result.output and not (tmp_path / "o.npz").exists()


def test_checkpoints_of_other_vocabularies_are_refused_naming_the_first_other_piece(
        tmp_path, multi30k_small):
    """Weights trained on other pieces, averaged, would be read through the newest's
    vocabulary: the same architecture and size load, so the pieces are compared."""
    from tests.conftest import TRANSLATION_MODEL
    from vtx.data.vocab import Vocabulary

    theirs = (multi30k_small / "data" / "spm.model").read_bytes()
    ours = checkpoints.load(TRANSLATION_MODEL).vocab
    assert Vocabulary.from_bytes(theirs, "a").size == Vocabulary.from_bytes(ours, "b").size
    for name, step, vocab in (("a.npz", 1, ours), ("b.npz", 2, theirs), ("c.npz", 3, ours)):
        checkpoints.save(tmp_path / name, Checkpoint(
            model=toy_weights([np.full((3,), 1.0, np.float32)]), optimizer=[],
            meta={"step": step, "model_config": TOY_MODEL}, vocab=vocab))
    files = ["--inputs", str(tmp_path / "a.npz"), "--inputs", str(tmp_path / "c.npz")]
    result = CliRunner().invoke(main, ["average-checkpoints", *files, "--output",
                                       str(tmp_path / "o.npz")])
    assert result.exit_code == 0, result.output  # one vocabulary
    result = CliRunner().invoke(main, ["average-checkpoints", *files, "--inputs",
                                       str(tmp_path / "b.npz"), "--output",
                                       str(tmp_path / "o2.npz")])
    assert result.exit_code == 1, result.output
    assert (f"{tmp_path / 'b.npz'} was trained on another vocabulary than "
            f"{tmp_path / 'c.npz'}, the newest: ") in result.output, result.output
    assert not (tmp_path / "o2.npz").exists()


def test_an_output_that_is_one_of_the_inputs_is_refused_even_with_force(tmp_path):
    """--force replaces an older average; replacing an input lost that checkpoint for good."""
    for step, value in ((1, 1.0), (2, 3.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    newest = checkpoints.checkpoint_path(tmp_path, 2)
    for inputs in (["--inputs", str(tmp_path), "--num-last", "2"],
                   ["--inputs", str(checkpoints.checkpoint_path(tmp_path, 1)),
                    "--inputs", str(newest)]):
        result = CliRunner().invoke(main, ["average-checkpoints", *inputs, "--output",
                                           str(newest), "--force"])
        assert result.exit_code == 1, result.output
        assert f"--output {newest} is the --inputs file" in result.output, result.output
        np.testing.assert_array_equal(checkpoints.load(newest).model[0], [3.0] * 3)


def test_a_copy_of_an_averaged_checkpoint_is_refused_instead_of_weighing_double(tmp_path):
    """checkpoint_best.npz is a copy of a numbered checkpoint; a glob checkpoint_*.npz takes
    both."""
    for step, value in ((1, 1.0), (2, 3.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    write(tmp_path / checkpoints.BEST_NAME, 2, 3.0)
    files = [str(p) for p in sorted(tmp_path.glob("checkpoint_*.npz"))]
    result = CliRunner().invoke(main, ["average-checkpoints",
                                       *[flag for f in files for flag in ("--inputs", f)],
                                       "--output", str(tmp_path / "o.npz")])
    assert result.exit_code == 1, result.output
    assert "holds the same weights as" in result.output and "step 2" in result.output
    assert checkpoints.BEST_NAME in result.output and "weigh double" in result.output
    assert not (tmp_path / "o.npz").exists()


def test_an_output_named_as_a_numbered_checkpoint_is_refused(tmp_path):
    """An average written as SAVE_DIR/checkpoint_00000100.npz was taken for a training
    checkpoint: `vtx train` resumed from it, --num-last averaged it again, --keep-last pruned
    it. checkpoint_best.npz and other names that are not numbered are written."""
    for step, value in ((1, 1.0), (2, 3.0)):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value)
    numbered = checkpoints.list_checkpoints(tmp_path)
    (tmp_path / "link.npz").symlink_to(tmp_path / "checkpoint_00000100.npz")  # its target
    for output, name in ((tmp_path / "checkpoint_00000100.npz", "checkpoint_00000100.npz"),
                         (tmp_path / "checkpoint_3.npz", "checkpoint_3.npz"),
                         (tmp_path / "link.npz", "checkpoint_00000100.npz")):
        result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                           "--num-last", "2", "--output", str(output)])
        assert result.exit_code == 1, result.output
        assert (f"Error: --output {output}: {name} is a numbered training checkpoint's name "
                f"(checkpoint_NNNNNNNN.npz)") in result.output, result.output
        assert "give another name, e.g. average.npz" in result.output
        assert checkpoints.list_checkpoints(tmp_path) == numbered
    for name in (checkpoints.BEST_NAME, "checkpoint_00000100.npz.average", "average.npz"):
        result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                           "--num-last", "2", "--output", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        np.testing.assert_allclose(checkpoints.load(tmp_path / name).model[0], [2.0] * 3)


def test_an_input_holding_a_variable_its_model_has_not_is_refused_naming_both(
        tmp_path, trained_checkpoint):
    """An old checkpoint (no checksum) holding an extra variable was averaged into a file,
    with a valid checksum, that translate refused."""
    with np.load(trained_checkpoint) as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["checksum"]  # as written before checkpoints had one
    arrays["meta"] = np.array(json.dumps(meta))
    extra = f"model_{sum(n.startswith('model_') for n in arrays):05d}"
    arrays[extra] = np.ones((3,), np.float32)
    old = tmp_path / "old.npz"
    np.savez(old, **arrays)
    for inputs in ([old], [old, trained_checkpoint]):
        result = CliRunner().invoke(main, ["average-checkpoints",
                                           *[a for p in inputs for a in ("--inputs", str(p))],
                                           "--output", str(tmp_path / "o.npz")])
        assert result.exit_code == 1, result.output
        assert f"Error: {old}: its weights hold " in result.output, result.output
        assert f"its variable {extra} (shape (3,)) is past them" in result.output
        assert not (tmp_path / "o.npz").exists()


def test_the_vocabulary_line_says_why_where_the_save_dir_records_none(tmp_path):
    # The found case runs through `vtx train` (tests/cli/test_train.py, the fine-tune test).
    for step in (1, 2):
        write(checkpoints.checkpoint_path(tmp_path, step), step, float(step))
    average = lambda: CliRunner().invoke(main, [
        "average-checkpoints", "--inputs", str(tmp_path), "--num-last", "2",
        "--output", str(tmp_path / "avg.npz"), "--force"])
    result = average()
    assert result.exit_code == 0, result.output
    assert f"vocabulary: not found through {tmp_path / 'config.json'}: " in result.stderr
    (tmp_path / "config.json").write_text(json.dumps({"data_dir": str(tmp_path / "gone")}))
    result = average()
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'gone'} is not a `vtx preprocess` output directory" in result.stderr
