"""`vtx.inference.jit`: `--jit`'s auto choice for translate, parse and score."""

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
def test_resolve_asks_the_gpu_list_lookup(monkeypatch, gpus, expected):
    monkeypatch.setattr(jit, "visible_gpus", lambda: gpus)
    assert resolve_jit(None).compile is expected
    assert resolve_jit(False).compile is False
