import re

import pytest
from click.testing import CliRunner

from vtx import checkpoints
from vtx_cli.main import main


def run_export(*args):
    return CliRunner().invoke(main, ["export", *map(str, args)])


def test_cli_lists_the_library_formats():
    from vtx import export
    from vtx_cli import export as cli_export

    assert cli_export.FORMATS == export.FORMATS


def test_unknown_format_is_a_usage_error_naming_it(tmp_path):
    checkpoint = tmp_path / "c.npz"
    checkpoint.write_bytes(b"")
    result = run_export("--checkpoint", checkpoint, "--format", "onnx", "--output", tmp_path / "o")
    assert result.exit_code == 2
    assert ("'onnx' is not one of 'savedmodel', 'ctranslate2', 'transformers', 'keras-hub'"
            in result.output)
    with pytest.raises(ValueError, match="unknown export format 'onnx'"):
        from vtx.export import export
        export(checkpoint, tmp_path / "o", "onnx")


def test_an_output_in_the_way_is_refused_naming_the_library_arguments(tmp_path):
    from vtx.errors import ArgumentError
    from vtx.export import export

    output = tmp_path / "out"
    output.write_text("mine")
    never_read = tmp_path / "c.npz"  # the output is checked first
    with pytest.raises(ArgumentError, match=rf"^output {re.escape(str(output))} already exists "
                                            r"\(use force to replace it\)$"):
        export(never_read, output, "ctranslate2")
    with pytest.raises(ArgumentError, match=r"exists and is not a directory; not replacing it$"):
        export(never_read, output, "ctranslate2", force=True)
    output.unlink()
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    with pytest.raises(ArgumentError, match=r"^output .* is a non-empty directory that holds no "
                                            r"export \(saved_model.pb or model.bin or "):
        export(never_read, output, "ctranslate2", force=True)


@pytest.mark.slow
def test_checkpoint_without_vocabulary_is_refused(trained_checkpoint, tmp_path):
    bare = tmp_path / "bare.npz"
    loaded = checkpoints.load(trained_checkpoint)
    loaded.vocab = None
    checkpoints.save(bare, loaded)
    result = run_export("--checkpoint", bare, "--format", "ctranslate2", "--output", tmp_path / "o")
    assert result.exit_code == 1
    assert f"{bare}: the checkpoint carries no vocabulary" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.npz"]


@pytest.mark.slow
def test_existing_output_needs_force_and_force_replaces_only_an_export(trained_checkpoint,
                                                                       tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    args = ["--checkpoint", trained_checkpoint, "--format", "ctranslate2", "--output", output]
    result = run_export(*args)
    assert result.exit_code == 1
    assert f"--output {output} already exists (use --force" in result.output
    result = run_export(*args, "--force")
    assert result.exit_code == 1 and "holds no export" in result.output
    assert (output / "notes.txt").read_text() == "mine"

    (output / "notes.txt").unlink()
    assert run_export(*args, "--force").exit_code == 0  # an empty directory may be replaced
    assert (output / "model.bin").is_file()
    (output / "stale.txt").write_text("from an older export")
    assert run_export(*args, "--force").exit_code == 0
    assert not (output / "stale.txt").exists() and (output / "model.bin").is_file()


@pytest.mark.slow
def test_a_failed_export_leaves_nothing_behind(trained_checkpoint, tmp_path, monkeypatch):
    import vtx.export.ct2

    def fail_halfway(checkpoint, directory):
        directory.mkdir()
        (directory / "model.bin").write_bytes(b"half")
        raise ValueError("disk full")

    monkeypatch.setattr(vtx.export.ct2, "write_ctranslate2", fail_halfway)
    result = run_export("--checkpoint", trained_checkpoint, "--format", "ctranslate2",
                        "--output", tmp_path / "out")
    assert result.exit_code == 1 and "disk full" in result.output
    assert list(tmp_path.iterdir()) == []
