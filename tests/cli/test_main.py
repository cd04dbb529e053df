import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.in_process import vtx_in_process
from tests.cli.test_train import INTERRUPTED_AT
from tests.data.conftest import head

VTX = [str(Path(sys.executable).with_name("vtx"))]


def run(*args):
    return subprocess.run(VTX + list(args), capture_output=True, text=True, timeout=300)


def test_help_lists_subcommands_and_imports_no_tensorflow():
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom vtx_cli.main import main\n"
             "result = CliRunner().invoke(main, ['--help'])\nprint(result.output)\n"
             "print('TF_IMPORTED' if 'tensorflow' in sys.modules or 'keras' in sys.modules else 'CLEAN')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "train" in out.stdout
    assert out.stdout.strip().endswith("CLEAN")


def test_console_script_help_exits_zero():
    result = run("--help")
    assert result.returncode == 0
    assert "train" in result.stdout


def test_dry_run_prints_the_parameter_count():
    result = vtx_in_process("train", "--arch", "base", "--vocab-size", "37000", "--dry-run",
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "parameters: 63082496" in result.stdout.splitlines()


def test_unknown_arch_is_a_usage_error_naming_the_value():
    result = run("train", "--arch", "huge", "--dry-run")
    assert result.returncode == 2
    assert "huge" in result.stderr


@pytest.mark.parametrize("command,at", [
    ("translate", "vtx.inference.translate:translate_stream"),  # the output's temporary open
    ("parse", "vtx.inference.parse:parse_stream"),
    ("average-checkpoints", "numpy:savez"),  # writing the averaged checkpoint's temporary
    ("preprocess", "vtx.data.preprocess:train_sentencepiece"),  # in the hidden data folder
])
def test_ctrl_c_exits_130_naming_the_command_and_leaves_no_output(
        shared_data, trained_checkpoint, tmp_path, command, at, request):
    """Ctrl-C was click's "Aborted!", exit 1, in every command but train; now 130 and one line.
    Raised while the output is being written: neither it nor its hidden temporary is left."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "sentences.txt").write_text("A dog runs .\n")
    for lang in ("en", "de"):
        lines = head(shared_data / "multi30k" / f"train.{lang}.gz", 200)
        (inputs / f"train.{lang}").write_text("\n".join(lines) + "\n")
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    args = {"translate": ["--checkpoint", trained_checkpoint, "--input",
                          inputs / "sentences.txt", "--output", outputs / "out.txt"],
            "parse": ["--checkpoint", request.getfixturevalue("random_parser_checkpoint"),
                      "--input", inputs / "sentences.txt",
                      "--output", outputs / "trees.txt"],
            "average-checkpoints": ["--inputs", trained_checkpoint, "--output",
                                    outputs / "avg.npz"],
            "preprocess": ["-s", "en", "-t", "de", "--trainpref", inputs / "train",
                           "--destdir", outputs / "data", "--vocab-size", 400]}[command]
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_AT, at, command,
                             *map(str, args)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == f"vtx {command}: interrupted (SIGINT)"
    assert "Aborted!" not in result.stderr and "Traceback" not in result.stderr
    assert list(outputs.iterdir()) == []


def test_ctrl_c_while_click_and_vtx_load_exits_130_in_one_line(tmp_path):
    """A Ctrl-C while the console script imports click, before the group handles it, printed a
    KeyboardInterrupt traceback. The fake click first on the path raises it there. Python
    makes SIGINT a KeyboardInterrupt only where its parent left SIGINT at its default (a suite
    started as a background job of a script ignores it, and so do the processes it starts), so
    the fake click sets Python's handler itself first."""
    fake_click = tmp_path / "click" / "__init__.py"
    fake_click.parent.mkdir()
    fake_click.write_text("import signal, time\n"
                          "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                          "signal.raise_signal(signal.SIGINT)\n"
                          "time.sleep(5)  # the interrupt is raised here at the latest\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(VTX + ["--help"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr == "vtx: interrupted (SIGINT) while starting\n"
    assert result.stdout == ""
