"""Damaged checkpoint files: every kind of damage is one `CheckpointError` naming the file, and a
run resumes from the newest checkpoint that loads (the damaged one set aside, said in the log)."""

import dataclasses
import shutil
import zipfile

import numpy as np
import pytest

from tests.training.synthetic import epoch_maker, make_pairs
from vtx import config
from vtx import checkpoints
from vtx.checkpoints import Checkpoint
from vtx.errors import CheckpointError, TrainingError
from vtx.training.trainer import Trainer


def make() -> Checkpoint:
    model = [np.arange(600, dtype=np.float32).reshape(20, 30), np.array([7, 3], np.int64)]
    return Checkpoint(model=model, optimizer=[np.full((5,), 0.25, np.float32)],
                      meta={"step": 3, "model_config": {"d_model": 8}}, vocab=b"spm")


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def random_bytes(path):
    size = path.stat().st_size
    path.write_bytes(np.random.default_rng(0).integers(0, 256, size, np.uint8).tobytes())


def flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGES = [truncate, random_bytes, flip_middle_byte]


@pytest.mark.parametrize("damage", DAMAGES)
def test_each_damage_is_a_checkpoint_error_naming_the_file(tmp_path, damage):
    path = tmp_path / "checkpoint_00000003.npz"
    checkpoints.save(path, make())
    damage(path)
    with pytest.raises(CheckpointError, match="checkpoint_00000003.npz: not a readable vtx "
                                              "checkpoint, damaged") as caught:
        checkpoints.load(path)
    assert isinstance(caught.value, ValueError)
    assert "allow_pickle" not in str(caught.value)  # no advice to unpickle a damaged file


def test_every_single_byte_flip_is_detected_or_changes_nothing_read(tmp_path):
    """Bytes the zip reader ignores (timestamps, the local headers' copies) may flip unnoticed;
    a flip anywhere else is an error, never different weights."""
    path = tmp_path / "c.npz"
    checkpoints.save(path, make())
    original = path.read_bytes()
    for offset in range(0, len(original), 3):
        data = bytearray(original)
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        try:
            loaded = checkpoints.load(path)
        except CheckpointError:
            continue
        assert loaded.meta == make().meta and loaded.vocab == b"spm", offset
        for got, want in zip(loaded.model + loaded.optimizer, make().model + make().optimizer):
            np.testing.assert_array_equal(got, want)


def test_a_consistent_zip_with_changed_contents_fails_the_checksum(tmp_path):
    """Damage the zip format cannot see (an entry rewritten with a valid CRC) is caught."""
    path = tmp_path / "c.npz"
    checkpoints.save(path, make())
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["model_00000"] = arrays["model_00000"] + 1
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="c.npz: .*checksum mismatch"):
        checkpoints.load(path)


def test_a_checkpoint_without_checksum_still_loads(tmp_path):
    """Files written before the checksum existed: the same entries, no checksum in the meta."""
    path = tmp_path / "old.npz"
    checkpoint = make()
    arrays = {"model_00000": checkpoint.model[0], "model_00001": checkpoint.model[1],
              "optimizer_00000": checkpoint.optimizer[0], "vocab": np.frombuffer(b"spm", np.uint8),
              "meta": np.array('{"model_config": {"d_model": 8}, "step": 3}')}
    np.savez(path, **arrays)
    loaded = checkpoints.load(path)
    assert loaded.meta == checkpoint.meta and loaded.vocab == b"spm"
    np.testing.assert_array_equal(loaded.model[0], checkpoint.model[0])


@pytest.mark.parametrize("meta,reason", [
    ("[1, 2]", "its meta record is not a JSON object: [1, 2]"),
    ('{"model_config": {"d_model": 8}}', "needs a step number and a model configuration, has "
                                         "step None"),
    ('{"step": "abc", "model_config": {}}', "has step 'abc'"),
    ('{"step": 3}', "has step 3 and model_config None"),
    ('{"step": 3, "model_config": "base"}', "model_config 'base'")])
def test_a_meta_record_without_what_the_commands_read_is_refused_naming_the_file(tmp_path, meta,
                                                                                 reason):
    """Was a TypeError, KeyError or AttributeError inside translate, export or averaging."""
    path = tmp_path / "c.npz"
    np.savez(path, model_00000=np.ones(3, np.float32), meta=np.array(meta))
    with pytest.raises(CheckpointError) as refused:
        checkpoints.load(path)
    assert str(refused.value).startswith(f"{path}: not a readable vtx checkpoint")
    assert reason in str(refused.value)


# A tiny model's configuration (about 1 MB of weights) and a crafted checkpoint of it: one entry
# declaring 512 MiB of zeros, half a megabyte once compressed, and no checksum to find it by.
CRAFTED = """
import json, re, sys, zipfile
import numpy as np
from vtx import checkpoints
path = sys.argv[1]
config = {"vocab_size": 1000, "num_layers": 1, "d_model": 32, "d_ff": 64, "num_heads": 2}
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
    with archive.open(zipfile.ZipInfo("meta.npy"), "w") as entry:  # stored, as vtx writes it
        np.lib.format.write_array(entry, np.array(json.dumps({"step": 1, "model_config": config})))
    with archive.open("model_00000.npy", "w", force_zip64=True) as entry:
        np.lib.format.write_array_header_1_0(entry, {"descr": "<f4", "fortran_order": False,
                                                     "shape": (2**27,)})
        for _ in range(2**9):
            entry.write(bytes(2**20))
try:
    checkpoints.load(path)
    said = "loaded"
except Exception as error:
    said = f"{type(error).__name__}: {error}"
# This process's peak memory (ru_maxrss would hold the parent's, pytest's, across the exec).
peak = re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())
print(json.dumps({"said": said, "peak_kib": int(peak[1])}))
"""


def test_a_crafted_entry_is_refused_before_it_is_unpacked(tmp_path):
    """Each entry is checked before its bytes are inflated: the 512 MiB entry of a 1 MB model,
    compressed, is refused at the memory of a bare Python with numpy (it took 512 MiB and
    loaded, without a checksum to fail)."""
    import json
    import subprocess
    import sys

    path = tmp_path / "crafted.npz"
    done = subprocess.run([sys.executable, "-c", CRAFTED, str(path)], capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["peak_kib"] < 256 * 1024  # far below the entry's 512 MiB
    assert result["said"].startswith(f"CheckpointError: {path}: not a readable vtx checkpoint")
    assert "(model_00000.npy is compressed (zip method 8, " in result["said"]
    assert "bytes declaring 536,871,040); vtx stores its entries uncompressed)" in result["said"]
    assert path.stat().st_size < 2**21


# translate and average-checkpoints on a crafted file, in a process of their own, its peak
# memory measured from after TensorFlow's import (translate's) to after both commands.
COMMANDS_ON = """
import json, re, sys
import tensorflow  # noqa: F401
from vtx_cli.main import main

def peak_kib():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read())[1])

path, output = sys.argv[1:]
before, said = peak_kib(), []
# float32: `auto` would time a bfloat16 product first on a CPU with avx512_bf16, whose operands
# and oneDNN kernels are no part of what the checkpoint costs.
for command in (["translate", "--checkpoint", path, "--precision", "float32"],
                ["average-checkpoints", "--inputs", path, "--output", output]):
    try:
        main(command, standalone_mode=False)
        said.append("ran")
    except Exception as error:
        said.append(str(error))
print(json.dumps({"said": said, "grew_kib": peak_kib() - before}))
"""


def write_inflating_checkpoint(path, model_config, entries, size):
    """A checkpoint declaring `model_config`, whose `entries` each declare `size` bytes of
    float32 zeros, deflated into a few hundred kilobytes, and whose meta has no checksum."""
    import json

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(zipfile.ZipInfo("meta.npy"), "w") as entry:
            np.lib.format.write_array(entry, np.array(json.dumps(
                {"step": 1, "model_config": model_config})))
        for name in entries:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array_header_1_0(entry, {
                    "descr": "<f4", "fortran_order": False, "shape": (size // 4,)})
                for _ in range(size // 2**20):
                    entry.write(bytes(2**20))


def test_a_checkpoint_claiming_a_big_model_costs_no_more_than_its_file(tmp_path):
    """A small file declaring an 800 MB model, whose deflated entries add up to 256 MiB, each
    within what that model allows: translate and average-checkpoints inflated it whole (the
    reporter stopped one at 6.3 GB). Both refuse it before inflating anything."""
    import json
    import subprocess
    import sys

    path = tmp_path / "crafted.npz"
    write_inflating_checkpoint(path, {"vocab_size": 32000, "num_layers": 6, "d_model": 1024,
                                      "d_ff": 4096, "num_heads": 16},
                               ["model_00000", "ema_00000", "optimizer_00000",
                                "optimizer_00001"], 2**26)
    assert path.stat().st_size < 2**22
    done = subprocess.run([sys.executable, "-c", COMMANDS_ON, str(path),
                           str(tmp_path / "average.npz")], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    for said in result["said"]:
        assert said.startswith(f"{path}: not a readable vtx checkpoint"), said
        assert "model_00000.npy is compressed (zip method 8" in said, said
    assert result["grew_kib"] < 32 * 1024  # nothing of the 256 MiB
    assert not (tmp_path / "average.npz").exists()


def test_an_entry_vtx_does_not_write_is_refused_naming_it(tmp_path):
    path = tmp_path / "c.npz"
    np.savez(path, model_00000=np.ones(3, np.float32), extra=np.ones(3, np.float32),
             meta=np.array('{"step": 1, "model_config": {}}'))
    with pytest.raises(CheckpointError, match=f"^{path}: not a readable vtx checkpoint.*"
                                              f"an entry vtx does not write: extra.npy"):
        checkpoints.load(path)


def make_trainer(save_dir, lines) -> Trainer:
    train_config = config.TrainConfig(max_steps=4, save_interval_steps=2, save_interval_minutes=0,
                                      validate_interval_steps=0, warmup_steps=10)
    return Trainer(config.preset("tiny", vocab_size=20, dropout=0.1), train_config, save_dir,
                   log=lines.append)


PAIRS = make_pairs(16, 20)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """A run to step 4 that saved at steps 2 and 4."""
    save_dir = tmp_path_factory.mktemp("uninterrupted")
    make_trainer(save_dir, []).fit(epoch_maker(PAIRS, 4))
    return save_dir


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(
        tmp_path, uninterrupted, damage):
    for step in (2, 4):
        shutil.copy(checkpoints.checkpoint_path(uninterrupted, step), tmp_path)
    newest = checkpoints.checkpoint_path(tmp_path, 4)
    damage(newest)
    lines = []
    trainer = make_trainer(tmp_path, lines)
    trainer.fit(epoch_maker(PAIRS, 4))
    assert any(f"skipped {newest}, renamed to checkpoint_00000004.npz.damaged" in line
               and "damaged" in line.split(": ", 1)[1] for line in lines), lines
    assert f"resumed from {checkpoints.checkpoint_path(tmp_path, 2)} at step 2" in lines
    assert (tmp_path / "checkpoint_00000004.npz.damaged").exists()
    assert trainer.state.step == 4
    reference = checkpoints.load(checkpoints.checkpoint_path(uninterrupted, 4)).model
    for variable, want in zip(trainer.model.variables, reference):
        np.testing.assert_allclose(variable.numpy(), want, atol=1e-5)


def test_resuming_from_a_weights_only_average_says_so_and_how_to_go_on(tmp_path,
                                                                         uninterrupted):
    """An average (no optimizer state) as a save dir's newest checkpoint was refused as
    "variable shapes do not match this model"."""
    from click.testing import CliRunner

    from vtx_cli.main import main

    shutil.copy(checkpoints.checkpoint_path(uninterrupted, 4), tmp_path)
    average = checkpoints.checkpoint_path(tmp_path, 6)
    result = CliRunner().invoke(main, ["average-checkpoints", "--inputs", str(tmp_path),
                                       "--num-last", "1", "--output", str(tmp_path / "a.npz")])
    assert result.exit_code == 0, result.output
    (tmp_path / "a.npz").rename(average)
    with pytest.raises(TrainingError) as refused:
        make_trainer(tmp_path, []).fit(epoch_maker(PAIRS, 4))
    assert str(refused.value) == (
        f"{average} holds weights only, no optimizer state (an average written by `vtx "
        f"average-checkpoints`): a run does not resume from it; start one from its weights with "
        f"`vtx train --finetune-from {average}` and another --save-dir, or move it out of "
        f"{tmp_path}")


def test_out_of_host_memory_reading_a_good_checkpoint_is_not_damage(tmp_path, uninterrupted,
                                                                      monkeypatch):
    """The host's memory running out while a checkpoint is read (big models, a busy host) says
    so, naming the file; a resumed run stops instead of setting the good checkpoint aside and
    going back to an older one. A damaged header declaring more than its entry holds (which
    asks for memory it cannot get) is still damage."""
    shutil.copy(checkpoints.checkpoint_path(uninterrupted, 4), tmp_path)
    newest = checkpoints.checkpoint_path(tmp_path, 4)
    load = np.load

    def no_memory(*args, **kwargs):  # the host's allocator refusing the arrays
        with load(*args, **kwargs) as data:
            data.files  # the directory reads
        raise MemoryError()

    monkeypatch.setattr(np, "load", no_memory)
    with pytest.raises(MemoryError, match=f"^{newest}: out of memory reading it \\([\\d,]+ "
                                          f"bytes\\); free memory or use a machine with more$"):
        checkpoints.load(newest)
    with pytest.raises(MemoryError):
        make_trainer(tmp_path, []).fit(epoch_maker(PAIRS, 4))
    assert newest.exists() and not list(tmp_path.glob("*.damaged"))

    # (np.load still refuses: whether the host would lend 400 GB depends on its overcommit.)
    header = np.lib.format.header_data_from_array_1_0(np.zeros(4, np.float32))
    header["shape"] = (10 ** 11,)  # 400 GB declared, 16 bytes held
    huge = tmp_path / "huge.npz"
    with zipfile.ZipFile(huge, "w") as archive:
        with archive.open("model_00000.npy", "w") as entry:
            np.lib.format.write_array_header_1_0(entry, header)
            entry.write(np.zeros(4, np.float32).tobytes())
    with pytest.raises(CheckpointError, match="huge.npz: not a readable vtx checkpoint"):
        checkpoints.load(huge)


def test_a_checkpoint_set_aside_by_the_chief_after_this_worker_listed_it_is_skipped(
        tmp_path, uninterrupted, monkeypatch):
    """Workers sharing a save dir list the checkpoints at once; the chief renames a damaged one
    (`_set_aside`) and may do so after a non-chief listed it and before that one opened it. The
    non-chief tries the one before, as the chief does, instead of ending on FileNotFoundError
    (and its peers with it)."""
    for step in (2, 4):
        shutil.copy(checkpoints.checkpoint_path(uninterrupted, step), tmp_path)
    newest = checkpoints.checkpoint_path(tmp_path, 4)
    load = checkpoints.load

    def chief_renames_first(path):
        if path == newest and path.exists():
            checkpoints.set_aside(path)  # what the chief does, between listing and opening
        return load(path)

    monkeypatch.setattr(checkpoints, "load", chief_renames_first)
    lines = []
    trainer = make_trainer(tmp_path, lines)
    checkpointer = trainer.checkpointer
    checkpointer.topology = dataclasses.replace(checkpointer.topology, is_chief=False)
    trainer.resume()
    assert (f"skipped {newest}: it was set aside or removed meanwhile (by the chief?), trying "
            f"the one before") in lines
    assert f"resumed from {checkpoints.checkpoint_path(tmp_path, 2)} at step 2" in lines
    assert trainer.state.step == 2
    assert checkpointer.resumed_from == checkpoints.checkpoint_path(tmp_path, 2)


def test_a_save_dir_whose_best_loads_is_not_started_over_when_no_numbered_checkpoint_does(
        tmp_path):
    """Every numbered checkpoint damaged: starting over from step 0 would replace the intact
    checkpoint_best with its first validation's, a worse model. The run is refused, naming the
    best and how to go on, and checkpoint_best is left as it was. A damaged checkpoint_best is
    said, whether the run resumes or starts over."""
    lines = []
    train_config = config.TrainConfig(max_steps=4, save_interval_steps=2, save_interval_minutes=0,
                                      validate_interval_steps=2, warmup_steps=10)
    valid = epoch_maker(make_pairs(8, 20, seed=9), 4)(0, 0)
    Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
            log=lines.append).fit(epoch_maker(PAIRS, 4), lambda: valid)
    best = tmp_path / checkpoints.BEST_NAME
    kept = best.read_bytes()
    newest = checkpoints.list_checkpoints(tmp_path)[-1]
    kept_newest = tmp_path.parent / f"{tmp_path.name}-newest.npz"
    shutil.copy(newest, kept_newest)
    for path in checkpoints.list_checkpoints(tmp_path):
        truncate(path)
    again = Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
                    log=lines.append)
    with pytest.raises(TrainingError) as refused:
        again.fit(epoch_maker(PAIRS, 4), lambda: valid)
    meta = checkpoints.load(best).meta
    assert str(refused.value) == (
        f"no numbered checkpoint of {tmp_path} loads, but its checkpoint_best.npz (step "
        f"{meta['step']}, validation loss {meta['best_valid']:.3f}) does: starting over from "
        f"step 0 would replace it with a worse model; train in another --save-dir (copy "
        f"checkpoint_best.npz out first to keep it; --finetune-from {best} there trains on "
        f"from its weights, with a fresh optimizer and schedule), or move checkpoint_best.npz "
        f"out of {tmp_path} to start over here")
    assert best.read_bytes() == kept and again.state.step == 0
    # A damaged best beside a numbered checkpoint that loads is said when resumed.
    shutil.copy(kept_newest, newest)
    truncate(best)
    lines.clear()
    Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
            log=lines.append).resume()
    assert f"warning: {best} does not load (damaged): this run's next best validation " \
           f"replaces it" in lines
    newest.unlink()
    # A damaged best is no model to keep: said, and the run starts over.
    lines.clear()
    Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
            log=lines.append).fit(epoch_maker(PAIRS, 4), lambda: valid)
    assert any(line.startswith(f"warning: {best} does not load (") for line in lines), lines
    assert checkpoints.load(best).meta["step"] in (2, 4)
