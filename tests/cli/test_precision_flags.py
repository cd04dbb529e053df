"""--precision and --quantize of the decoding commands: bad values refused naming the flag and
the value, a forced bfloat16 said (and still translating) on a CPU without it."""

import pytest
from click.testing import CliRunner

from tests.cli.stderr import vtx_lines
from tests.cli.test_translate import vtx
from vtx.precision import BF16_CPU_FLAGS, cpu_flags
from vtx_cli.main import main


@pytest.mark.parametrize("command", ["translate", "score", "parse", "serve"])
@pytest.mark.parametrize("flag, value", [("--precision", "float16"), ("--quantize", "int4")])
def test_a_bad_precision_or_quantization_is_refused_naming_flag_and_value(command, flag, value):
    result = CliRunner().invoke(main, [command, flag, value])
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}': '{value}' is not one of" in result.output


def test_forced_bfloat16_and_int8_translate_and_say_so(trained_checkpoint):
    result = vtx("translate", "--checkpoint", trained_checkpoint, "--precision", "bfloat16",
                 "--quantize", "int8", stdin=b"A man is riding a bike.\n")
    assert result.returncode == 0, result.stderr.decode()
    first = vtx_lines(result.stderr.decode())[0]
    assert first.startswith("precision: bfloat16 (--precision bfloat16")
    assert first.endswith("; quantize: int8")
    if not any(flag in cpu_flags() for flag in BF16_CPU_FLAGS):
        assert "emulated, slower than float32" in first
    assert result.stdout.decode().startswith("Ein Mann ")


def test_serve_loads_its_model_in_the_precision_asked_before_checking_its_flags(
        trained_checkpoint):
    """The model is built (bfloat16, int8) and a bad flag refused against it, before listening."""
    result = CliRunner().invoke(main, ["serve", "--checkpoint", str(trained_checkpoint),
                                       "--precision", "bfloat16", "--quantize", "int8",
                                       "--alignment-layer", "5"])
    assert result.exit_code == 1
    assert "precision: bfloat16 (--precision bfloat16" in result.output
    assert "--alignment-layer 5: the model has 2 decoder layers" in result.output
