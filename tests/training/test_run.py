"""`vtx.training.run`: the configuration written beside the checkpoints guards the save dir; a
damaged shard is named; subword sampling resumes exactly."""

import dataclasses
import json

import numpy as np
import pytest

from vtx import checkpoints, config, manifest
from vtx.errors import ArchitectureError
from vtx.training import run
from vtx.training.directory import CONFIG_FILE, RunDirectory


def test_a_save_dir_of_another_model_is_refused_naming_config_json_and_the_fields(tmp_path):
    tiny = config.preset("tiny", vocab_size=100)
    RunDirectory(tmp_path).check_config(tiny)  # no config.json yet: anything goes
    RunDirectory(tmp_path).write_config(tmp_path, "tiny", tiny, config.TrainConfig())
    RunDirectory(tmp_path).check_config(tiny)
    wider = dataclasses.replace(tiny, d_ff=64)
    with pytest.raises(ArchitectureError,
                       match=r"config.json holds a different architecture \(d_ff 128, expected "
                             r"64\); use a new --save-dir or the same model flags"):
        RunDirectory(tmp_path).check_config(wider)


def test_an_unreadable_config_json_is_named(tmp_path):
    (tmp_path / CONFIG_FILE).write_text("{")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        RunDirectory(tmp_path).check_config(config.preset("tiny"))


@pytest.mark.parametrize("text,found", [("[]", "[]"), ('{"model": [1]}', "its model [1]"),
                                        ('{"arch": "tiny"}', "its model None")])
def test_a_config_json_that_is_not_vtx_trains_is_named_not_a_traceback(tmp_path, text, found):
    """Was an AttributeError or TypeError traceback."""
    (tmp_path / CONFIG_FILE).write_text(text)
    with pytest.raises(ValueError) as refused:
        RunDirectory(tmp_path).check_config(config.preset("tiny"))
    assert str(refused.value) == (
        f"{tmp_path / CONFIG_FILE}: not the configuration `vtx train` writes ({found}, not "
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
        manifest.write(data)  # as an earlier vtx wrote it, whole
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


@pytest.fixture(scope="module")
def subword_data(shared_data, tmp_path_factory):
    """200 Multi30k pairs (+ 20 for validation) preprocessed with --keep-train-text."""
    from tests.data.conftest import head, write_lines
    from vtx.data.preprocess import PreprocessConfig, preprocess

    folder = tmp_path_factory.mktemp("subword")
    for split, name, count in (("train", "train", 200), ("valid", "val", 20)):
        for lang in ("en", "de"):
            write_lines(folder / f"{split}.{lang}",
                        head(shared_data / "multi30k" / f"{name}.{lang}.gz", count))
    preprocess(PreprocessConfig("en", "de", folder / "bin", trainpref=str(folder / "train"),
                                validpref=str(folder / "valid"), vocab_size=400,
                                keep_train_text=True))
    return folder / "bin"


SUBWORD_MODEL = dict(num_layers=1, d_model=16, d_ff=32, num_heads=2, dropout=0.1)


def subword_config(**options):
    return config.TrainConfig(**{"max_tokens": 2048, "precision": "float32",
                                 "subword_alpha": 0.1, "validate_interval_steps": 0,
                                 "save_interval_minutes": 0, "warmup_steps": 5,
                                 "log_interval_steps": 5, **options})


def test_subword_sampling_resumed_mid_epoch_ends_on_the_weights_of_the_straight_run(
        subword_data, tmp_path):
    """Each epoch is sampled from (seed, epoch) alone: a run stopped inside its second epoch
    (as a kill leaves it: its last checkpoint) and resumed makes the same epochs again and ends
    bit for bit where the straight run ends, past a third epoch."""
    lines = []
    run.train(subword_data, tmp_path / "straight", "tiny", SUBWORD_MODEL,
              subword_config(max_steps=30), log=lines.append)
    assert any(line.startswith("subword sampling: epoch 2 segmented anew") for line in lines)
    resumed = tmp_path / "resumed"
    run.train(subword_data, resumed, "tiny", SUBWORD_MODEL, subword_config(max_steps=14),
              log=lambda line: None)
    epoch, offset = checkpoints.load(checkpoints.list_checkpoints(resumed)[-1]).meta[
        "positions"][0]
    assert epoch == 1 and offset > 0
    run.train(subword_data, resumed, "tiny", SUBWORD_MODEL, subword_config(max_steps=30),
              log=lambda line: None)
    ours, theirs = (checkpoints.load(checkpoints.checkpoint_path(folder, 30))
                    for folder in (resumed, tmp_path / "straight"))
    for mine, straight in zip(ours.model, theirs.model):
        np.testing.assert_array_equal(mine, straight)
    assert json.loads((resumed / CONFIG_FILE).read_text())["train"]["subword_alpha"] == 0.1
    assert not list(resumed.glob(".subword*"))  # the epochs' folder goes with the process


def test_subword_sampling_trains_on_sampled_pairs_and_validates_on_the_preprocessed(
        subword_data, tmp_path):
    from vtx.config import EOS_ID, PAD_ID
    from vtx.data import pipeline, subword
    from vtx.data.batching import BatchPlan
    from vtx.data.directory import DataDirectory

    data = DataDirectory.open(subword_data)
    train_config = subword_config()
    splits = ("train", "valid")

    def targets(batches):  # each row's target_out ids, pads left out
        return sorted(tuple(int(i) for i in row if i != PAD_ID)
                      for batch in batches for row in batch["target_out"] if row.any())

    def stored(directory, split):
        return sorted(tuple(target) + (EOS_ID,)
                      for _, target in pipeline.split_pairs(directory, split))

    with subword.sampling(data, train_config, tmp_path, lambda line: None) as sampler:
        view = sampler.shapes_view(max_positions=256)
        boundaries = pipeline.bucket_boundaries_for(view, splits, max_tokens=1024)
        sides = pipeline.side_lengths_for(view, splits, boundaries)
        make_epoch, make_valid = BatchPlan(boundaries, None, sides).readers(
            data, train_config, 1, 0, sampler, 256)
        assert targets(make_valid()) == stored(data, "valid")
        trained = targets(make_epoch(0, 0))
        assert trained == stored(sampler.epoch(0, lambda s, t: s >= 0), "train")
        assert trained != stored(data, "train")
