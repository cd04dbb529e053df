"""The profiler-trace summary behind `gpu_train.py --profile`: what it reads from an
XSpace and the figures it computes from it."""

import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import xplane_summary  # noqa: E402
from xplane_summary import Event  # noqa: E402


def test_busy_time_counts_overlapping_intervals_once():
    events = [Event("a", 0, 10), Event("b", 5, 10), Event("c", 20, 5), Event("d", 21, 2)]
    assert xplane_summary.busy_ps(events) == 20


@pytest.mark.parametrize("name, kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matrix products"),
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT", "matrix products"),
    ("gemm_fusion_dot_12", "matrix products"),
    ("_MklMatMul", "matrix products"),
    ("StatelessRandomUniformV2", "random numbers"),
    ("MemcpyH2D", "copies and transposes"),
    ("input_reduce_fusion_3", "reductions"),
    ("loop_multiply_fusion", "element-wise fusions"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collectives"),
    ("redzone_checker", "other")])
def test_kernel_names_fall_into_their_kind(name, kind):
    assert xplane_summary.kind_of(name) == kind


def _plane(space, name, lines):
    """Add a plane whose `lines` are {line name: [(event name, offset ps, duration ps)]}."""
    plane = space.planes.add(name=name)
    ids = {}
    for line_name, events in lines.items():
        line = plane.lines.add(name=line_name, timestamp_ns=1000)
        for event_name, offset, duration in events:
            if event_name not in ids:
                ids[event_name] = len(ids) + 1
                plane.event_metadata[ids[event_name]].name = event_name
            line.events.add(metadata_id=ids[event_name], offset_ps=offset, duration_ps=duration)


def test_a_gpu_trace_is_summarised_from_its_stream_lines_per_update():
    space = xplane_pb2.XSpace()
    _plane(space, "/host:CPU", {"tf_Compute/1": [("x:MatMul", 0, 10**12)]})
    _plane(space, "/device:GPU:0", {
        # Two updates: a gemm and a fusion each, a copy overlapping on a second stream.
        "Stream #7(Compute)": [("sm90_xmma_gemm", 0, 6_000_000_000),
                               ("loop_add_fusion", 6_000_000_000, 2_000_000_000),
                               ("sm90_xmma_gemm", 10_000_000_000, 6_000_000_000),
                               ("loop_add_fusion", 16_000_000_000, 2_000_000_000)],
        "Stream #9(MemcpyH2D)": [("MemcpyH2D", 1_000_000_000, 2_000_000_000)],
        # A line the profiler derives from the streams: never counted again.
        "XLA Ops": [("fusion.1", 0, 18_000_000_000)]})
    where, events = xplane_summary.read_events(space)
    assert where == "/device:GPU:0" and len(events) == 5
    summary = xplane_summary.summarize(events, updates=2)
    assert summary["span_ms"] == pytest.approx(9.0)  # 0 .. 18 ms over 2 updates
    assert summary["busy_ms"] == pytest.approx(8.0)  # the copy overlaps the first gemm
    assert summary["kernel_ms"] == pytest.approx(9.0)
    assert summary["kinds"] == [("matrix products", pytest.approx(6.0), pytest.approx(6 / 9)),
                                ("element-wise fusions", pytest.approx(2.0), pytest.approx(2 / 9)),
                                ("copies and transposes", pytest.approx(1.0), pytest.approx(1 / 9))]
    assert summary["top"][0] == ("sm90_xmma_gemm", pytest.approx(6.0), 1.0)
    text = xplane_summary.format_summary(where, summary, 2)
    assert "busy 8.0 ms (89%; idle 1.0 ms)" in text


def test_a_gpu_trace_says_what_the_host_called_meanwhile():
    space = xplane_pb2.XSpace()
    _plane(space, "/device:GPU:0", {"Stream #7(Compute)": [("sm90_xmma_gemm", 0, 10**9)]})
    _plane(space, "/host:CUPTI", {"thread 1": [("cuLaunchKernel", i * 10**6, 10**6)
                                               for i in range(6)]
                                  + [("cuMemcpyDtoDAsync", 10**8, 4 * 10**6)]})
    _plane(space, "/host:CPU", {"tf_Compute/1": [("XlaRun", 0, 9 * 10**6)]})
    calls = xplane_summary.host_calls(space, updates=2)
    assert calls == [("/host:CPU", "XlaRun", pytest.approx(0.0045), 0.5),
                     ("/host:CUPTI", "cuLaunchKernel", pytest.approx(0.003), 3.0),
                     ("/host:CUPTI", "cuMemcpyDtoDAsync", pytest.approx(0.002), 0.5)]
    assert "cuLaunchKernel" in xplane_summary.format_events("host", calls)
    cpu_only = xplane_pb2.XSpace()
    _plane(cpu_only, "/host:CPU", {"tf_Compute/1": [("x:MatMul", 0, 10**9)]})
    assert xplane_summary.host_calls(cpu_only) == []


def test_a_real_cpu_trace_names_its_matrix_products(tmp_path):
    weights = tf.random.normal((256, 256))

    @tf.function
    def work(x):
        for _ in range(4):
            x = tf.nn.relu(tf.matmul(x, weights))
        return tf.reduce_sum(x)

    inputs = tf.random.normal((128, 256))
    work(inputs)  # traced outside the profile
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(2):
        work(inputs).numpy()
    tf.profiler.experimental.stop()
    where, events = xplane_summary.load_trace(tmp_path)
    summary = xplane_summary.summarize(events, updates=2)
    assert where == "/host:CPU"
    kinds = {kind: ms for kind, ms, _ in summary["kinds"]}
    assert kinds["matrix products"] > 0, summary
    assert 0 < summary["busy_ms"] <= summary["span_ms"]
    assert "on /host:CPU" in xplane_summary.summarize_directory(tmp_path, updates=2)


def test_a_directory_without_a_trace_is_named_in_the_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        xplane_summary.find_trace(tmp_path)


def test_gpu_train_profiles_its_updates_on_the_cpu(tmp_path):
    """The script the next GPU session runs, end to end on the CPU with the tiny model."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_train.py"
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--archs", "tiny", "--tokens", "256",
         "--length", "16", "--steps", "2", "--warmup", "1", "--no-jit", "--precision", "float32",
         "--no-reference", "--profile", str(tmp_path), "--profile-steps", "2"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "profile of 2 update(s) on /host:CPU" in done.stdout, done.stdout
    # The timing is printed before the trace is taken (a time limit may cut the trace short).
    timed = done.stdout.index("vtx tiny 256: timed: compiled in ")
    assert timed < done.stdout.index("profile of 2 update(s)"), done.stdout
    assert "matrix products" in done.stdout
    assert list(tmp_path.glob("tiny_256/**/*.xplane.pb"))
