"""`vtx.inference.jit`: `--jit`'s auto choice for translate, parse and score."""

import os
from pathlib import Path

import pytest

from vtx.inference import jit
from vtx.inference.jit import choose_jit, resolve_jit


def test_auto_compiles_on_a_gpu_naming_it():
    choice = choose_jit(None, ["NVIDIA H200", "NVIDIA H200"])
    assert choice.compile
    assert choice.log_line("search") == "search: XLA on (auto: a GPU, NVIDIA H200)"


def test_auto_does_not_compile_on_a_cpu():
    choice = choose_jit(None, [])
    assert not choice.compile
    assert choice.log_line("search") == "search: XLA off (auto: no GPU; XLA decodes slower on a CPU)"


def test_auto_leaves_the_search_from_the_host_uncompiled_even_on_a_gpu():
    """`--constraints` with `--jit` is refused; `auto` with it searches as it can."""
    choice = choose_jit(None, ["NVIDIA H200"], host_steps=True)
    assert not choice.compile and "--constraints" in choice.reason


@pytest.mark.parametrize("gpus", [[], ["NVIDIA H200"]])
@pytest.mark.parametrize("requested,flag", [(True, "--jit"), (False, "--no-jit")])
def test_a_flag_given_is_kept_whatever_the_machine(gpus, requested, flag):
    choice = choose_jit(requested, gpus, host_steps=False)
    assert choice.compile is requested
    assert choice.log_line("scoring") == f"scoring: XLA {'on' if requested else 'off'} ({flag})"


@pytest.mark.parametrize("gpus,expected", [([], False), (["NVIDIA H200"], True)])
def test_resolve_asks_the_gpu_list_lookup(monkeypatch, tmp_path, gpus, expected):
    monkeypatch.setenv("TF_XLA_FLAGS", "")  # restored after the test: the cache named below
    monkeypatch.setenv("VTX_XLA_CACHE", str(tmp_path))
    monkeypatch.setattr(jit, "visible_gpus", lambda: gpus)
    assert resolve_jit(None).compile is expected
    assert resolve_jit(False).compile is False


def test_xla_on_a_gpu_keeps_its_programs_in_a_folder_of_that_gpu_and_tensorflow(monkeypatch,
                                                                                tmp_path):
    """A second command on the same GPU loads what the first compiled (TensorFlow's persistent
    cache, named in TF_XLA_FLAGS before anything compiles); another GPU model or TensorFlow
    version gets a folder of its own; a cache the user named is kept; a CPU gets none."""
    import tensorflow as tf

    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_enable_lazy_compilation=false")
    monkeypatch.setenv("VTX_XLA_CACHE", str(tmp_path))
    monkeypatch.setattr(jit, "visible_gpus", lambda: ["NVIDIA H200"])
    choice = resolve_jit(None)
    folder = tmp_path / f"NVIDIA_H200-tf{tf.__version__}"
    assert choice.log_line("search") == (f"search: XLA on (auto: a GPU, NVIDIA H200; compiled "
                                         f"programs kept in {folder})")
    assert os.environ["TF_XLA_FLAGS"].split() == [
        "--tf_xla_enable_lazy_compilation=false", f"--tf_xla_persistent_cache_directory={folder}"]
    assert jit.xla_cache_directory("NVIDIA H100 80GB HBM3", "2.21.0", {}) == (
        Path.home() / ".cache" / "vtx" / "xla" / "NVIDIA_H100_80GB_HBM3-tf2.21.0")
    assert jit.xla_cache_directory("A100", "2.21.0", {"XDG_CACHE_HOME": "/c"}) == Path(
        "/c/vtx/xla/A100-tf2.21.0")
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_persistent_cache_directory=/mine")
    assert resolve_jit(True).reason == "--jit; compiled programs kept in /mine"
    monkeypatch.setattr(jit, "visible_gpus", lambda: [])
    assert resolve_jit(True).reason == "--jit"
