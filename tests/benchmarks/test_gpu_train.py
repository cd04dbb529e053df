"""`benchmarks/gpu_train.py --packed N`: the synthetic batch as `vtx train --pack` lays out rows."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from vtx.config import BOS_ID, EOS_ID, PAD_ID

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_train.py"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_train  # noqa: E402
import train_throughput  # noqa: E402


def test_packed_rows_keep_the_shape_and_the_target_tokens_with_one_segment_a_pair():
    batch = train_throughput.synthetic_batches(vocab_size=50, tokens=64, length=8, count=1)[0]
    packed = gpu_train.packed(batch, 4)
    assert {key: value.shape for key, value in packed.items()} == {
        key: (8, 8) for key in ("source", "target_in", "target_out", "source_segments",
                                "target_segments", "source_positions", "target_positions")}
    # Every position real, as in the unpacked batch: the same target tokens an update.
    assert (packed["target_out"] != PAD_ID).all() and (packed["source"] != PAD_ID).all()
    np.testing.assert_array_equal(packed["source"], batch["source"])
    for side in ("source", "target"):
        np.testing.assert_array_equal(packed[f"{side}_segments"][0], [1, 1, 2, 2, 3, 3, 4, 4])
        np.testing.assert_array_equal(packed[f"{side}_positions"][0], [0, 1] * 4)
    # Each pair of 2 target positions: bos + its token in, its token + eos out.
    np.testing.assert_array_equal(packed["target_in"][:, 0::2], BOS_ID)
    np.testing.assert_array_equal(packed["target_out"][:, 1::2], EOS_ID)
    np.testing.assert_array_equal(packed["target_in"][:, 1::2], packed["target_out"][:, 0::2])
    np.testing.assert_array_equal(packed["target_out"][:, 0::2], batch["target_out"][:, 0::2])


def test_packed_and_in_flight_values_are_checked():
    for flags, said in ((["--packed", "3"], "--packed 3 must divide --length 16"),
                        (["--packed", "16"], "pairs of >= 2 tokens"),
                        (["--packed", "2"], "--packed goes with --no-reference"),
                        (["--precision", "mixed_float16"],
                         "--precision mixed_float16 goes with --no-reference"),
                        (["--in-flight", "0,x"], "--in-flight 0,x: whole numbers"),
                        (["--in-flight", "2,-1"], "--in-flight 2,-1: no value below 0"),
                        (["--prefetch", "2,y"], "--prefetch 2,y: whole numbers"),
                        (["--prefetch", "-1"], "--prefetch -1: no value below 0")):
        done = subprocess.run([sys.executable, str(SCRIPT), "--length", "16", *flags],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_packed_batches_train_through_the_program_compiled_for_them():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--archs", "tiny", "--tokens", "256",
         "--length", "16", "--steps", "2", "--warmup", "1", "--packed", "4", "--no-reference",
         "--precision", "float32", "--in-flight", "0,2", "--prefetch", "2,0"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("B x 16 tokens a side, packed 4 pairs a row; batches placed on the device 2 ahead;"
            in done.stdout)
    (row,) = json.loads(done.stdout.splitlines()[-1].removeprefix("RESULT "))["rows"]
    # compile seconds and tok/s measured (a failed worker leaves None), no reference run
    assert (row["arch"], row["tokens"]) == ("tiny", 256)
    assert row["compile_seconds"] > 0 and row["vtx_tok_s"] > 0 and row["torch_tok_s"] is None
    # the same updates again, each read while the next is launched (vtx train's loop), and
    # each batch placed on the training thread as its update starts
    assert list(row["in_flight"]) == ["2"] and row["in_flight"]["2"] > 0
    assert list(row["prefetch"]) == ["0"] and row["prefetch"]["0"] > 0


def test_each_in_flight_timing_is_said_as_it_ran():
    """0 launches every update, then reads them: not "at most 0 updates in flight"."""
    assert gpu_train.in_flight_said(0) == "all launched, then read"
    assert gpu_train.in_flight_said(1) == "at most 1 update in flight"
    assert gpu_train.in_flight_said(2) == "at most 2 updates in flight"
