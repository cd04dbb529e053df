"""`vtx.training.run`: the configuration written beside the checkpoints guards the save dir."""

import dataclasses

import pytest

from vtx import checkpoints, config
from vtx.errors import ArchitectureError
from vtx.training import run


def test_a_save_dir_of_another_model_is_refused_naming_config_json_and_the_fields(tmp_path):
    tiny = config.preset("tiny", vocab_size=100)
    run.check_run_config(tmp_path, tiny)  # no config.json yet: anything goes
    run.write_run_config(tmp_path, tmp_path, "tiny", tiny, config.TrainConfig())
    run.check_run_config(tmp_path, tiny)
    wider = dataclasses.replace(tiny, d_ff=64)
    with pytest.raises(ArchitectureError,
                       match=r"config.json holds a different architecture \(d_ff 128, expected "
                             r"64\); use a new --save-dir or the same model flags"):
        run.check_run_config(tmp_path, wider)


def test_an_unreadable_config_json_is_named(tmp_path):
    (tmp_path / run.CONFIG_FILE).write_text("{")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        run.check_run_config(tmp_path, config.preset("tiny"))


@pytest.mark.parametrize("text,found", [("[]", "[]"), ('{"model": [1]}', "its model [1]"),
                                        ('{"arch": "tiny"}', "its model None")])
def test_a_config_json_that_is_not_vtx_trains_is_named_not_a_traceback(tmp_path, text, found):
    """Was an AttributeError or TypeError traceback."""
    (tmp_path / run.CONFIG_FILE).write_text(text)
    with pytest.raises(ValueError) as refused:
        run.check_run_config(tmp_path, config.preset("tiny"))
    assert str(refused.value) == (
        f"{tmp_path / run.CONFIG_FILE}: not the configuration `vtx train` writes ({found}, not "
        f"a JSON object of the model's settings); move it away to start over")


@pytest.mark.parametrize("pack", [False, True], ids=["buckets", "packed"])
def test_a_shard_damaged_after_the_start_is_named_when_training_reads_it(multi30k_small, tmp_path,
                                                                         pack):
    """The data directory's files are checked once, at the start; a shard cut short after it (a
    disk filling, `vtx preprocess --force` there) failed where training read it as TensorFlow's
    traceback (buckets) or NumPy's "Size of available data is not a multiple of the data-type
    size" (packed), without the file. Damaged here as the run logs its batches, just before
    the first update."""
    import shutil

    from vtx.data.directory import DataDirectory
    from vtx.errors import DataError

    data = tmp_path / "data"
    shutil.copytree(multi30k_small / "data", data)
    first = DataDirectory.open(data).split("train")["shards"][0]
    shard = data / f"{first['name']}.bin"

    def log(line):
        if line.startswith(("padding: ", "training batches packed, several pairs a row")):
            shard.write_bytes(shard.read_bytes()[:-1])  # an odd size: no whole uint16 at its end

    model = dict(num_layers=1, d_model=16, d_ff=32, num_heads=2)
    train_config = config.TrainConfig(max_tokens=512, max_steps=3, precision="float32",
                                      pack=pack, validate_interval_steps=0,
                                      save_interval_minutes=0)
    with pytest.raises(DataError, match=f"^{shard} holds .* bytes where .*meta.json counts "):
        run.train(data, tmp_path / "run", "tiny", model, train_config, log=log)
