"""The compile-time split behind issue 12's 3-minute target (`benchmarks/compile_split.py`): its
arguments, its HLO count and what it prints (not a timed test: only that the figures are there)."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import compile_split  # noqa: E402


def test_shapes_are_read_as_rows_by_length():
    assert compile_split.parse_shapes("64x32, 128x16") == [(64, 32), (128, 16)]


@pytest.mark.parametrize("text, bad", [("64x32,64", "64"), ("0x8", "0x8"), ("8x", "8x")])
def test_a_bad_shape_is_named(text, bad):
    with pytest.raises(argparse.ArgumentTypeError, match=f"'{bad}' is not ROWSxLENGTH"):
        compile_split.parse_shapes(text)


def test_hlo_instructions_are_counted_per_assignment():
    text = """HloModule m, entry_computation_layout={(f32[3]{0})->f32[3]{0}}

ENTRY %main.5 (Arg_0.1: f32[3]) -> f32[3] {
  %Arg_0.1 = f32[3]{0} parameter(0)
  %constant.2 = f32[] constant(2)
  %broadcast.3 = f32[3]{0} broadcast(f32[] %constant.2), dimensions={}
  ROOT %multiply.4 = f32[3]{0} multiply(f32[3]{0} %Arg_0.1, f32[3]{0} %broadcast.3)
}
"""
    assert compile_split.hlo_instructions(text) == 4


@pytest.mark.slow
def test_it_prints_each_shape_split_and_dropout_adds_instructions(capsys):
    counts, conditionals = {}, {}
    for dropout, skip in (("0.1", "selection"), ("0", "selection"), ("0", "branch")):
        compile_split.main(["--arch", "tiny", "--shapes", "8x6", "--device", "cpu",
                            "--precision", "float32", "--hlo", "--dropout", dropout,
                            "--skip", skip])
        out = capsys.readouterr().out.splitlines()
        assert out[0] == (f"tiny (P_drop {float(dropout)}), float32, XLA on /cpu:0, a non-finite "
                          f"update skipped by {skip}")
        assert re.fullmatch(r"general trace \(every shape runs through it\): [\d.]+ s", out[1])
        match = re.fullmatch(r"8x6: trace [\d.]+ s, first call [\d.]+ s, second [\d.]+ s; "
                             r"before training [\d.]+ s; lowering alone [\d.]+ s, "
                             r"([\d,]+) HLO instructions, (\d+) conditional\(s\)", out[2])
        assert match, out[2]
        counts[dropout, skip] = int(match[1].replace(",", ""))
        conditionals[skip] = int(match[2])
    assert counts["0", "selection"] < counts["0.1", "selection"]  # dropout's random numbers
    # `--skip branch` compiles vtx's update of before 2026-11-27: a conditional in the program.
    assert conditionals["selection"] == 0 and conditionals["branch"] >= 1


def test_conditionals_are_counted_by_opcode_not_by_name():
    text = """  %conditional.7 = (f32[]) conditional(pred[] %p, f32[] %a, f32[] %b), branch_computations={%t, %f}
  %conditional_name.8 = f32[] add(f32[] %a, f32[] %b)
"""
    assert compile_split.hlo_conditionals(text) == 1


@pytest.mark.slow
def test_replicas_split_the_device_and_every_shape_is_printed():
    # A process of its own: the CPU is split into logical devices before TensorFlow starts them.
    script = Path(compile_split.__file__)
    out = subprocess.run([sys.executable, str(script), "--arch", "tiny", "--shapes", "8x6,4x6",
                          "--device", "cpu", "--precision", "float32", "--replicas", "2"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == ("tiny (P_drop 0.1), float32, XLA on /cpu:0, /cpu:1, a non-finite update "
                        "skipped by selection"), out
    for line, shape in zip(lines[2:], ("8x6", "4x6")):
        assert re.fullmatch(shape + r": trace [\d.]+ s, first call [\d.]+ s, second [\d.]+ s; "
                            r"before training [\d.]+ s", line), out


@pytest.mark.parametrize("flags, error", [
    (["--replicas", "0"], "--replicas must be >= 1, got 0"),
    (["--replicas", "2", "--hlo"], "--hlo needs --replicas 1"),
])
def test_a_bad_replica_count_is_refused(capsys, flags, error):
    with pytest.raises(SystemExit) as exit_:
        compile_split.main(["--device", "cpu"] + flags)
    assert exit_.value.code == 2 and error in capsys.readouterr().err
