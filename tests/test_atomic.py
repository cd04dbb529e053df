"""`vtx.atomic`: folders and groups of files appear whole or not at all."""

import os
import re
import socket
from pathlib import Path

import pytest

from tests.conftest import ended_pid
from vtx import atomic
from vtx.errors import OutputExistsError


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_new_directory_replaces_an_old_folder_only_when_complete(tmp_path):
    target = tmp_path / "data.en-de"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic.new_directory(target) as building:
        assert building.parent == tmp_path and building.name.startswith(".")
        assert list(building.iterdir()) == []
        (building / "new.txt").write_text("new")
        assert (target / "old.txt").read_text() == "old"  # untouched until the block ends
    assert _names(target) == ["new.txt"]
    assert _names(tmp_path) == ["data.en-de"]  # neither the temporary nor the old folder is left


def test_a_failed_new_directory_leaves_the_old_folder_and_no_temporary(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic.new_directory(target) as building:
            (building / "half.txt").write_text("half")
            raise RuntimeError("disk full")
    assert _names(tmp_path) == []
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.new_directory(target):
            raise RuntimeError("disk full")
    assert _names(tmp_path) == ["out"] and _names(target) == ["old.txt"]


def test_new_directory_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "old.txt").write_text("old")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with atomic.new_directory(tmp_path / "link") as building:
        (building / "new.txt").write_text("new")
    assert (tmp_path / "link").is_symlink() and _names(tmp_path / "real") == ["new.txt"]


def test_replaced_together_renames_all_or_none(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(RuntimeError):
        with atomic.replaced_together() as temporary:
            temporary(tmp_path / "a.txt").write_text("new a")
            temporary(tmp_path / "b.txt").write_text("new b")
            raise RuntimeError("the second split is malformed")
    assert _names(tmp_path) == ["a.txt"] and (tmp_path / "a.txt").read_text() == "old a"
    with atomic.replaced_together() as temporary:
        temporary(tmp_path / "a.txt").write_text("new a")
        temporary(tmp_path / "b.txt").write_text("new b")
        assert not (tmp_path / "b.txt").exists()
    assert _names(tmp_path) == ["a.txt", "b.txt"]
    assert (tmp_path / "a.txt").read_text() == "new a"


def test_move_aside_adds_the_suffix_and_replaces_an_earlier_one(tmp_path):
    (tmp_path / "c.npz").write_text("second")
    (tmp_path / "c.npz.damaged").write_text("first")
    assert atomic.move_aside(tmp_path / "c.npz", ".damaged") == tmp_path / "c.npz.damaged"
    assert _names(tmp_path) == ["c.npz.damaged"]
    assert (tmp_path / "c.npz.damaged").read_text() == "second"


def test_a_folder_that_can_be_made_is_probed_without_a_trace(tmp_path):
    (tmp_path / "file").write_text("x")
    assert atomic.unwritable_directory(tmp_path / "new" / "deeper") is None
    assert atomic.unwritable_directory(tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # the probe left nothing
    assert atomic.unwritable_directory(tmp_path / "file" / "sub") == (
        f"{tmp_path / 'file' / 'sub'}: {tmp_path / 'file'} is not a directory")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_that_cannot_be_made_is_said_even_to_root():
    # Permissions pass every check for root (the CI runs as root); creating a folder in /proc
    # fails for every user, so the probe must try rather than judge by permission bits.
    problem = atomic.unwritable_directory("/proc/vtx-runs/base")
    assert problem is not None and problem.startswith(
        "/proc/vtx-runs/base: nothing can be created in /proc (")


def test_an_output_that_fails_to_write_is_named_and_the_old_one_kept(tmp_path):
    import errno

    output = tmp_path / "out.npz"
    output.write_text("old")
    with pytest.raises(OSError) as failed:
        with atomic.replaced_on_success(output) as tmp:
            tmp.write_text("half")  # a full disk seen through a file object: no file name
            raise OSError(errno.ENOSPC, "No space left on device")
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(output)
    assert str(failed.value) == f"[Errno 28] No space left on device, writing: '{output}'"
    assert _names(tmp_path) == ["out.npz"] and output.read_text() == "old"


@pytest.mark.skipif(os.geteuid() == 0, reason="root creates files in a read-only folder")
def test_a_read_only_folder_is_said_to_a_user(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        problem = atomic.unwritable_directory(folder / "run")
        assert problem == f"{folder / 'run'}: nothing can be created in {folder} (Permission denied)"
    finally:
        folder.chmod(0o755)


def test_a_dangling_link_is_said_as_such(tmp_path):
    (tmp_path / "run").symlink_to(tmp_path / "gone")
    assert atomic.unwritable_directory(tmp_path / "run" / "sub") == (
        f"{tmp_path / 'run' / 'sub'}: {tmp_path / 'run'} is a link to {tmp_path / 'gone'}, which "
        f"does not exist")


def test_an_output_killed_mid_write_leaves_no_temporary_once_written_again(tmp_path):
    """A SIGKILL during a write (vtx translate --output, vtx preprocess) leaves its hidden
    temporary, full size; the next write of the same output removes it. Temporaries of other
    outputs, and of running processes (here: this one's parent), are not touched."""
    gone = ended_pid()
    out = tmp_path / "out.de"
    stale = atomic.hidden_name(out, "tmp", pid=gone)
    stale.write_text("half a translation")
    other = atomic.hidden_name(tmp_path / "out.fr", "tmp", pid=gone)
    other.write_text("another output's")
    running = atomic.hidden_name(out, "tmp", pid=os.getppid())
    running.write_text("still being written")
    with atomic.open_output(out) as handle:
        handle.write("done\n")
    assert out.read_text() == "done\n"
    assert not stale.exists()
    assert other.exists() and running.exists()

    folder = tmp_path / "data-bin"
    stale_folder = atomic.hidden_name(folder, "tmp", pid=gone)
    (stale_folder / "sub").mkdir(parents=True)
    with atomic.new_directory(folder) as build:
        (build / "dict.txt").write_text("a 1\n")
    assert not stale_folder.exists() and (folder / "dict.txt").exists()


def test_a_folder_moved_aside_by_a_killed_replace_is_put_back(tmp_path):
    """Killed between the two renames that replace a folder, the old folder was left hidden and
    its name empty; the next write of it puts it back first, so a failure then loses nothing."""
    folder = tmp_path / "data-bin"
    aside = atomic.hidden_name(folder, "old", pid=ended_pid())
    aside.mkdir()
    (aside / "dict.txt").write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic.new_directory(folder):
            raise RuntimeError("the build failed")
    assert (folder / "dict.txt").read_text() == "old\n" and not aside.exists()
    # Where the replacement did take its place (killed while removing the old): removed.
    aside.mkdir()
    with atomic.new_directory(folder) as build:
        (build / "dict.txt").write_text("new\n")
    assert (folder / "dict.txt").read_text() == "new\n" and not aside.exists()


def test_hidden_names_carry_host_pid_and_a_token_new_for_each_write(tmp_path, monkeypatch):
    """Pids repeat across hosts and containers: a temporary's name says its host (characters a
    file name should not hold replaced) and a token of its write besides."""
    monkeypatch.setattr(socket, "gethostname", lambda: "node 7/b.example-1")
    out = tmp_path / "out.de"
    with atomic.replaced_on_success(out) as first, atomic.replaced_on_success(out) as second:
        pattern = rf"\.out\.de\.tmp-node_7_b\.example-1-{os.getpid()}-[0-9a-f]{{8}}\.de"
        assert re.fullmatch(pattern, first.name) and re.fullmatch(pattern, second.name)
        assert first != second
        first.write_text("first")
        second.write_text("second")
    assert out.read_text() == "first"  # the outer block ended last
    assert _names(tmp_path) == ["out.de"]


def test_another_hosts_temporaries_are_left_alone(tmp_path):
    """On a shared file system, this host's process table says nothing of another host's
    writers: its temporaries are kept whatever their pid (dead here, this process's, a
    container's 1), and a folder it moved aside is not put back under it mid-replace."""
    out, folder = tmp_path / "out.de", tmp_path / "data-bin"
    theirs = [atomic.hidden_name(out, "tmp", host="elsewhere", pid=pid)
              for pid in (ended_pid(), os.getpid(), 1)]
    for path in theirs:
        path.write_text("another host's, being written")
    their_aside = atomic.hidden_name(folder, "old", host="elsewhere", pid=ended_pid())
    their_aside.mkdir()
    assert atomic.remove_stale_temporaries(tmp_path) == []
    assert all(path.exists() for path in theirs) and their_aside.is_dir()
    assert not folder.exists()


def test_this_processs_pid_with_a_token_not_in_flight_is_a_predecessors(tmp_path):
    """A restarted container process gets the pid (often 1) of the one a kill ended: a
    temporary of this host and pid that this process is not writing is removed."""
    out = tmp_path / "out.de"
    predecessors = atomic.hidden_name(out, "tmp", pid=os.getpid())
    predecessors.write_text("x" * 1000)
    assert atomic.remove_stale_temporaries(tmp_path, "out.de") == [(predecessors, 1000)]


def test_temporaries_being_written_on_this_host_are_kept(tmp_path):
    """This process's own writes in progress (another thread, or a nested write of the same
    output) and a running process's temporary are not removed."""
    out = tmp_path / "out.de"
    running = atomic.hidden_name(out, "tmp", pid=os.getppid())
    running.write_text("a running process's")
    with atomic.replaced_on_success(out) as mine:
        mine.write_text("mine")
        assert atomic.remove_stale_temporaries(tmp_path) == []
        with atomic.open_output(out, force=True) as handle:  # writes of the same output meet
            handle.write("nested\n")
        assert mine.read_text() == "mine" and running.exists()
    assert out.read_text() == "mine"
    assert _names(tmp_path) == [running.name, "out.de"]


def test_an_earlier_versions_temporaries_are_judged_by_pid(tmp_path):
    """`.NAME.tmp-PID` and `.NAME.old-PID` (no host, no token) from before an upgrade: those of
    dead processes and of this pid (this version never gives such a name) are removed, a
    running process's kept."""
    gone = ended_pid()
    stale = [tmp_path / f".out.de.tmp-{pid}.de" for pid in (gone, os.getpid())]
    running = tmp_path / f".out.de.tmp-{os.getppid()}.de"
    for path in (*stale, running):
        path.write_text("x")
    aside = tmp_path / f".data-bin.old-{gone}"
    aside.mkdir()
    removed = atomic.remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted((path, 1) for path in stale)
    assert running.exists() and (tmp_path / "data-bin").is_dir()  # put back


LONG_HOST = "worker-" + "h" * 57  # 64 characters, Linux's longest host name


@pytest.mark.parametrize("name", ["a" * 251 + ".npz", "é" * 125 + ".txt", "a." + "b" * 253,
                                  "c" * 160 + ".npz"])
def test_an_output_of_any_valid_name_is_written_through_hidden_names_that_fit(
        tmp_path, monkeypatch, name):
    """`.NAME.tmp-HOST-PID-TOKEN.SUFFIX` passed the 255 bytes of a file name for a NAME near
    them: a valid output failed with ENAMETOOLONG. A long name is cut, with its digest."""
    monkeypatch.setattr(socket, "gethostname", lambda: LONG_HOST)
    assert len(os.fsencode(name)) <= 255
    for kind in ("tmp", "old"):
        hidden = atomic.hidden_name(tmp_path / name, kind, pid=2**31 - 1)
        assert len(os.fsencode(hidden.name)) <= 255 and hidden.name.startswith(".")
    with atomic.open_output(tmp_path / name) as handle:
        handle.write("done\n")
    assert (tmp_path / name).read_text() == "done\n"
    with atomic.replaced_on_success(tmp_path / name) as tmp:
        if Path(name).suffix == ".npz":
            assert tmp.suffix == ".npz"  # numpy.savez adds .npz to a name without it
        tmp.write_text("again\n")
    assert (tmp_path / name).read_text() == "again\n"
    folder = tmp_path / f"{name[:-1]}d"
    folder.mkdir()
    with atomic.new_directory(folder) as build:  # the old folder moved aside meanwhile
        (build / "dict.txt").write_text("new\n")
    assert _names(folder) == ["dict.txt"]
    assert _names(tmp_path) == sorted([name, folder.name])


def test_shortened_hidden_names_are_judged_stale_as_whole_ones(tmp_path, monkeypatch):
    """A killed write's shortened temporary is removed by the next write of its output, not by
    one of another output sharing its first 200 bytes; a running process's is kept; a folder
    moved aside is put back by the next write of it (a sweep of the whole folder cannot tell
    which output it was, and leaves it)."""
    monkeypatch.setattr(socket, "gethostname", lambda: LONG_HOST)
    out, other = tmp_path / ("o" * 200 + "1.de"), tmp_path / ("o" * 200 + "2.de")
    gone = ended_pid()
    stale = atomic.hidden_name(out, "tmp", pid=gone)
    others = atomic.hidden_name(other, "tmp", pid=gone)
    running = atomic.hidden_name(out, "tmp", pid=os.getppid())
    for path in (stale, others, running):
        path.write_text("x" * 10)
    assert stale.name.startswith("." + "o" * 100) and ".tmp~" in stale.name
    assert atomic.remove_stale_temporaries(tmp_path, out.name) == [(stale, 10)]
    assert others.exists() and running.exists()

    folder = tmp_path / ("d" * 240)
    aside = atomic.hidden_name(folder, "old", pid=gone)
    aside.mkdir()
    assert atomic.remove_stale_temporaries(tmp_path) == [(others, 10)]
    assert aside.is_dir() and not folder.exists()
    with pytest.raises(RuntimeError):
        with atomic.new_directory(folder):
            raise RuntimeError("the build failed")
    assert folder.is_dir() and not aside.exists()


def test_temporaries_named_with_a_host_before_it_was_cut_are_still_this_hosts(
        tmp_path, monkeypatch):
    """A host name of over 64 characters (not Linux's) is cut in the names written now; one an
    earlier version wrote with it whole, before an upgrade, is still judged as this host's."""
    host = "node-" + "n" * 95
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    out = tmp_path / "out.de"
    assert atomic.hidden_name(out, "tmp").name.startswith(f".out.de.tmp-{host[:55]}-")
    earlier = tmp_path / f".out.de.tmp-{host}-{ended_pid()}-0123abcd.de"
    earlier.write_text("x")
    assert atomic.remove_stale_temporaries(tmp_path) == [(earlier, 1)]


def test_an_output_that_appeared_while_the_command_ran_is_not_replaced_without_force(tmp_path):
    """Two `vtx translate --output X` at once: the later replaced the file the other made during
    its run, though neither had --force. The check is made again as the output is put in place."""
    out = tmp_path / "out.txt"
    with pytest.raises(OutputExistsError) as refused:
        with atomic.open_output(out) as handle:
            handle.write("mine\n")
            out.write_text("theirs\n")  # another process's output, meanwhile
    assert str(refused.value) == (f"--output {out} appeared while this command ran (another "
                                  f"process wrote it; use --force to replace it): this output "
                                  f"is not written")
    assert out.read_text() == "theirs\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with atomic.open_output(out, force=True) as handle:
        handle.write("mine\n")
    assert out.read_text() == "mine\n"
