"""`vtx.locking`: an output's lock is held while the block writes it, names its holder, and is
gone afterwards, so no lock file is left beside the outputs."""

import os
import subprocess
import sys

import pytest

from vtx import locking

TRY_THE_LOCK = """
import sys
from vtx import locking
try:
    with locking.output_lock(sys.argv[1], "--output"):
        print("held")
except OSError as error:
    print(error)
"""


def test_an_output_lock_names_its_holder_to_another_process_and_leaves_no_file(tmp_path):
    output = tmp_path / "out"
    with locking.output_lock(output, "--output"):
        lock = tmp_path / ".out.lock"
        assert f"pid {os.getpid()} on " in lock.read_text()
        other = subprocess.run([sys.executable, "-c", TRY_THE_LOCK, str(output)],
                               capture_output=True, text=True, check=True).stdout
        assert other.startswith(f"--output {output} is being written by another process "
                                f"(pid {os.getpid()} on "), other
        assert other.rstrip().endswith(f"; {lock} is its lock): wait for it to end, or give "
                                       f"another --output")
    assert not lock.exists()
    other = subprocess.run([sys.executable, "-c", TRY_THE_LOCK, str(output)],
                           capture_output=True, text=True, check=True).stdout
    assert other == "held\n"



def plant(lock, kind, target):
    """Put at the lock file's path a symbolic or a hard link to `target`, or another file."""
    if kind == "symbolic link":
        lock.symlink_to(target)
    elif kind == "hard link":
        os.link(target, lock)
    else:
        lock.write_text("notes of a colleague\n")


@pytest.mark.parametrize("kind", ["symbolic link", "hard link", "file"])
@pytest.mark.parametrize("command", ["average-checkpoints", "export", "preprocess"])
def test_a_link_or_file_planted_at_a_commands_lock_path_is_refused_and_left_whole(
        tmp_path, trained_checkpoint, command, kind):
    """A lock path planted as a link to another file of the user's: the file was truncated to
    the holder's line and removed when the command ended. Now nothing is written through it;
    the command stops at once naming the lock path."""
    from tests.cli.test_faults import assert_one_line_error, invoke

    colleague = tmp_path / "colleague.txt"
    colleague.write_text("a colleague's results\n")
    output = tmp_path / {"preprocess": "data", "export": "exported"}.get(command, "avg.npz")
    lock = locking.lock_path(output)
    plant(lock, kind, colleague)
    if command == "preprocess":
        for lang in ("en", "de"):
            (tmp_path / f"train.{lang}").write_text("a house\nthe dog\n")
        result = invoke("preprocess", "-s", "en", "-t", "de", "--trainpref", tmp_path / "train",
                        "--destdir", output, "--vocab-size", 100)
    elif command == "export":
        result = invoke("export", "--checkpoint", trained_checkpoint, "--format", "ctranslate2",
                        "--output", output)
    else:
        result = invoke("average-checkpoints", "--inputs", trained_checkpoint, "--output", output)
    said = {"symbolic link": f"{lock} is a symbolic link, where vtx keeps a lock file",
            "hard link": f"{lock} is a hard link, where vtx keeps a lock file",
            "file": f"{lock} holds 'notes of a colleague\\n', not a vtx lock file's holder"}[kind]
    assert_one_line_error(result, said)
    assert colleague.read_text() == "a colleague's results\n"
    assert lock.exists() and not output.exists()
    if kind == "file":
        assert lock.read_text() == "notes of a colleague\n"


def test_a_link_planted_at_a_save_dirs_lock_path_is_refused_and_its_target_kept(tmp_path):
    from vtx.errors import LockFileError
    from vtx.training.directory import LOCK_FILE, lock_save_dir

    colleague = tmp_path / "colleague.txt"
    colleague.write_text("a colleague's results\n")
    (tmp_path / LOCK_FILE).symlink_to(colleague)
    with pytest.raises(LockFileError, match=f"^{tmp_path / LOCK_FILE} is a symbolic link"):
        lock_save_dir(tmp_path)
    assert colleague.read_text() == "a colleague's results\n"
    (tmp_path / LOCK_FILE).unlink()
    assert lock_save_dir(tmp_path)  # its own lock file, kept for the next run
