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


@pytest.mark.parametrize("pack", [False, True], ids=["buckets", "packed"])
@pytest.mark.parametrize("checksums", [True, False], ids=["checksums", "older-dir"])
def test_a_shard_damaged_in_place_is_named_not_a_traceback(multi30k_small, tmp_path, pack,
                                                          checksums):
    """Bytes changed in a shard, its size kept: an id past the vocabulary ended training after
    its first updates in TensorFlow's words (`indices[38,12] = 36547 is not in [0, 4000)`), and
    a damaged length built a batch far past --max-tokens, failing as "out of memory". The
    lengths are checked at the start, the ids as they are read; each names its file (a
    directory written before the checksums were kept: its counts, or the directory)."""
    import json
    import shutil

    from vtx.data import directory
    from vtx.data.directory import DataDirectory
    from vtx.errors import DataError

    data = tmp_path / "data"
    shutil.copytree(multi30k_small / "data", data)
    if not checksums:
        meta = json.loads((data / "meta.json").read_text())
        for split in meta["splits"].values():
            for shard in split["shards"]:
                shard.pop("sha256")
        (data / "meta.json").write_text(json.dumps(meta))
    first = DataDirectory.open(data).split("train")["shards"][0]
    model = dict(num_layers=1, d_model=16, d_ff=32, num_heads=2)
    train_config = config.TrainConfig(max_tokens=512, max_steps=2, precision="float32",
                                      pack=pack, validate_interval_steps=0,
                                      save_interval_minutes=0)
    ids, lengths = (data / f"{first['name']}.{suffix}" for suffix in ("bin", "idx"))
    ids_bytes, lengths_bytes = ids.read_bytes(), lengths.read_bytes()
    damaged = bytearray(ids_bytes)
    for offset in range(0, len(damaged) - 1, 100):  # id 65535 of 1000, in every batch
        damaged[offset:offset + 2] = b"\xff\xff"
    ids.write_bytes(bytes(damaged))
    said = (f"^{ids}: damaged since `vtx preprocess` wrote it" if checksums else
            f"^a shard of {data} holds ids beyond its vocabulary of 1,000: damaged")
    with pytest.raises(DataError, match=said):
        run.train(data, tmp_path / "run", "tiny", model, train_config, log=lambda line: None)
    ids.write_bytes(ids_bytes)
    directory._CHECKED.clear()  # a new run: the files are checked once a process
    lengths.write_bytes(lengths_bytes[:4] + b"\x10\x40\x00\x00" + lengths_bytes[8:])  # 16400
    with pytest.raises(DataError, match=f"^{lengths}: damaged since `vtx preprocess` wrote it"):
        run.train(data, tmp_path / "run2", "tiny", model, train_config, log=lambda line: None)
    assert not (tmp_path / "run2").exists()
