"""`vtx serve` refuses bad flags before it listens, naming the flag and value."""

import pytest
from click.testing import CliRunner

from vtx_cli.main import main


@pytest.mark.parametrize("flags, code, message", [
    (["--alignment-layer", "5"], 1, "--alignment-layer 5: the model has 2 decoder layers"),
    (["--max-line-tokens", "65"], 1, "--max-line-tokens 65 is over the model's 64 positions"),
    (["--beam", "20"], 1, "--beam 20 and --nbest 1, the defaults, must be at most --max-beam 16"),
])
def test_a_bad_flag_is_refused_before_listening(trained_checkpoint, flags, code, message):
    result = CliRunner().invoke(main, ["serve", "--checkpoint", str(trained_checkpoint), *flags])
    assert result.exit_code == code
    assert message in result.output
