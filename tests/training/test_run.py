"""`vtx.training.run`: the configuration written beside the checkpoints guards the save dir."""

import dataclasses

import pytest

from vtx import checkpoints, config
from vtx.training import run


def test_a_save_dir_of_another_model_is_refused_naming_config_json_and_the_fields(tmp_path):
    tiny = config.preset("tiny", vocab_size=100)
    run.check_run_config(tmp_path, tiny)  # no config.json yet: anything goes
    run.write_run_config(tmp_path, tmp_path, "tiny", tiny, config.TrainConfig())
    run.check_run_config(tmp_path, tiny)
    wider = dataclasses.replace(tiny, d_ff=64)
    with pytest.raises(checkpoints.ArchitectureError,
                       match=r"config.json holds a different architecture \(d_ff 128, expected "
                             r"64\); use a new --save-dir or the same model flags"):
        run.check_run_config(tmp_path, wider)


def test_an_unreadable_config_json_is_named(tmp_path):
    (tmp_path / run.CONFIG_FILE).write_text("{")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        run.check_run_config(tmp_path, config.preset("tiny"))
