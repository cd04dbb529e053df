"""Faults and bad input at the command line: a one-line error naming the file or flag, exit 1, no
traceback, and nothing written or clobbered."""

import contextlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import TOY_MODEL, toy_weights
from tests.data.conftest import small_corpus  # noqa: F401  (a fixture)
from vtx import checkpoints, manifest
from vtx.checkpoints import Checkpoint
from vtx_cli.main import main


def invoke(*args, stdin=""):
    return CliRunner().invoke(main, [str(a) for a in args], input=stdin)


def assert_one_line_error(result, *fragments):
    """Exit 1 with a single `Error: ...` line holding every fragment (no traceback)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not an uncaught error
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


def write(path, step, value=1.0):
    checkpoints.save(path, Checkpoint(model=toy_weights([np.full((300,), value, np.float32)]),
                                      optimizer=[], meta={"step": step, "model_config": TOY_MODEL},
                                      vocab=b"x"))


def truncate(path):
    path.write_bytes(path.read_bytes()[:-200])


@pytest.fixture
def save_dir_with_damaged_newest(tmp_path):
    save_dir = tmp_path / "run"
    save_dir.mkdir()
    for step in (1, 2, 3):
        write(checkpoints.checkpoint_path(save_dir, step), step)
    truncate(checkpoints.checkpoint_path(save_dir, 3))
    return save_dir


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_decoding_from_a_damaged_checkpoint_names_it(save_dir_with_damaged_newest, command):
    damaged = checkpoints.checkpoint_path(save_dir_with_damaged_newest, 3)
    for checkpoint in (damaged, save_dir_with_damaged_newest):  # the file, or its save dir
        result = invoke(command, "--checkpoint", checkpoint, stdin="a dog\n")
        assert_one_line_error(result, f"{damaged}: not a readable vtx checkpoint, damaged")


def test_averaging_a_damaged_checkpoint_names_it_and_writes_nothing(save_dir_with_damaged_newest):
    output = save_dir_with_damaged_newest / "averaged.npz"
    result = invoke("average-checkpoints", "--inputs", save_dir_with_damaged_newest,
                    "--num-last", 2, "--output", output)
    damaged = checkpoints.checkpoint_path(save_dir_with_damaged_newest, 3)
    assert_one_line_error(result, f"{damaged}: not a readable vtx checkpoint, damaged")
    assert not output.exists()


TRAIN = ["--arch", "tiny", "--max-tokens", "512", "--warmup-steps", "20", "--precision",
         "float32", "--validate-interval-steps", "0", "--save-interval-minutes", "0"]


def test_a_refused_run_writes_nothing_so_the_right_one_resumes(multi30k_small, tmp_path):
    """Checkpoints without config.json: a wrong model is refused without writing a config.json
    that would then refuse the right model."""
    data, save = multi30k_small / "data", tmp_path / "run"
    assert invoke("train", data, "--save-dir", save, "--max-steps", 1, *TRAIN).exit_code == 0
    (save / "config.json").unlink()
    before = sorted(p.name for p in save.iterdir())
    result = invoke("train", data, "--save-dir", save, "--max-steps", 2, "--d-ff", 64, *TRAIN)
    assert_one_line_error(result, "checkpoint_00000001.npz holds a different architecture")
    assert sorted(p.name for p in save.iterdir()) == before
    result = invoke("train", data, "--save-dir", save, "--max-steps", 2, *TRAIN)
    assert result.exit_code == 0, result.output
    assert f"resumed from {save / 'checkpoint_00000001.npz'} at step 1" in result.output


def test_resuming_on_a_data_directory_of_another_vocabulary_is_refused(multi30k_small,
                                                                      tmp_path):
    # Of the same size, the checkpoint loaded and trained on, each embedding read as another
    # piece's, and wrote the new vocabulary into the next checkpoint: nothing could tell after.
    data, save = multi30k_small / "data", tmp_path / "run"
    assert invoke("train", data, "--save-dir", save, "--max-steps", 1, *TRAIN).exit_code == 0
    before = {p.name: p.read_bytes() for p in save.iterdir() if p.is_file()}

    def preprocessed(name, *flags):
        assert invoke("preprocess", "--source-lang", "en", "--target-lang", "de",
                      "--trainpref", multi30k_small / "train", "--validpref",
                      multi30k_small / "val", "--destdir", tmp_path / name, "--vocab-size",
                      1000, *flags).exit_code == 0
        return tmp_path / name

    other = preprocessed("unigram", "--model-type", "unigram")
    result = invoke("train", other, "--save-dir", save, "--max-steps", 2, *TRAIN)
    assert_one_line_error(result, f"{save / 'checkpoint_00000001.npz'} was trained on another "
                                  "vocabulary than this run's data directory's spm.model: ",
                          "ids name other pieces (id ")
    assert {p.name: p.read_bytes() for p in save.iterdir() if p.is_file()} == before
    again = preprocessed("again")  # the same text and flags: the same vocabulary, resumed
    result = invoke("train", again, "--save-dir", save, "--max-steps", 2, *TRAIN)
    assert result.exit_code == 0, result.output
    assert f"resumed from {save / 'checkpoint_00000001.npz'} at step 1" in result.output


def test_a_refused_max_tokens_creates_no_save_dir(multi30k_small, tmp_path):
    result = invoke("train", multi30k_small / "data", "--save-dir", tmp_path / "run",
                    *TRAIN, "--max-tokens", 8)
    # The flag, not the library's argument (was "max_tokens 8 ...; raise max_tokens to ...").
    assert_one_line_error(result, "train split", "--max-tokens 8 cannot hold the longest pair",
                          "; raise --max-tokens to at least ")
    assert not (tmp_path / "run").exists()


def test_a_save_dir_in_the_data_directory_is_refused(multi30k_small, tmp_path):
    """`vtx preprocess --force` replaces the data directory whole: checkpoints kept there were
    deleted with it."""
    data = multi30k_small / "data"
    before = sorted(p.name for p in data.iterdir())
    for save, said in ((data, f"--save-dir {data} is the data directory {data}"),
                       (data / "runs" / "a", f"is inside the data directory {data}")):
        result = invoke("train", data, "--save-dir", save, *TRAIN, "--max-steps", 1)
        assert_one_line_error(result, said, "`vtx preprocess --force` there would delete")
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_task_metric_without_validations_names_its_flag(multi30k_small, tmp_path):
    result = invoke("train", multi30k_small / "data", "--save-dir", tmp_path / "run", *TRAIN,
                    "--eval-bleu")  # TRAIN: --validate-interval-steps 0
    assert_one_line_error(result, "--eval-bleu: bleu at each validation needs a validation "
                                  "split in ", "--validate-interval-steps above 0 (now 0)")
    assert not (tmp_path / "run").exists()


def test_a_model_width_not_divisible_by_the_heads_names_both_flags(multi30k_small, tmp_path):
    result = invoke("train", multi30k_small / "data", "--save-dir", tmp_path / "run", *TRAIN,
                    "--d-model", 10, "--heads", 3)
    assert_one_line_error(result, "--d-model (10) must be divisible by --heads (3)")
    assert not (tmp_path / "run").exists()
    result = invoke("train", "--arch", "tiny", "--d-model", 10, "--heads", 3, "--dry-run")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "Error: --d-model (10) must be divisible by --heads (3)" in result.output


def test_a_device_tensorflow_does_not_see_is_refused_before_anything_is_written(
        multi30k_small, tmp_path):
    for devices, said in [("/gpu:99", "--devices: '/gpu:99' is not a device TensorFlow sees "
                                      "here"),
                          ("/cpu:0,cpu:0", "--devices names 'cpu:0' twice")]:
        result = invoke("train", multi30k_small / "data", "--save-dir", tmp_path / "run",
                        *TRAIN, "--devices", devices)
        assert_one_line_error(result, said)
    assert not (tmp_path / "run").exists()


def test_an_empty_devices_is_refused_naming_the_flag_not_taken_for_every_device(tmp_path):
    """`--devices ""` named no device and trained on the default ones, every GPU, in silence."""
    for devices in ("", " "):
        result = invoke("train", tmp_path / "data", "--save-dir", tmp_path / "run", *TRAIN,
                        "--devices", devices)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert (f"Invalid value for '--devices': {devices!r} names no device: name some, such "
                f"as /gpu:0,/gpu:1, or leave --devices out" in result.output), result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("flag", ["--save-dir", "--tensorboard-dir"])
def test_a_folder_that_cannot_be_made_is_refused_at_start_naming_its_flag(multi30k_small, tmp_path,
                                                                          flag):
    # Found only at the first checkpoint or log line before: an OSError without the flag, or
    # TensorFlow's NotFoundError traceback. /proc refuses new folders even to root (the CI's user).
    folders = {"--save-dir": tmp_path / "run", "--tensorboard-dir": tmp_path / "tb",
               flag: "/proc/x/y"}
    result = invoke("train", multi30k_small / "data", "--save-dir", folders["--save-dir"],
                    "--tensorboard-dir", folders["--tensorboard-dir"], *TRAIN)
    assert result.exit_code == 2, result.output
    assert (f"Invalid value for '{flag}': /proc/x/y: nothing can be created in /proc ("
            in result.output), result.output
    assert not any(tmp_path.iterdir())


def test_a_data_directory_without_a_validation_split_is_said_to_validate_nothing(
        multi30k_small, tmp_path):
    data = tmp_path / "data"
    assert invoke("preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref",
                  multi30k_small / "train", "--destdir", data, "--vocab-size", 1000).exit_code == 0
    result = invoke("train", data, "--save-dir", tmp_path / "run", "--max-steps", 1, *TRAIN,
                    "--validate-interval-steps", 1)
    assert result.exit_code == 0, result.output
    assert (f"warning: {data} has no validation split (`vtx preprocess --validpref`): this run "
            f"does not validate, so it keeps no checkpoint_best") in result.output
    assert "rows x source x target), training: " in result.output  # no validation shapes
    assert not (tmp_path / "run" / "checkpoint_best.npz").exists()


def test_a_validation_split_of_no_pairs_is_none(multi30k_small, tmp_path):
    """Such a split (vtx preprocess wrote one for empty files) was validated: loss 0, ppl 1,
    a checkpoint_best of nothing."""
    import json
    import shutil

    data = tmp_path / "data"
    shutil.copytree(multi30k_small / "data", data)
    meta = json.loads((data / "meta.json").read_text())
    meta["splits"]["valid"].update(sentences=0, source_tokens=0, target_tokens=0, shards=[])
    (data / "meta.json").write_text(json.dumps(meta))
    manifest.write(data)  # as `vtx preprocess` writes such a directory, whole
    result = invoke("train", data, "--save-dir", tmp_path / "run", "--max-steps", 1, *TRAIN,
                    "--validate-interval-steps", 1)
    assert result.exit_code == 0, result.output
    assert f"warning: {data} has no validation split" in result.output
    assert "valid step" not in result.output
    assert not (tmp_path / "run" / "checkpoint_best.npz").exists()


def average_into(save_dir, output, *flags):
    return invoke("average-checkpoints", "--inputs", save_dir, "--num-last", 2, "--output",
                  output, *flags)


def test_averaging_onto_an_existing_file_needs_force(tmp_path):
    for step in (1, 2):
        write(checkpoints.checkpoint_path(tmp_path, step), step, value=float(step))
    output = tmp_path / "average.npz"
    output.write_bytes(b"precious")
    assert_one_line_error(average_into(tmp_path, output), f"--output {output} already exists",
                          "--force")
    assert output.read_bytes() == b"precious"
    assert average_into(tmp_path, output, "--force").exit_code == 0
    np.testing.assert_array_equal(checkpoints.load(output).model[0], np.full((300,), 1.5))


def test_averaging_into_a_missing_folder_is_a_clear_error(tmp_path):
    for step in (1, 2):
        write(checkpoints.checkpoint_path(tmp_path, step), step)
    output = tmp_path / "missing" / "average.npz"
    assert_one_line_error(average_into(tmp_path, output),
                          f"--output {output}: folder {output.parent} does not exist")


def preprocess(train_prefix, destdir):
    return invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", train_prefix,
                  "--destdir", destdir, "--vocab-size", 40)


def write_corpus(prefix, lines):
    for lang in ("en", "de"):
        prefix.with_name(f"{prefix.name}.{lang}").write_text("".join(f"{l}\n" for l in lines))


# Another vtx process writing OUTPUT: the lock it holds beside it (`vtx.locking`), its holder said.
HOLD_THE_OUTPUT = """
import fcntl, os, socket, sys, time
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(descriptor, fcntl.LOCK_EX)
os.write(descriptor, f"pid {os.getpid()} on {socket.gethostname()}, since now".encode())
print("held", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def output_written_by_another_process(output):
    import subprocess
    import sys

    lock = output.with_name(f".{output.name}.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_OUTPUT, str(lock)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield f"is being written by another process (pid {holder.pid} on "
    finally:
        holder.kill()
        holder.wait()


def test_a_second_writer_of_an_output_is_refused_naming_the_first(tmp_path, trained_checkpoint,
                                                                  small_corpus):
    """Two `vtx preprocess` into one new --destdir both succeeded, the second replacing the
    first's data directory without --force; export and average-checkpoints likewise. The second
    is refused at once, naming the first, and writes nothing."""
    destdir = tmp_path / "data"
    with output_written_by_another_process(destdir) as said:
        assert_one_line_error(invoke("preprocess", "-s", "en", "-t", "de", "--trainpref",
                                     small_corpus / "train", "--destdir", destdir,
                                     "--vocab-size", 1000), f"--destdir {destdir} ", said)
    assert not destdir.exists()
    for step in (1, 2):
        write(checkpoints.checkpoint_path(tmp_path, step), step)
    output = tmp_path / "average.npz"
    output.write_bytes(b"the first's")
    with output_written_by_another_process(output) as said:
        assert_one_line_error(average_into(tmp_path, output, "--force"), f"--output {output} ",
                              said)
    assert output.read_bytes() == b"the first's"
    output = tmp_path / "export"
    with output_written_by_another_process(output) as said:
        assert_one_line_error(invoke("export", "--checkpoint", trained_checkpoint, "--format",
                                     "ctranslate2", "--output", output), f"--output {output} ",
                              said)
    assert not output.exists()
    # Once the first is gone, so is its lock: the output is written.
    result = average_into(tmp_path, output.with_name("average.npz"), "--force")
    assert result.exit_code == 0, result.output


def test_preprocess_into_a_path_below_a_regular_file_is_a_clear_error(tmp_path):
    write_corpus(tmp_path / "train", ["a small house", "the dog runs"])
    regular = tmp_path / "a_regular_file"
    regular.write_text("x")
    result = preprocess(tmp_path / "train", regular / "sub")  # refused before any work
    assert result.exit_code == 2, result.output
    assert (f"Invalid value for '--destdir': {regular / 'sub'}: {regular} is not a directory"
            in result.output)


@pytest.mark.parametrize("lines", [[], ["", "  "]])
def test_preprocess_of_an_empty_training_file_names_it(tmp_path, lines):
    write_corpus(tmp_path / "train", lines)
    result = preprocess(tmp_path / "train", tmp_path / "bin")
    assert_one_line_error(result, f"--trainpref: {tmp_path / 'train.en'} and "
                                  f"{tmp_path / 'train.de'} hold no text")
    assert not (tmp_path / "bin").exists()


def test_a_pair_longer_than_the_model_positions_is_refused_before_training(shared_data, tmp_path):
    import gzip

    with gzip.open(shared_data / "multi30k" / "train.en.gz", "rt") as en, \
            gzip.open(shared_data / "multi30k" / "train.de.gz", "rt") as de:
        pairs = [(next(en).strip(), next(de).strip()) for _ in range(300)]
    long_line = " ".join(["word"] * 1100)
    pairs.append((long_line, long_line))
    (tmp_path / "train.en").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.de").write_text("".join(t + "\n" for _, t in pairs))
    result = invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", tmp_path / "train",
                    "--destdir", tmp_path / "data", "--vocab-size", 500, "--max-positions", 4096)
    assert result.exit_code == 0, result.output
    result = invoke("train", tmp_path / "data", "--save-dir", tmp_path / "run", *TRAIN,
                    "--max-tokens", 8192)
    assert_one_line_error(result, "train split: its longest pair has", "more than the model's "
                          "1024 positions; preprocess again with --max-positions 1024")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_an_existing_output_file_needs_force(request, tmp_path, command):
    trained_checkpoint = request.getfixturevalue(
        "trained_checkpoint" if command == "translate" else "random_parser_checkpoint")
    output = tmp_path / "out.txt"
    output.write_text("keep me\n")
    result = invoke(command, "--checkpoint", trained_checkpoint, "--output", output,
                    stdin="A dog runs .\n")
    assert_one_line_error(result, f"--output {output} already exists (use --force to replace "
                          "it)")
    assert output.read_text() == "keep me\n"
    result = invoke(command, "--checkpoint", trained_checkpoint, "--output", output, "--force",
                    "--beam", 2, stdin="A dog runs .\n")
    assert result.exit_code == 0, result.output
    assert output.read_text() != "keep me\n" and len(output.read_text().splitlines()) == 1


def test_an_output_link_is_followed_and_kept(trained_checkpoint, tmp_path):
    target = tmp_path / "real.de"
    target.write_text("old\n")
    link = tmp_path / "link.de"
    link.symlink_to(target)
    result = invoke("translate", "--checkpoint", trained_checkpoint, "--output", link,
                    stdin="A dog runs .\nTwo men sit on a bench .\n")
    assert_one_line_error(result, f"--output {link} (a link to {target}) already exists")
    result = invoke("translate", "--checkpoint", trained_checkpoint, "--output", link, "--force",
                    stdin="A dog runs .\nTwo men sit on a bench .\n")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == target
    assert len(target.read_text().splitlines()) == 2 and "old" not in target.read_text()


def test_an_output_fifo_is_written_into_not_replaced(trained_checkpoint, tmp_path):
    import os
    import stat
    import threading

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    result = invoke("translate", "--checkpoint", trained_checkpoint, "--output", fifo,
                    stdin="A dog runs .\nTwo men sit on a bench .\n")
    reader.join(timeout=60)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert len(received[0].splitlines()) == 2


FIXTURE_MODEL = Path(__file__).parents[1] / "fixtures" / "multi30k_tiny.npz"


@pytest.mark.parametrize("command,flag,value", [
    ("translate", "--max-len-a", "inf"), ("parse", "--lenpen", "nan"),
    ("train", "--dropout", "nan"), ("preprocess", "--max-length-ratio", "nan")])
def test_a_number_that_is_not_finite_is_refused_naming_its_flag(tmp_path, command, flag, value):
    # nan passes every range check; an infinite --max-len-a overflowed the search's limit (a
    # traceback), and exported into a SavedModel it cut every translation to one token.
    needs = {"translate": ["--checkpoint", FIXTURE_MODEL], "parse": ["--checkpoint", FIXTURE_MODEL],
             "train": [tmp_path, "--save-dir", tmp_path / "run"],
             "preprocess": ["-s", "en", "-t", "de", "--trainpref", tmp_path / "train",
                            "--destdir", tmp_path / "bin"]}[command]
    result = invoke(command, *needs, flag, value, stdin="A dog.\n")
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}': {value} is not a finite number" in result.output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command,args,flag", [
    ("export", ["--checkpoint", FIXTURE_MODEL, "--format", "savedmodel", "--output", "/proc/x"],
     "--output"),
    ("preprocess", ["-s", "en", "-t", "de", "--trainpref", "train", "--destdir", "/proc/x"],
     "--destdir"),
    ("prepare-parse", ["--train-files", "t.mrg", "--valid-files", "v.mrg", "--destdir",
                       "/proc/x"], "--destdir")])
def test_an_output_folder_that_cannot_be_made_is_refused_before_any_work(command, args, flag):
    # Was FileNotFoundError's traceback naming a hidden temporary folder, after the work.
    result = invoke(command, *args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}': " in result.output
    assert "nothing can be created in " in result.output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_translation_output_that_cannot_be_made_is_refused_naming_the_flag():
    result = invoke("translate", "--checkpoint", FIXTURE_MODEL, "--output", "/proc/x.txt",
                    stdin="A dog.\n")
    assert_one_line_error(result, "--output /proc/x.txt: /proc: nothing can be created in it (")


def test_reference_files_that_cannot_give_a_bleu_are_one_line_errors(tmp_path):
    reference = tmp_path / "ref.de"
    reference.write_bytes(b"Ein Hund.\n\xff\n")  # was Python's UnicodeDecodeError, no file named
    assert_one_line_error(invoke("translate", "--checkpoint", FIXTURE_MODEL, "--reference",
                                 reference, stdin="A dog.\nA cat.\n"),
                          f"{reference}:2: invalid UTF-8 (bytes b'\\xff' at column 1)")
    reference.write_bytes(b"")  # an empty input against it: was an IndexError in sacrebleu
    assert_one_line_error(invoke("translate", "--checkpoint", FIXTURE_MODEL, "--reference",
                                 reference, stdin=""),
                          f"--reference {reference} and the input are empty: no BLEU")


def test_tree_files_that_cannot_be_read_are_one_line_errors(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (X x))\n")
    # An empty name opens '.', a folder: IsADirectoryError's traceback before.
    assert_one_line_error(invoke("score-trees", gold, ""), "Is a directory: '.'")
    assert invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", "x", "--destdir",
                  tmp_path / "bin", "--seed", -1).exit_code == 2  # was SentencePiece's TypeError


def test_search_settings_that_do_not_go_together_are_named_by_their_flags():
    result = invoke("translate", "--checkpoint", FIXTURE_MODEL, "--nbest", 5, "--beam", 2,
                    stdin="A dog.\n")
    assert_one_line_error(result, "need 1 <= --nbest <= --beam, got 5 and 2")  # was nbest, beam


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_onto_a_full_disk_is_named(monkeypatch):
    # A full disk said only "[Errno 28] No space left on device", naming no output.
    result = invoke("translate", "--checkpoint", FIXTURE_MODEL, "--output", "/dev/full",
                    stdin="A dog.\n")
    assert_one_line_error(result, "[Errno 28] No space left on device, writing: '/dev/full'")
    from vtx.inference.files import output_sink

    full = open("/dev/full", "w")
    monkeypatch.setattr("sys.stdout", full)
    with pytest.raises(OSError, match="writing: 'standard output'"):
        with output_sink(None) as write:
            write("Ein Hund.")
    monkeypatch.undo()
    with contextlib.suppress(OSError):  # the line is still in its buffer
        full.close()


def test_preprocess_into_the_folder_of_its_input_is_refused_even_with_force(tmp_path):
    """With --force the finished directory replaces the folder whole: it deleted the text it
    was built from."""
    raw = tmp_path / "raw"
    raw.mkdir()
    write_corpus(raw / "train", ["a small house", "the dog runs"])
    for destdir in (raw, tmp_path):
        result = invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", raw / "train",
                        "--destdir", destdir, "--vocab-size", 300, "--force")
        assert_one_line_error(result, f"--destdir {destdir} holds the input {raw / 'train.en'} "
                                      f"(--trainpref)")
        assert sorted(p.name for p in raw.iterdir()) == ["train.de", "train.en"]


def test_preprocess_that_drops_every_training_pair_writes_nothing(tmp_path):
    write_corpus(tmp_path / "train", ["a small house", "the dog runs"])
    result = invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", tmp_path / "train",
                    "--destdir", tmp_path / "bin", "--vocab-size", 300, "--max-positions", 2)
    assert_one_line_error(result, f"--trainpref: every pair of {tmp_path / 'train.en'} and "
                                  f"{tmp_path / 'train.de'} was dropped (2 longer than "
                                  f"--max-positions 2): nothing to train on")
    assert not (tmp_path / "bin").exists()


def test_training_on_a_data_directory_without_training_pairs_writes_nothing(tmp_path):
    write_corpus(tmp_path / "train", ["a small house", "the dog runs"])
    assert invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", tmp_path / "train",
                  "--destdir", tmp_path / "bin", "--vocab-size", 300).exit_code == 0
    result = invoke("preprocess", "-s", "en", "-t", "de", "--spm-model",
                    tmp_path / "bin" / "spm.model", "--testpref", tmp_path / "train",
                    "--destdir", tmp_path / "test_only")
    assert result.exit_code == 0, result.output
    result = invoke("train", tmp_path / "test_only", "--save-dir", tmp_path / "run", *TRAIN)
    assert_one_line_error(result, f"{tmp_path / 'test_only'} holds no training pairs (its "
                                  f"meta.json: no train split)")
    assert not (tmp_path / "run").exists()
    result = invoke("train", tmp_path / "no_data", "--dry-run")  # was a traceback
    assert_one_line_error(result, f"{tmp_path / 'no_data' / 'meta.json'} not found")


def test_a_gzip_file_damaged_inside_a_block_is_a_one_line_error(tmp_path):
    """Damage inside the compressed stream is zlib's error, not gzip's (a traceback before)."""
    import gzip
    import zlib

    lines = [f"line {i} of a small text" for i in range(400)]
    write_corpus(tmp_path / "train", lines)
    data = gzip.compress((tmp_path / "train.de").read_bytes())
    for position in range(20, len(data) - 8):  # the first damage zlib itself reports
        damaged = data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1:]
        try:
            gzip.decompress(damaged)
        except zlib.error:
            break
        except (OSError, EOFError):
            continue
    else:
        pytest.fail("no damage that zlib reports")
    (tmp_path / "train.de").unlink()
    (tmp_path / "train.de.gz").write_bytes(damaged)
    result = preprocess(tmp_path / "train", tmp_path / "bin")
    assert_one_line_error(result, f"cannot read {tmp_path / 'train.en'} / "
                                  f"{tmp_path / 'train.de.gz'}: ")
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_an_input_that_is_not_utf8_is_refused_naming_its_line(tmp_path, command):
    """A gzip file not named .gz, or a Latin-1 text, was decoded with U+FFFD and searched: a
    file of nonsense and exit 0."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"A dog runs .\nA caf\xe9 .\n")
    output = tmp_path / "out.txt"
    result = invoke(command, "--checkpoint", FIXTURE_MODEL, "--input", source, "--output",
                    output)
    assert_one_line_error(result, f"{source}:2: invalid UTF-8 (bytes b'\\xe9' at column 6)")
    assert not output.exists()
    result = invoke(command, "--checkpoint", FIXTURE_MODEL, stdin=b"A caf\xe9 .\n")
    assert_one_line_error(result, "standard input:1: invalid UTF-8")


def test_a_gzip_input_named_gz_is_translated_as_its_text(tmp_path):
    import gzip

    text = "A dog runs .\nTwo men sit on a bench .\n"
    (tmp_path / "in.en.gz").write_bytes(gzip.compress(text.encode()))
    plain = invoke("translate", "--checkpoint", FIXTURE_MODEL, "--beam", 2, stdin=text)
    zipped = invoke("translate", "--checkpoint", FIXTURE_MODEL, "--beam", 2, "--input",
                    tmp_path / "in.en.gz")
    assert plain.exit_code == zipped.exit_code == 0, zipped.output
    assert zipped.stdout == plain.stdout and len(plain.stdout.splitlines()) == 2


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_an_output_that_is_one_of_the_inputs_is_refused_even_with_force(tmp_path, command):
    source = tmp_path / "in.txt"
    source.write_text("A dog runs .\n")
    link = tmp_path / "link.txt"
    link.symlink_to(source)
    for output in (source, link):
        result = invoke(command, "--checkpoint", FIXTURE_MODEL, "--input", source, "--output",
                        output, "--force")
        assert_one_line_error(result, f"--output {output} is the --input file: writing it "
                                      f"would replace that input")
        assert source.read_text() == "A dog runs .\n"
    if command == "translate":
        result = invoke(command, "--checkpoint", FIXTURE_MODEL, "--reference", source,
                        "--output", source, "--force", stdin="A dog runs .\n")
        assert_one_line_error(result, f"--output {source} is the --reference file")
        assert source.read_text() == "A dog runs .\n"


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_a_checkpoint_is_never_replaced_by_the_output_even_with_force(tmp_path, command):
    """--checkpoint naming a save dir: its newest checkpoint, the input, was replaced by the
    translations (the check compared --output with the folder). Another checkpoint of the folder,
    or one under any name, was replaced too: --output is never a zip archive."""
    save_dir = tmp_path / "run"
    save_dir.mkdir()
    shutil.copy(FIXTURE_MODEL, save_dir / "checkpoint_00000100.npz")
    shutil.copy(FIXTURE_MODEL, save_dir / "checkpoint_00000300.npz")
    shutil.copy(FIXTURE_MODEL, tmp_path / "average.npz")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*.npz")}
    newest = save_dir / "checkpoint_00000300.npz"
    result = invoke(command, "--checkpoint", save_dir, "--output", newest, "--force",
                    stdin="A dog runs .\n")
    assert_one_line_error(result, f"--output {newest} is the --checkpoint file: writing it would "
                                  f"replace that input")
    for other in (save_dir / "checkpoint_00000100.npz", tmp_path / "average.npz"):
        result = invoke(command, "--checkpoint", save_dir, "--output", other, "--force",
                        stdin="A dog runs .\n")
        assert_one_line_error(result, f"--output {other} is a zip archive, such as a checkpoint")
    assert {path: path.read_bytes() for path in tmp_path.rglob("*.npz")} == before


@pytest.mark.parametrize("command", ["translate", "parse"])
def test_a_closed_standard_output_is_refused_before_any_work(monkeypatch, command):
    """Started with `>&-`, the whole search ran and then failed on None.write."""
    from vtx.errors import ArgumentError
    from vtx.inference import parse, translate
    from vtx.inference.decoding import DecodeOptions

    monkeypatch.setattr("sys.stdout", None)
    run = translate.translate_file if command == "translate" else parse.parse_file
    with pytest.raises(ArgumentError, match=r"^standard output is closed \(started with >&-\): "
                                            r"give output_path$"):
        run("no-such-checkpoint.npz", None, None, DecodeOptions())  # said before the checkpoint


def vtx_shell(command: str, tmp_path):
    """`command` run by bash in `tmp_path` with the venv's vtx first on PATH."""
    import os
    import subprocess
    import sys

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, timeout=120)


def test_scores_onto_a_closed_or_full_standard_output_are_one_line_errors(tmp_path):
    (tmp_path / "gold.txt").write_text("(TOP (S (NP (DT a)) (VP (VB b))))\n")
    closed = vtx_shell("vtx score-trees gold.txt gold.txt >&-", tmp_path)
    assert closed.returncode == 1, closed.stderr  # was 0, the scores lost
    assert "Error: standard output is closed" in closed.stderr
    if Path("/dev/full").exists():
        full = vtx_shell("vtx score-trees gold.txt gold.txt > /dev/full", tmp_path)
        assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
        assert "Error: [Errno 28] No space left on device" in full.stderr


def test_train_flags_that_would_do_nothing_are_refused_naming_them(tmp_path):
    for flags, said in ((["--seed", -1], "'--seed': -1 is not in the range"),
                        (["--seed", 2**32], "'--seed': 4294967296 is not in the range"),
                        (["--eval-beam", 8], "--eval-beam 8 goes with --eval-bleu or --eval-f1"),
                        (["--eval-lenpen", 2.0], "--eval-lenpen 2.0 goes with --eval-bleu"),
                        (["--vocab-size", 8000], "--vocab-size 8000 goes with --dry-run")):
        result = invoke("train", tmp_path / "data", "--save-dir", tmp_path / "run", *flags)
        assert result.exit_code == 2 and said in result.output, (flags, result.output)
        assert not (tmp_path / "run").exists()


def test_a_reader_gone_from_the_pipe_ends_translate_quietly(tmp_path):
    """`vtx translate ... | head -1`: the reader leaves; the next write found a closed pipe and
    printed "Error: [Errno 32] Broken pipe". `true` leaves before the model has loaded, so the
    first write finds it closed."""
    (tmp_path / "in.en").write_text("A dog runs .\n" * 3)
    gone = vtx_shell(f"vtx translate --checkpoint {FIXTURE_MODEL} --beam 1 --buffer-size 1 "
                     f"--input in.en | true; echo \"rc=${{PIPESTATUS[0]}}\"", tmp_path)
    assert gone.stdout.strip() == "rc=1", (gone.stdout, gone.stderr)
    errors = [line for line in gone.stderr.splitlines() if line.startswith("Error")]
    assert not errors and "Traceback" not in gone.stderr, gone.stderr


def _translating_into_out_de(tmp_path, lines, *flags):
    """`vtx translate` of `lines` into out.de, once its output's hidden temporary exists."""
    import subprocess
    import sys
    import time

    (tmp_path / "in.en").write_text(lines)
    vtx = Path(sys.executable).with_name("vtx")
    process = subprocess.Popen([str(vtx), "translate", "--checkpoint", str(FIXTURE_MODEL),
                                "--input", "in.en", "--output", "out.de", *flags],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.de.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(tmp_path.glob(".out.de.tmp-*")), "the output was never started"
    return process


def test_sigterm_mid_output_leaves_neither_the_output_nor_its_temporary(tmp_path):
    """SIGTERM runs the cleanups, as Ctrl-C does: Python's default would end the process on the
    spot, leaving the output's hidden temporary for good."""
    import signal

    process = _translating_into_out_de(tmp_path, "A dog runs in the park .\n" * 5000,
                                       "--buffer-size", "1")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr.decode()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


def test_sigterm_ends_a_wide_beams_search_at_once_and_writes_nothing(tmp_path):
    """`vtx translate --beam 100000` held a SIGTERM for as long as its search of one line ran
    (minutes): Python runs a handler only between the TensorFlow calls. A beam of 20,000 searches
    this line for 20 s or more on a 2-core CPU; the signal ends it within seconds now."""
    import signal
    import subprocess
    import time

    process = _translating_into_out_de(
        tmp_path, "A man in a blue shirt is standing on a ladder cleaning windows .\n",
        "--beam", "20000")
    time.sleep(2)  # into the search
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("SIGTERM did not end the search within 10 s")
    assert process.returncode == 128 + signal.SIGTERM, stderr.decode()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


SWALLOWED_AT_TRACE = """
import signal, sys
import vtx.inference.model_search as model_search

def swallowing(*args, **kwargs):  # as Keras's ops.shape: a bare except around a TF call
    try:
        signal.raise_signal(getattr(signal, sys.argv[1]))  # the handler raises here
    except:  # noqa: E722
        pass
    raise ValueError("Tried to convert 'shape' to a tensor and failed. Error: None values not "
                     "supported.")

model_search.make_search_fn = swallowing
from vtx_cli.main import main
main(sys.argv[2:], prog_name="vtx")
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_a_library_swallowed_still_ends_the_command_as_that_signal(tmp_path, name):
    """A SIGTERM landing in Keras's `ops.shape` (a bare `except:`) while `vtx translate` traced
    its search was swallowed there and surfaced as "Error: ... None values not supported", exit
    1. The exit is the signal's, with the output's cleanups run."""
    import signal
    import subprocess
    import sys

    (tmp_path / "in.en").write_text("A dog runs in the park .\n")
    result = subprocess.run([sys.executable, "-c", SWALLOWED_AT_TRACE, name, "translate",
                             "--checkpoint", str(FIXTURE_MODEL), "--input", "in.en",
                             "--output", "out.de"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    signum = getattr(signal, name)
    assert result.returncode == 128 + signum, result.stderr[-2000:]
    assert "None values" not in result.stderr and "Traceback" not in result.stderr
    assert ("vtx translate: interrupted (SIGINT)" in result.stderr) == (name == "SIGINT")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


SWALLOWED_AND_GONE_ON = """
import signal, sys
import vtx.inference.model_search as model_search

made = model_search.make_search_fn

def swallowing(*args, **kwargs):  # the bare except, then a search traced as if nothing happened
    try:
        signal.raise_signal(getattr(signal, sys.argv[1]))
    except:  # noqa: E722
        pass
    return made(*args, **kwargs)

model_search.make_search_fn = swallowing
from vtx_cli.main import main
main(sys.argv[2:], prog_name="vtx")
"""


@pytest.mark.parametrize("name,to_file", [("SIGTERM", True), ("SIGINT", False)])
def test_a_signal_swallowed_where_the_command_goes_on_ends_it_before_any_output(tmp_path, name,
                                                                                to_file):
    """On CI a `vtx translate` SIGTERM'd while tracing its search did not end in 120 s: the
    exception was swallowed and the search traced on, and it went on translating. It ends at its
    first line of output now, none written, the output's temporary removed."""
    import signal
    import subprocess
    import sys

    (tmp_path / "in.en").write_text("A dog runs in the park .\n" * 3)
    output = ["--output", "out.de"] if to_file else []
    result = subprocess.run([sys.executable, "-c", SWALLOWED_AND_GONE_ON, name, "translate",
                             "--checkpoint", str(FIXTURE_MODEL), "--input", "in.en",
                             "--buffer-size", "1", *output], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 128 + getattr(signal, name), result.stderr[-2000:]
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert ("vtx translate: interrupted (SIGINT)" in result.stderr) == (name == "SIGINT")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.en"]


@pytest.mark.parametrize("change,reason", [
    ({"num_heads": 0}, "num_heads must be positive, got 0"),  # was a ZeroDivisionError
    ({"d_model": "64"}, "d_model must be an integer, got '64'"),  # was a TypeError
    ({"d_model": 10**9}, "GiB of float32 weights, more than this machine"),  # ResourceExhausted
    ({"num_layers": 10**6}, "GiB of float32 weights, more than this machine's")])  # minutes
def test_a_checkpoint_whose_configuration_cannot_be_built_is_refused_naming_it(
        trained_checkpoint, tmp_path, change, reason):
    """A checkpoint whose model configuration was crafted (its checksum made to match) reached
    TensorFlow: each is refused when read, by every command, and averaging writes nothing."""
    from vtx import checkpoints

    checkpoint = checkpoints.load(trained_checkpoint)
    checkpoint.meta["model_config"].update(change)
    crafted = tmp_path / "crafted.npz"
    checkpoints.save(crafted, checkpoint)
    said = f"{crafted}: not a readable vtx checkpoint, damaged or of another format (its model " \
           f"configuration is not one vtx builds: "
    result = invoke("translate", "--checkpoint", crafted, stdin="A dog runs .\n")
    assert_one_line_error(result, said, reason)
    result = invoke("average-checkpoints", "--inputs", crafted, "--inputs", trained_checkpoint,
                    "--output", tmp_path / "average.npz")
    assert result.exit_code != 0 and said in result.output and reason in result.output
    assert not (tmp_path / "average.npz").exists()


@pytest.mark.parametrize("change,reason", [
    ({"rotary": True}, "unknown model configuration keys: rotary"),
    ({"num_layers": 3}, "its weights hold 231,424 parameters, its model configuration "
                        "(num_layers 3,")])
def test_a_checkpoint_that_does_not_build_its_weights_is_named_even_in_an_ensemble(
        trained_checkpoint, tmp_path, change, reason):
    """A stored configuration with a key this vtx does not know, or that says more layers than
    its weights hold: the message named neither file, so an ensemble's could not be told."""
    checkpoint = checkpoints.load(trained_checkpoint)
    checkpoint.meta["model_config"].update(change)
    crafted = tmp_path / "crafted.npz"
    checkpoints.save(crafted, checkpoint)
    result = invoke("translate", "--checkpoint", trained_checkpoint, "--checkpoint", crafted,
                    stdin="A dog runs .\n")
    assert_one_line_error(result, f"{crafted}: its ", reason)
    result = invoke("export", "--checkpoint", crafted, "--format", "ctranslate2",
                    "--output", tmp_path / "export")
    assert_one_line_error(result, f"{crafted}: its ", reason)
    assert not (tmp_path / "export").exists()


def test_model_flags_past_the_machines_memory_are_refused_before_building(tmp_path):
    """`--d-model 1000000000` gave TensorFlow's ResourceExhaustedError traceback; `--layers
    1000000` was still building after minutes."""
    for flags in (["--d-model", 10**9, "--heads", 1], ["--layers", 10**6]):
        result = invoke("train", "--arch", "tiny", *flags, "--dry-run")
        assert "Traceback" not in result.output and result.exit_code != 0, result.output
        assert "GiB of float32 weights, more than this machine's" in result.output


def test_a_fifo_given_as_checkpoint_is_named_as_what_it_is(tmp_path):
    """Was "no such checkpoint file or directory", for a path that exists."""
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    for command in ("translate", "parse"):
        result = invoke(command, "--checkpoint", fifo, stdin="A dog runs .\n")
        assert_one_line_error(result, f"--checkpoint {fifo} is a FIFO: give a checkpoint file "
                                      f"(.npz) or a save directory")


def test_a_full_disk_while_preprocessing_is_said_with_the_shard(multi30k_small, tmp_path):
    """Was "Error: 939894 requested and 806912 written" (NumPy's words), no file named. A small
    tmpfs holds the vocabulary but not the first shard; needs root (skipped where mount fails)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        result = invoke("preprocess", "-s", "en", "-t", "de", "--trainpref",
                        multi30k_small / "train", "--destdir", disk / "out",
                        "--vocab-size", 1000)
        assert_one_line_error(result, "no room on the disk for shard train.00000.bin (No space "
                                      "left on device; writing into ", "which becomes --destdir "
                                      "when done; nothing is left there): free space and run "
                                      "again")
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)
