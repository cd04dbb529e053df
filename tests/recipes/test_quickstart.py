"""recipes/quickstart.sh: argument checks, and a short end-to-end run that downloads Multi30k.

The download is real HTTP, served from the shared Multi30k copy by a local server standing in
for the public repository ($MULTI30K_URL), with the shared-data shortcut switched off.
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "recipes" / "quickstart.sh"
FILES = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr")
         for lang in ("en", "de")]


def run(*args, env=None, timeout=300):
    environment = {**os.environ, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=environment)


@pytest.fixture
def multi30k_server(shared_data, tmp_path):
    """A local HTTP server holding the six Multi30k files; yields its base URL."""
    served = tmp_path / "served"
    served.mkdir()
    for name in FILES:
        (served / name).symlink_to(shared_data / "multi30k" / name)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(served)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.slow
def test_short_budget_downloads_trains_averages_and_prints_bleu(multi30k_server, tmp_path):
    work = tmp_path / "work"
    result = run("--minutes", "0.2", "--workdir", work, "--test-lines", 4, timeout=900,
                 env={"MULTI30K_URL": multi30k_server, "MULTI30K_DIR": "",
                      "VTX_SHARED_DATA": str(tmp_path / "no-shared-data")})
    assert result.returncode == 0, result.stderr
    for name in FILES:
        assert (work / "multi30k" / name).stat().st_size > 0
    assert not list((work / "multi30k").glob("*.part"))
    assert "time budget of 0.2 minutes used up" in result.stderr
    assert (work / "average.npz").is_file()
    assert len((work / "test.hyp.de").read_text(encoding="utf-8").splitlines()) == 4
    summary = result.stdout.splitlines()[-3:]  # after the vtx commands' own summaries
    assert summary[0] == "Multi30k test_2016 EN->DE (training budget 0.2 min):"
    assert summary[1].startswith("BLEU = ")
    assert summary[2].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


@pytest.mark.parametrize("args, message", [
    (("--minutes", "0"), "--minutes must be a positive number, got '0'"),
    (("--minutes", "ten"), "--minutes must be a positive number, got 'ten'"),
    (("--test-lines", "-3"), "--test-lines must be a whole number, got '-3'"),
    (("--patience", "2.5"), "--patience must be a whole number, got '2.5'"),
    (("--epochs", "3"), "unknown argument '--epochs'"),
])
def test_bad_arguments_are_refused_before_any_work(args, message, tmp_path):
    result = run(*args, "--workdir", tmp_path / "work")
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize("args, message", [
    (("--workdir", "--help"),
     "--workdir needs a directory, not the option '--help' (a folder of that name: ./--help)"),
    (("--data", "--minutes", "5"),
     "--data needs a directory, not the option '--minutes' (a folder of that name: ./--minutes)"),
    (("--minutes", "--patience", "3"), "--minutes needs a value, not the option '--patience'"),
    (("--patience", "--test-lines", "4"), "--patience needs a value, not the option '--test-lines'"),
    (("--test-lines", "--"), "--test-lines needs a value, not the option '--'"),
    (("--test-lines",), "--test-lines needs a value"),
])
def test_an_option_whose_value_is_missing_or_another_option_is_refused_naming_it(
        args, message, tmp_path):
    """`--workdir --help` took "--help" for the folder: no help, and the run went on (an hour's
    training). Run from a copy whose environment cannot be made, in an empty folder."""
    checkout = tmp_path / "checkout"
    (checkout / "recipes").mkdir(parents=True)
    (checkout / "recipes" / "quickstart.sh").write_bytes(SCRIPT.read_bytes())
    result = subprocess.run(["bash", str(checkout / "recipes" / "quickstart.sh"), *args],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={**os.environ, "PYTHON": "false", "MULTI30K_DIR": ""})
    assert result.returncode == 1
    assert result.stderr == f"quickstart: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkout"]


def test_folders_named_like_options_are_taken_as_folders(shared_data, tmp_path):
    """`--workdir -h` passed the check (one dash) and then failed in `mkdir -p -h` (invalid
    option). Run from a copy whose environment cannot be made: the step after the folders."""
    checkout = tmp_path / "checkout"
    (checkout / "recipes").mkdir(parents=True)
    (checkout / "recipes" / "quickstart.sh").write_bytes(SCRIPT.read_bytes())
    (tmp_path / "-d").symlink_to(shared_data / "multi30k")
    result = subprocess.run(["bash", str(checkout / "recipes" / "quickstart.sh"), "--workdir",
                             "-h", "--data", "-d"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={**os.environ, "PYTHON": "false"})
    assert result.returncode != 0
    assert "creating the virtual environment" in result.stderr, result.stderr
    assert "invalid option" not in result.stderr and (tmp_path / "-h").is_dir()


def test_a_local_directory_missing_a_file_is_named(shared_data, tmp_path):
    local = tmp_path / "multi30k"
    local.mkdir()
    for name in FILES:
        if name != "val.de.gz":
            (local / name).symlink_to(shared_data / "multi30k" / name)
    result = run("--data", local, "--workdir", tmp_path / "work")
    assert result.returncode != 0
    assert f"'{local}' has no val.de.gz (or val.de)" in result.stderr
    assert not (tmp_path / "work" / "data-bin").exists()


def test_a_bad_local_directory_is_named_before_the_environment_is_installed(tmp_path):
    """The script in a checkout without .venv: a wrong --data was reported only after creating
    the environment and pip-installing vtx's dependencies (minutes, and the network)."""
    checkout = tmp_path / "checkout"
    (checkout / "recipes").mkdir(parents=True)
    (checkout / "recipes" / "quickstart.sh").write_bytes(SCRIPT.read_bytes())
    (tmp_path / "empty dir").mkdir()
    result = subprocess.run(
        ["bash", str(checkout / "recipes" / "quickstart.sh"), "--data", str(tmp_path / "empty dir"),
         "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHON": "false"})  # a venv creation would fail, not install
    assert result.returncode != 0
    assert f"'{tmp_path / 'empty dir'}' has no train.en.gz (or train.en)" in result.stderr
    assert "virtual environment" not in result.stderr
    assert not (checkout / ".venv").exists() and not (tmp_path / "work").exists()


def test_an_empty_workdir_or_data_value_is_refused(tmp_path):
    for flag in ("--workdir", "--data"):
        result = run(flag, "")
        assert result.returncode != 0
        assert f"{flag} needs a directory" in result.stderr


def test_a_vtx_bin_that_is_not_a_program_is_refused_naming_it(shared_data, tmp_path):
    """VTX_BIN (a `vtx` already installed, as on the GPU machine) replaces the environment; a
    path that is not an executable stops the recipe there, before any data is made."""
    result = run("--workdir", tmp_path / "work", "--data", shared_data / "multi30k",
                 env={"VTX_BIN": str(tmp_path / "no-vtx")})
    assert result.returncode == 1
    assert f"VTX_BIN: '{tmp_path / 'no-vtx'}' is not an executable file" in result.stderr
    assert not (tmp_path / "work" / "data-bin").exists()
