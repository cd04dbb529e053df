"""`vtx.manifest`: a data directory's SHA256SUMS lists its own files only; an entry naming a
file outside it is refused by name before anything is looked up there."""

import shutil

import pytest

from tests.cli.test_faults import TRAIN, assert_one_line_error, invoke
from tests.data.conftest import small_corpus, small_data_dir  # noqa: F401  (fixtures)
from vtx import manifest


def outside_file(data):
    """A file beside the data directory, listed as `../outside.txt`."""
    (data.parent / "outside.txt").write_text("not the data's\n")
    return "../outside.txt", data.parent / "outside.txt"


def absolute_file(data):
    """A file anywhere, listed by its absolute path."""
    (data.parent / "elsewhere.txt").write_text("not the data's\n")
    return str(data.parent / "elsewhere.txt"), data.parent / "elsewhere.txt"


def dotted_file(data):
    """A file of the directory, listed through a `..` that comes back into it."""
    return f"../{data.name}/meta.json", data / "meta.json"


@pytest.mark.parametrize("entry_of", [outside_file, absolute_file, dotted_file])
def test_a_manifest_entry_outside_its_directory_is_refused_naming_it(
        small_data_dir, tmp_path, entry_of):
    """`../outside.txt` or `/etc/hostname` with its right SHA-256 passed the check; with a
    wrong one, the message told whether the file existed."""
    data = tmp_path / "data"
    shutil.copytree(small_data_dir, data)
    entry, path = entry_of(data)
    sums = data / manifest.NAME
    lines = sums.read_text().splitlines(keepends=True)
    for digest in (manifest.file_sha256(path), "0" * 64):
        sums.write_text("".join(lines + [f"{digest}  {entry}\n"]))
        result = invoke("train", data, "--save-dir", tmp_path / "run", "--max-steps", 1, *TRAIN)
        assert_one_line_error(result, f"{sums}:{len(lines) + 1}: its entry {entry!r} is not a "
                                      f"plain relative path inside {data}")
        assert "missing" not in result.output and "changed" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_manifest_entry_linked_out_of_its_directory_is_refused_naming_it(small_data_dir,
                                                                          tmp_path):
    data = tmp_path / "data"
    shutil.copytree(small_data_dir, data)
    (tmp_path / "outside.txt").write_text("not the data's\n")
    (data / "linked.txt").symlink_to(tmp_path / "outside.txt")
    with open(data / manifest.NAME, "a") as sums:
        sums.write(f"{manifest.file_sha256(tmp_path / 'outside.txt')}  linked.txt\n")
    result = invoke("train", data, "--save-dir", tmp_path / "run", "--max-steps", 1, *TRAIN)
    assert_one_line_error(result, f"{data / 'linked.txt'} is a symbolic link to "
                                  f"{tmp_path / 'outside.txt'}, outside {data}: not read")
