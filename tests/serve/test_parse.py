"""POST /v1/parse of a `vtx serve` of a parsing model gives `vtx parse`'s trees."""

import pytest

from vtx.serve.process import ServerProcess, request

SETTINGS = ["--beam", "2", "--lenpen", "0.3", "--max-len-b", "30"]
SENTENCES = ["The company said it expects higher sales .", "", "Prices fell ."]


@pytest.mark.slow
def test_a_parser_server_gives_vtx_parse_s_trees_to_a_key_it_holds(random_parser_checkpoint,
                                                                    tmp_path):
    from click.testing import CliRunner

    from vtx_cli.main import main

    (tmp_path / "keys.txt").write_text("parse-key\n")
    server = ServerProcess("--checkpoint", random_parser_checkpoint, *SETTINGS, "--api-keys",
                           tmp_path / "keys.txt")
    try:
        assert request(server.url + "/v1/parse", {"text": SENTENCES})[0] == 403
        status, _, reply = request(server.url + "/v1/parse", {"text": SENTENCES},
                                   headers={"Authorization": "Bearer parse-key"})
        info = request(server.url + "/v1/info")[2]
    finally:
        assert server.stop() == 0
    assert status == 200, reply
    assert info["model"]["parser"]
    source = tmp_path / "sentences.txt"
    source.write_text("".join(line + "\n" for line in SENTENCES))
    offline = CliRunner().invoke(main, ["parse", "--checkpoint", str(random_parser_checkpoint),
                                        "--input", str(source), *SETTINGS])
    assert offline.exit_code == 0, offline.output
    assert [tree["tree"] or "" for tree in reply["trees"]] == offline.stdout.splitlines()
    assert reply["trees"][1] == {"id": 1, "source": "", "tree": None}
