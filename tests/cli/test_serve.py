"""`vtx serve` refuses bad flags before it listens, naming the flag and value."""

import click
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


def test_each_flag_may_come_from_the_environment_and_the_command_line_wins(trained_checkpoint):
    from vtx_cli.serve import serve

    options = [p for p in serve.params if isinstance(p, click.Option) and not p.hidden]
    variables = {p.envvar for p in options}
    assert len(variables) == len(options) and "VTX_SERVE_MODEL" in variables
    assert {"VTX_SERVE_MAX_LINES", "VTX_SERVE_API_KEYS", "VTX_SERVE_CORS_ORIGIN"} <= variables
    # The variable's value is taken (the layer is refused against the model), the flag's beam
    # over the variable's (which --max-beam would refuse).
    result = CliRunner().invoke(main, ["serve", "--beam", "4"], env={
        "VTX_SERVE_CHECKPOINT": str(trained_checkpoint), "VTX_SERVE_ALIGNMENT_LAYER": "5",
        "VTX_SERVE_BEAM": "20"})
    assert result.exit_code == 1
    assert "--alignment-layer 5: the model has 2 decoder layers" in result.output


@pytest.mark.parametrize("variable, value, message", [
    ("VTX_SERVE_MAX_BEAM", "0", "Invalid value for '--max-beam': 0 is not in the range x>=1. "
                                "(from VTX_SERVE_MAX_BEAM='0')"),
    ("VTX_SERVE_MODEL", "en-de", "Invalid value for '--model': 'en-de': give PAIR=PATH, e.g. "
                                 "en-de=run/ (from VTX_SERVE_MODEL='en-de')"),
    ("VTX_SERVE_SUGGESTIONS", "/no/such/dir/s.jsonl", "Invalid value for '--suggestions': "
     "'/no/such/dir/s.jsonl': cannot append to it (No such file or directory) (from "
     "VTX_SERVE_SUGGESTIONS="),
])
def test_a_refused_environment_value_names_its_variable(variable, value, message):
    result = CliRunner().invoke(main, ["serve"], env={variable: value})
    assert result.exit_code == 2
    assert message in result.output


def test_a_malformed_keys_file_or_proxy_is_refused_naming_it(trained_checkpoint, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("key-1 req_limit=120\nkey-2 req_limit=lots\n")
    for flags, message in ((["--api-keys", str(keys)], f'{keys}:2: "req_limit=lots": expected '),
                           (["--trusted-proxy", "proxy"], "--trusted-proxy 'proxy': expected")):
        result = CliRunner().invoke(main, ["serve", "--checkpoint", str(trained_checkpoint),
                                           *flags])
        assert result.exit_code == 1 and message in result.output, result.output
