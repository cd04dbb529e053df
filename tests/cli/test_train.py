import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.in_process import vtx_in_process
from tests.cli.stderr import TENSORFLOW_LINE
from vtx import checkpoints

VTX = str(Path(sys.executable).with_name("vtx"))
SMALL = ["--arch", "tiny", "--max-tokens", "512", "--warmup-steps", "20", "--log-interval-steps",
         "5", "--validate-interval-steps", "10", "--save-interval-minutes", "0"]


def vtx(*args, timeout=300):
    return subprocess.run([VTX, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def vtx_here(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return vtx_in_process(*args, stdin=stdin, text=True)


@pytest.mark.slow
def test_preprocess_train_average_translate_end_to_end(multi30k_small, tmp_path):
    data, save = multi30k_small / "data", tmp_path / "run"
    result = vtx_here("train", data, "--save-dir", save, "--max-steps", 20,
                      "--save-interval-steps", 5, *SMALL)
    assert result.returncode == 0, result.stderr
    progress = [l for l in result.stderr.splitlines() if l.startswith("step ")]
    assert progress and all(k in progress[-1] for k in ("loss", "ppl", "lr", "tok/s", "eta"))
    assert any(l.startswith("valid step 20") for l in result.stderr.splitlines())
    saved = json.loads((save / "config.json").read_text())
    assert saved["model"]["num_layers"] == 2 and saved["train"]["max_tokens"] == 512
    assert [p.name for p in checkpoints.list_checkpoints(save)][-1] == "checkpoint_00000020.npz"
    assert (save / "learning_curve.png").exists() and (save / "checkpoint_best.npz").exists()
    record = (save / "config.json").read_bytes()
    result = vtx_here("train", data, "--save-dir", save, "--max-steps", 20, "--seed", 7, *SMALL)
    assert result.returncode == 0 and "nothing to train: step 20" in result.stderr, result.stderr
    assert (save / "config.json").read_bytes() == record  # the trained run's, not --seed 7

    result = vtx_here("average-checkpoints", "--inputs", save, "--num-last", 3,
                      "--output", save / "avg.npz")
    assert result.returncode == 0, result.stderr
    result = subprocess.run([VTX, "translate", "--checkpoint", save / "avg.npz"],
                            input="A dog runs.\nTwo men.\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2


def test_sigterm_saves_a_checkpoint_then_exits(multi30k_small, tmp_path):
    save = tmp_path / "run"
    process = subprocess.Popen([VTX, "train", str(multi30k_small / "data"), "--save-dir",
                                str(save), "--max-steps", "100000", *SMALL],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not (save / "history.jsonl").exists() and time.time() < deadline:
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "received signal" in stderr
    saved = checkpoints.list_checkpoints(save)
    assert saved and 0 < checkpoints.load(saved[-1]).meta["step"] < 100000


# `vtx train ARGS...` with a Ctrl-C (SIGINT raised in this process) at the start of the function
# argv[1] names ("module:attribute.path"): at a known point of the start, not at a moment.
INTERRUPTED_AT = """
import importlib, signal, sys

module, _, attribute = sys.argv[1].partition(":")
owner = importlib.import_module(module)
*path, name = attribute.split(".")
for part in path:
    owner = getattr(owner, part)
original = getattr(owner, name)

def interrupted(*args, **kwargs):
    signal.raise_signal(signal.SIGINT)
    return original(*args, **kwargs)

setattr(owner, name, interrupted)
from vtx_cli.main import main
main(sys.argv[2:], prog_name="vtx")
"""


@pytest.mark.parametrize("at", ["vtx.data.directory:load_meta",  # reading the data directory
                                "vtx.training.trainer:Trainer.resume"])  # the model built
def test_ctrl_c_before_training_starts_exits_130_saying_so(multi30k_small, tmp_path, at):
    """Ctrl-C before the training loop takes SIGINT over exits 130 with one line, as it does once
    training has started (where it saves first), not as click's "Aborted!", exit 1."""
    save = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_AT, at, "train",
                             str(multi30k_small / "data"), "--save-dir", str(save),
                             "--max-steps", "5", *SMALL], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "interrupted (SIGINT) before training started: nothing trained, no checkpoint to write")
    assert "Aborted!" not in result.stderr and "Traceback" not in result.stderr
    assert not save.exists()


def test_the_help_says_what_0_means_for_every_flag_that_takes_it():
    """0 turns a cadence, a limit or a budget off, or keeps all: said by each flag's help (the
    save and validation intervals said nothing). --log-interval-steps refuses 0."""
    from vtx_cli.train import train

    helps = {param.opts[0]: param.help for param in train.params}
    for flag, said in (("--save-interval-minutes", "(0: none by the clock; a run also saves at "
                                                   "its end, on a stop signal and at each new "
                                                   "best validation)"),
                       ("--save-interval-steps", "(0: none by the step count)"),
                       ("--validate-interval-steps", "(0: never, so no checkpoint_best; "),
                       ("--keep-last", "(0: all)"), ("--patience", "(0: never)"),
                       ("--max-minutes", "(0: no budget)")):
        assert said in (helps[flag] or ""), (flag, helps[flag])
    result = vtx("train", "--help")
    assert "(0: none by the step count)" in " ".join(result.stdout.split())
    assert "0 is not in the range x>=1" in vtx("train", "--log-interval-steps", 0).stderr


@pytest.mark.parametrize("value,item", [(",", "item 1 of 2"), ("/cpu:0,", "item 2 of 2"),
                                        (" ,/cpu:0", "item 1 of 2"),
                                        ("/cpu:0,,/cpu:1", "item 2 of 3")])
def test_an_empty_item_of_devices_is_a_usage_error_naming_it(value, item):
    """It was refused only when training set up, exit 1: "'' is not a device of this process"."""
    result = vtx("train", "--arch", "tiny", "--devices", value)
    assert result.returncode == 2, result.stderr
    assert f"Invalid value for '--devices': {value!r}: {item} is empty" in result.stderr


def test_devices_naming_each_device_passes_the_flag_check():
    from vtx_cli.train import _device_names

    assert _device_names(None, None, "/cpu:0") == ["/cpu:0"]
    assert _device_names(None, None, "/gpu:0,/gpu:1") == ["/gpu:0", "/gpu:1"]
    assert _device_names(None, None, None) is None


def test_missing_data_dir_or_save_dir_is_a_usage_error(tmp_path):
    result = vtx("train", "--arch", "tiny")
    assert result.returncode == 2
    assert "DATA_DIR and --save-dir are required" in result.stderr


def test_a_directory_that_is_not_preprocessed_is_named_in_the_error(tmp_path):
    result = vtx_here("train", tmp_path, "--save-dir", tmp_path / "s", "--arch", "tiny")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"Error: {tmp_path}/meta.json not found" in result.stderr


def test_changing_the_model_on_an_existing_save_dir_is_refused(multi30k_small, tmp_path):
    save = tmp_path / "run"
    assert vtx_here("train", multi30k_small / "data", "--save-dir", save, "--max-steps", 1,
                    *SMALL).returncode == 0
    result = vtx_here("train", multi30k_small / "data", "--save-dir", save, "--max-steps", 2,
                      "--d-ff", 64, *SMALL)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert (f"{save / 'config.json'} holds a different architecture (d_ff 128, expected 64); "
            f"use a new --save-dir or the same model flags") in result.stderr


@pytest.mark.slow
def test_jit_compiles_every_batch_shape_first_and_keeps_the_programs(multi30k_small, tmp_path):
    cache, save = tmp_path / "xla", tmp_path / "run"
    # One layer: XLA compiles it in about half the time of tiny's two; nothing checked here
    # depends on the depth.
    result = vtx("train", multi30k_small / "data", "--arch", "tiny", "--layers", 1,
                 "--save-dir", save, "--max-steps", 2, "--max-tokens", 256,
                 "--precision", "float32", "--jit", "--no-pack", "--max-shapes", 3,
                 "--xla-cache-dir", cache, "--validate-interval-steps", 0, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    shapes = next(line for line in result.stderr.splitlines() if line.startswith("batch shapes"))
    count = len(shapes.split(": ")[1].split(", "))
    assert 1 < count <= 3, shapes
    compiled = [line for line in result.stderr.splitlines() if line.startswith("compiled the ")]
    assert len(compiled) == count and f"shape {count}/{count}" in compiled[-1]
    assert result.stderr.index(compiled[-1]) < result.stderr.index("step 2/2")
    assert f"compiled {count} batch shapes in " in result.stderr  # the total, said once
    kept = sorted(cache.glob("xla_compile_cache_*"))
    assert kept, "no compiled program was kept"  # the flag set before TensorFlow read it
    assert not [line for line in result.stderr.splitlines() if TENSORFLOW_LINE.match(line)]
    # Resumed, the run finds every program in the cache (same names and HLO): none is added.
    resumed = vtx("train", multi30k_small / "data", "--arch", "tiny", "--layers", 1,
                  "--save-dir", save, "--max-steps", 3, "--max-tokens", 256,
                  "--precision", "float32", "--jit", "--no-pack", "--max-shapes", 3,
                  "--xla-cache-dir", cache, "--validate-interval-steps", 0, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step 3/3" in resumed.stderr
    assert sorted(cache.glob("xla_compile_cache_*")) == kept, "a resumed run compiled again"
    refused = vtx("train", multi30k_small / "data", "--arch", "tiny", "--save-dir", save,
                  "--xla-cache-dir", cache)
    assert refused.returncode == 2 and "--xla-cache-dir goes with --jit" in refused.stderr
    # A cache TensorFlow could not write into is refused before training, not at its compile.
    refused = vtx("train", multi30k_small / "data", "--arch", "tiny", "--save-dir", save, "--jit",
                  "--xla-cache-dir", save / "config.json" / "xla")
    assert refused.returncode == 2
    assert (f"Invalid value for '--xla-cache-dir': {save / 'config.json' / 'xla'}: "
            f"{save / 'config.json'} is not a directory") in refused.stderr


@pytest.mark.slow
def test_a_resumed_run_keeps_the_batch_lengths_its_checkpoint_was_trained_on(multi30k_small,
                                                                             tmp_path):
    from vtx.data import pipeline
    from vtx.training.compiling import format_shape

    data, save = multi30k_small / "data", tmp_path / "run"

    def shapes_line(stderr):
        return next(line for line in stderr.splitlines() if line.startswith("batch shapes"))

    first = vtx_here("train", data, "--save-dir", save, "--max-steps", 1, *SMALL)
    assert first.returncode == 0, first.stderr[-3000:]
    # Without XLA the lengths take any value (one traced program runs every shape).
    lengths = pipeline.bucket_boundaries_for(data, ("train", "valid"),
                                             **pipeline.shape_policy(False), max_tokens=512)
    assert any(length % 8 for length in lengths)
    fill = pipeline.position_fill(data, "train", 512, lengths,
                                  pipeline.side_lengths_for(data, ("train", "valid"), lengths))
    assert f"padding: {fill:.3f} of the training batches' positions hold a real token " \
           f"({len(lengths)} shapes" in first.stderr
    newest = checkpoints.list_checkpoints(save)[-1]
    assert checkpoints.load(newest).meta["bucket_boundaries"] == lengths
    resumed = vtx_here("train", data, "--save-dir", save, "--max-steps", 2, *SMALL)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert shapes_line(resumed.stderr) == shapes_line(first.stderr)
    assert "kept from the checkpoint" not in resumed.stderr
    # Fewer lengths asked for on resume: the checkpoint's are kept, the new ones only named.
    fewer = pipeline.bucket_boundaries_for(data, ("train", "valid"),
                                           **pipeline.shape_policy(False, 2), max_tokens=512)
    assert len(fewer) == 2
    asked = vtx_here("train", data, "--save-dir", save, "--max-steps", 2, "--max-shapes", 2,
                     *SMALL)
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert f"(a new run with these flags would use {fewer})" in asked.stderr
    assert shapes_line(asked.stderr) == shapes_line(first.stderr)

    # A checkpoint from before the lengths were recorded was trained on 8 multiples of 8: its
    # data position only means the same batches with those.
    old = checkpoints.load(checkpoints.list_checkpoints(save)[-1])
    del old.meta["bucket_boundaries"]
    checkpoints.save(checkpoints.list_checkpoints(save)[-1], old)
    legacy = vtx_here("train", data, "--save-dir", save, "--max-steps", 3, *SMALL)
    assert legacy.returncode == 0, legacy.stderr[-3000:]
    multiples = pipeline.bucket_boundaries_for(data, ("train", "valid"))
    assert f"batch lengths kept from the checkpoint so that the data resumes where it was: " \
           f"{multiples}" in legacy.stderr
    assert all(length % 8 == 0 for length in multiples)
    sides = pipeline.side_lengths_for(data, ("train", "valid"), multiples)
    assert shapes_line(legacy.stderr) == "batch shapes (rows x length, or rows x source x " \
        "target), training and validation: " + ", ".join(
            format_shape(shape) for shape in pipeline.batch_shapes(512, multiples, sides))
    assert checkpoints.load(checkpoints.list_checkpoints(save)[-1]).meta[
        "bucket_boundaries"] == multiples


@pytest.mark.slow
def test_packed_training_resumes_on_the_same_batches_and_compiles_one_shape(multi30k_small,
                                                                           tmp_path):
    """`--pack`: one batch shape (one compiled program with --jit); a resumed run keeps packing
    whatever its flags say, and ends where an uninterrupted one does."""
    from vtx.data import packing

    data = multi30k_small / "data"
    common = ["--arch", "tiny", "--max-tokens", "512", "--warmup-steps", "20",
              "--validate-interval-steps", "0", "--save-interval-minutes", "0",
              "--precision", "float32", "--dropout", "0.1"]
    straight = vtx_here("train", data, "--save-dir", tmp_path / "straight", "--max-steps", 6,
                        "--pack", *common)
    assert straight.returncode == 0, straight.stderr[-3000:]
    from vtx.training.compiling import format_shape

    said = next(line for line in straight.stderr.splitlines()
                if line.startswith("training batches packed (--pack/--no-pack choose)"))
    shapes = [tuple(int(n) for n in shape.split("x"))
              for shape in said.split("packed rows ")[1].split(" cost ")[0].split(" + ")]
    fill = packing.packed_fill(data, shapes, seed=1)
    assert f"training batches packed, several pairs a row: " \
           f"{', '.join(format_shape(shape) for shape in shapes)}; " \
           f"{fill:.3f} of their positions hold a real token" in straight.stderr
    save = tmp_path / "resumed"
    first = vtx_here("train", data, "--save-dir", save, "--max-steps", 3, "--pack", *common)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = vtx_here("train", data, "--save-dir", save, "--max-steps", 6, *common)  # no --pack
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"training batches kept as the checkpoint's so that the data resumes where it was: " \
           f"packed rows {' + '.join(format_shape(shape) for shape in shapes)} (a new run with " \
           f"these flags would use buckets)" in resumed.stderr
    ends = [checkpoints.load(checkpoints.list_checkpoints(run)[-1])
            for run in (tmp_path / "straight", save)]
    assert [end.meta["step"] for end in ends] == [6, 6]
    assert ends[1].meta["packed_shapes"] == [list(shape) for shape in shapes]
    for a, b in zip(ends[0].model, ends[1].model):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # One layer: XLA compiles it in about half the time of the preset's two.
    jit = vtx("train", data, "--save-dir", tmp_path / "jit", "--max-steps", 1, "--jit", *common,
              "--d-model", 256, "--layers", 1, timeout=900)
    assert jit.returncode == 0, jit.stderr[-3000:]
    # Packed by default with --jit where the rows cost fewer FLOPs (estimated): at width 256
    # the attention over a packed row's length weighs little beside the matrix products.
    said = next(line for line in jit.stderr.splitlines()
                if line.startswith("training batches packed (--pack/--no-pack choose)"))
    assert " cost 0." in said
    shapes = said.split("packed rows ")[1].split(" cost ")[0].split(" + ")
    compiled = {line.split("(")[1].split(")")[0] for line in jit.stderr.splitlines()
                if line.startswith("compiled the update for batch shape ")}
    assert compiled == set(shapes)  # its shapes, and no bucket's


@pytest.mark.slow
def test_profile_traces_the_updates_named_and_says_where(multi30k_small, tmp_path):
    """`--profile FIRST:LAST` writes a TensorFlow profiler trace that TensorBoard's profile
    plugin reads; a run that stops before LAST writes what it traced and says so."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import xplane_summary

    data, save = multi30k_small / "data", tmp_path / "run"
    result = vtx("train", data, "--save-dir", save, "--max-steps", 5, "--profile", "2:3", *SMALL)
    assert result.returncode == 0, result.stderr
    assert "profiling updates 2-3 into " + str(save / "profile") in result.stderr
    assert "profile of updates 2-3 written under " + str(save / "profile") in result.stderr
    traces = list((save / "profile" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1
    where, events = xplane_summary.load_trace(save / "profile")
    assert any("update" in event.name for event in events), where  # the update's program ran

    result = vtx("train", data, "--save-dir", save, "--max-steps", 7, "--profile", "7:20",
                 "--tensorboard-dir", tmp_path / "tb", *SMALL)
    assert result.returncode == 0, result.stderr
    assert ("profile of updates 7-7 (the run stopped at step 7) written under "
            + str(tmp_path / "tb")) in result.stderr
    assert len(list((tmp_path / "tb" / "plugins" / "profile").glob("*/*.xplane.pb"))) == 1


@pytest.mark.parametrize("value", ["3:2", "0:4", "a:b", "5:", "", "1:2:3"])
def test_a_bad_profile_range_is_a_usage_error_naming_it(value):
    result = vtx("train", "--arch", "tiny", "--profile", value)
    assert result.returncode == 2, result.stderr
    assert f"Invalid value for '--profile': {value!r}" in result.stderr


def test_a_profile_range_that_could_trace_nothing_is_refused_at_once(tmp_path):
    """Not silence at the end (FIRST past --max-steps), nor a failure at update FIRST, unsaved
    (the trace's folder not creatable)."""
    result = vtx("train", tmp_path, "--save-dir", tmp_path / "run", "--max-steps", 5,
                 "--profile", "20:30")
    assert result.returncode == 2, result.stderr
    assert ("Invalid value for '--profile': 20:30: update 20 is past --max-steps 5"
            in result.stderr)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "profile").write_text("")
    result = vtx("train", tmp_path, "--save-dir", tmp_path / "run", "--max-steps", 5,
                 "--profile", "2:3")
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--profile': the trace's folder " in result.stderr
    assert "is not a directory" in result.stderr


def test_finetune_from_takes_the_checkpoints_model_and_refuses_another_arch(multi30k_small,
                                                                             tmp_path):
    data, flags = multi30k_small / "data", SMALL[2:]  # without --arch tiny
    first = vtx_here("train", data, "--save-dir", tmp_path / "a", "--max-steps", 1, *SMALL)
    assert first.returncode == 0, first.stderr
    # The model by its shape; the preset's name alone would read as the paper's model of it.
    assert re.search(r"model: 2 layers, d_model 64, d_ff 128, 4 heads, [\d,]+ parameters "
                     r"\(from preset tiny\); ", first.stderr), first.stderr
    # The vocabulary a fine-tune preprocesses its data with, said last by train and by
    # average-checkpoints (through the save dir's config.json).
    said = (f"vocabulary: {(data / 'spm.model').resolve()} (for --finetune-from: vtx preprocess "
            f"--spm-model it)")
    assert first.stderr.splitlines()[-1] == said, first.stderr
    averaged = vtx_here("average-checkpoints", "--inputs", tmp_path / "a", "--num-last", 1,
                        "--output", tmp_path / "avg.npz")
    assert averaged.returncode == 0 and averaged.stderr.splitlines()[-1] == said, averaged.stderr
    start = checkpoints.checkpoint_path(tmp_path / "a", 1)
    result = vtx_here("train", data, "--save-dir", tmp_path / "b", "--max-steps", 1,
                      "--finetune-from", start, *flags)
    assert result.returncode == 0, result.stderr
    assert f" parameters (fine-tuned from {start}); " in result.stderr
    saved = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (saved["arch"], saved["finetuned_from"]) == (None, str(start))
    result = vtx_here("train", data, "--save-dir", tmp_path / "c", "--max-steps", 1,
                      "--finetune-from", start, "--arch", "big", *flags)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (f"Error: --arch big (num_layers 6, d_model 1024, d_ff 4096, num_heads 16) is not the "
            f"model of --finetune-from {start} (num_layers 2, d_model 64") in result.stderr
    result = vtx_here("train", data, "--finetune-from", start, "--dry-run")
    assert result.returncode == 2 and "--dry-run builds a preset's model" in result.stderr


def test_ema_decay_keeps_an_average_that_translate_ema_decodes_with(multi30k_small, tmp_path):
    save = tmp_path / "run"
    result = vtx_here("train", multi30k_small / "data", "--save-dir", save, "--max-steps", 2,
                      "--ema-decay", 0.5, "--validate-with-ema", *SMALL[:-4],
                      "--validate-interval-steps", 2, "--save-interval-minutes", 0)
    assert result.returncode == 0, result.stderr
    saved = checkpoints.load(checkpoints.checkpoint_path(save, 2))
    assert saved.ema is not None and saved.meta["train_config"]["ema_decay"] == 0.5
    assert any(not np.array_equal(a, b) for a, b in zip(saved.ema, saved.model))
    result = vtx_here("translate", "--checkpoint", save, "--ema", "--beam", "1",
                      stdin=b"A dog runs.\n")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("flag", [["--ema-start-step", "5"], ["--validate-with-ema"]])
def test_ema_flags_without_ema_decay_are_usage_errors(multi30k_small, tmp_path, flag):
    result = vtx_here("train", multi30k_small / "data", "--save-dir", tmp_path / "run", *flag)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{flag[0]} goes with --ema-decay (the average it acts on)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_subword_alpha_trains_two_epochs_and_an_older_data_dir_is_refused(multi30k_small,
                                                                          tmp_path):
    """`vtx train --subword-alpha 0.1` on a tiny corpus preprocessed with --keep-train-text
    samples each epoch anew; a data directory without the text is refused naming it and the
    flag that keeps it, --subword-nbest with a BPE vocabulary naming the flag."""
    root, data = multi30k_small, tmp_path / "data"
    result = vtx("preprocess", "-s", "en", "-t", "de", "--trainpref", root / "train",
                 "--validpref", root / "val", "--destdir", data, "--vocab-size", 1000,
                 "--keep-train-text")
    assert result.returncode == 0, result.stderr
    save = tmp_path / "run"
    result = vtx_here("train", data, "--save-dir", save, "--subword-alpha", 0.1, "--max-steps", 30,
                      *SMALL[:2], "--max-tokens", 8192, *SMALL[4:])
    assert result.returncode == 0, result.stderr
    for epoch in (0, 1):
        assert f"subword sampling: epoch {epoch} segmented anew" in result.stderr
    assert json.loads((save / "config.json").read_text())["train"]["subword_alpha"] == 0.1

    older = multi30k_small / "data"
    result = vtx_here("train", older, "--save-dir", tmp_path / "older", "--subword-alpha", 0.1,
                      *SMALL)
    assert result.returncode == 1
    assert (f"Error: {older} keeps no text of its training pairs" in result.stderr
            and "run `vtx preprocess` again with --keep-train-text" in result.stderr)
    result = vtx_here("train", data, "--save-dir", tmp_path / "nbest", "--subword-alpha", 0.1,
                      "--subword-nbest", 4, *SMALL)
    assert result.returncode == 1
    assert "Error: --subword-nbest 4 goes with a unigram vocabulary" in result.stderr


def test_save_interval_steps_numbers_only_its_multiples_and_a_best_between_is_best_only(
        multi30k_small, tmp_path):
    # The paper's averaging window in updates: the numbered checkpoints average-checkpoints
    # takes are the cadence's (and the run's end), never a new best between them.
    flags = [*SMALL[:-4], "--validate-interval-steps", "5", "--save-interval-minutes", "0",
             "--save-interval-steps", "15", "--max-steps", "40"]
    result = vtx_here("train", multi30k_small / "data", "--save-dir", tmp_path, *flags)
    assert result.returncode == 0, result.stderr
    kept = [int(checkpoints.read_meta(path)["step"])
            for path in checkpoints.list_checkpoints(tmp_path)]
    assert kept == [15, 30, 40]
    best = int(checkpoints.read_meta(tmp_path / checkpoints.BEST_NAME)["step"])
    assert best % 5 == 0 and 5 <= best <= 40
