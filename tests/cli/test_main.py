import subprocess
import sys
from pathlib import Path

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
    result = run("train", "--arch", "base", "--vocab-size", "37000", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "parameters: 63082496" in result.stdout.splitlines()


def test_unknown_arch_is_a_usage_error_naming_the_value():
    result = run("train", "--arch", "huge", "--dry-run")
    assert result.returncode == 2
    assert "huge" in result.stderr
