"""`benchmarks/gpu_session.sh` without running a part: PARTS, nvidia-smi's sampler, the archive."""

import csv
import datetime
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_session.sh"

# Answers the session's queries; the sampler (`-l 2`) writes its pid, then a sample every 0.1 s;
# the name query waits for that pid (the session starts the sampler first), so that the test
# knows the sampler whatever the machine's load.
FAKE_NVIDIA_SMI = """#!/bin/bash
case "$*" in
  *"-l 2"*) echo $$ > "$SAMPLER_PID"
            while true; do echo "2026/11/27 12:00:00.000, 1500, 1980, 600.5, 60, 97"; sleep 0.1
            done ;;
  *) for _ in $(seq 600); do [ -s "$SAMPLER_PID" ] && break; sleep 0.1; done  # sampler first
     echo "NVIDIA H200, 143771 MiB, 570.00" ;;
esac
"""


def running(stat: Path) -> bool:
    """Whether the process of /proc/PID/stat runs: a killed one whose parent has not reaped it
    yet (a zombie, state Z; pid 1 of some containers never does) has ended."""
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def run_session(tmp_path, budget: int, parts: str | None = None) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RUN": str(tmp_path / "run"), "SAMPLER_PID": str(tmp_path / "sampler.pid")}
    env.pop("PARTS", None)
    if parts is not None:
        env["PARTS"] = parts
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path), str(budget)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_default_parts_are_the_headers_in_its_order_and_the_logs_end_in_one_archive(tmp_path):
    done = run_session(tmp_path, budget=0)  # every part skipped: nothing is trained
    assert done.returncode == 0, done.stderr
    header = " ".join(line.lstrip("# ") for line in
                      SCRIPT.read_text().split("\nset -uo pipefail")[0].splitlines())
    documented = re.search(r'PARTS picks the parts and their order \(default "([^"]+)"',
                           header).group(1).split()
    rows = list(csv.DictReader((tmp_path / "out" / "gpu_session_seconds.csv").open()))
    assert {row["exit"] for row in rows} == {"skipped"}
    skipped = [row["part"] for row in rows]
    assert [name.split("_")[0] for name in skipped] == [
        part for part in documented for _ in range(2 if part in ("autotune", "nojit") else 1)]
    assert "gpu: NVIDIA H200, 143771 MiB, 570.00" in done.stdout
    sampler = Path(f"/proc/{int((tmp_path / 'sampler.pid').read_text())}/stat")
    for _ in range(50):  # killed as the session ends (kill does not wait)
        if not running(sampler):
            break
        time.sleep(0.1)
    assert not running(sampler), "nvidia-smi's sampler outlived the session"
    out = tmp_path / "out"
    with tarfile.open(out / "gpu_session_logs.tar.gz") as archive:
        assert archive.getnames() == ["gpu_clocks.csv"]  # no part ran: only the samples
    assert sorted(path.name for path in out.iterdir()) == [
        "gpu_session_logs.tar.gz", "gpu_session_seconds.csv", "gpu_session_summary.txt"]


def test_an_unknown_part_is_refused_before_anything_runs(tmp_path):
    done = run_session(tmp_path, budget=600, parts="synthetic bogus")
    assert done.returncode == 2 and "PARTS: unknown part bogus" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# A part that runs until it is stopped: python3 as the session finds it on PATH.
FAKE_PYTHON = """#!/bin/bash
echo $$ > "$PART_PID"
while true; do sleep 0.1; done
"""


def test_a_session_stopped_by_hand_stops_the_part_under_way(tmp_path):
    """timeout runs each part in a process group of its own, out of reach of a Ctrl-C or a kill
    of the session: the session passes the signal on, and its part does not run on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("python3", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    part_pid = tmp_path / "part.pid"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RUN": str(tmp_path / "run"), "SAMPLER_PID": str(tmp_path / "sampler.pid"),
           "PART_PID": str(part_pid), "PARTS": "synthetic"}
    session = subprocess.Popen(["bash", str(SCRIPT), str(tmp_path), "600"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if part_pid.exists() and part_pid.read_text().strip():
                break
            time.sleep(0.1)
        part = Path(f"/proc/{int(part_pid.read_text())}/stat")
        session.terminate()
        _, stderr = session.communicate(timeout=60)
        assert session.returncode == 130 and "stopped by a signal" in stderr, stderr
        for _ in range(50):
            if not running(part):
                break
            time.sleep(0.1)
        assert not running(part), "the part ran on after its session was stopped"
    finally:
        session.kill()
        if part_pid.exists() and running(Path(f"/proc/{int(part_pid.read_text())}/stat")):
            os.kill(int(part_pid.read_text()), 9)


# translate_speed.py as the ct2 part runs it: its arguments kept, its summary lines printed;
# `-c "import ctranslate2"` answers $CT2_IMPORT (0: importable).
FAKE_TRANSLATE_SPEED = """#!/bin/bash
if [ "$1" = -c ]; then exit "${CT2_IMPORT:-0}"; fi
echo "$@" > "$ARGS"
echo "tiny.npz: 231424 parameters; 1000 lines of test.en"
echo "devices: TensorFlow (vtx) sees /device:CPU:0, /device:GPU:0; CTranslate2 on cuda"
echo "vtx          call 2 (steady state):   38.00 s"
echo "compute types skipped, cuda lacks them: bfloat16 (it has float16, float32)"
echo "| compute_type | batch_type | max_batch_size | steady call |"
echo "| float16 | tokens | 8192 | 0.50 s |"
echo "fastest CTranslate2 setting: float16, batch_type tokens, max_batch_size 8192: 0.50 s"
echo "steady call seconds: vtx 38.00, CTranslate2 0.50"
echo "vtx / CTranslate2 at its fastest (sentences/s): 0.01; CTranslate2 is 76.00x faster"
"""


def test_ct2_runs_translate_speed_against_ctranslate2_on_the_checkpoint(tmp_path):
    """CHECKPOINT (else pipeline's newest) and 1000 lines of DATA_DIR/test.en, the rows to
    $OUT/decoding_vs_ct2.csv; the sweep's table, its fastest setting and vtx against it reach
    the summary; without ctranslate2 the part is skipped, saying so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("python3", FAKE_TRANSLATE_SPEED)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "test.en").write_text("A dog.\n")
    (tmp_path / "model.npz").write_bytes(b"")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RUN": str(tmp_path / "run"), "SAMPLER_PID": str(tmp_path / "sampler.pid"),
           "ARGS": str(tmp_path / "args"), "PARTS": "ct2",
           "CHECKPOINT": str(tmp_path / "model.npz"), "DECODE_FLAGS": "--threads 4"}
    run = lambda **more: subprocess.run(["bash", str(SCRIPT), str(tmp_path), "600"],
                                        env={**env, **more}, capture_output=True, text=True,
                                        timeout=60)
    done = run()
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split()
    assert args[0].endswith("benchmarks/translate_speed.py") and "--ctranslate2" in args
    assert args[args.index("--checkpoint") + 1] == str(tmp_path / "model.npz")
    assert args[args.index("--input") + 1] == str(tmp_path / "test.en")
    assert args[args.index("--limit") + 1] == "1000" and args[-2:] == ["--threads", "4"]
    assert args[args.index("--csv") + 1] == str(tmp_path / "out" / "decoding_vs_ct2.csv")
    summary = (tmp_path / "out" / "gpu_session_summary.txt").read_text()
    for line in FAKE_TRANSLATE_SPEED.splitlines()[3:]:
        assert line.removeprefix('echo "').removesuffix('"') in summary, line
    skipped = run(CT2_IMPORT="1")
    assert "== ct2: skipped, no ctranslate2" in skipped.stdout
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint_00000100.npz").write_bytes(b"")
    run(CHECKPOINT="")
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--checkpoint") + 1] == str(tmp_path / "run" /
                                                        "checkpoint_00000100.npz")


# gpu_replicas.py as the replicas8 part runs it: its arguments kept, its lines printed.
FAKE_GPU_REPLICAS = """#!/bin/bash
echo "$@" > "$ARGS"
echo "device: gpu (NVIDIA H200) split into 8 logical devices of 15963 MiB; base"
echo "  [8 replicas] compiled the update for batch shape 1/1 (128x64) in 80.0 s"
echo "  [8 replicas] trained in 120.0 s"
echo "8 replicas                       400000 tok/s"
echo "1 replica                        300000 tok/s; 8 replicas / 1 replica = 1.33"
echo "first update's loss: 9.1 (8 replicas), 9.1 (1 replica x 8 micro-batches)"
echo "weights: max |8 replicas - 1 replica x 8 micro-batches| = 0.0001: agree"
"""


def test_replicas8_runs_gpu_replicas_on_base_and_sums_up_its_rates_and_weights(tmp_path):
    """base at 8192 tokens with its XLA cache in $RUN.replicas8_xla, GPU_TRAIN_FLAGS last; the
    device, compile, tok/s and weights lines reach the summary, the progress lines do not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("python3", FAKE_GPU_REPLICAS)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RUN": str(tmp_path / "run"), "SAMPLER_PID": str(tmp_path / "sampler.pid"),
           "ARGS": str(tmp_path / "args"), "PARTS": "replicas8",
           "GPU_TRAIN_FLAGS": "--steps 3"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "600"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split()
    assert args[0].endswith("benchmarks/gpu_replicas.py") and args[-2:] == ["--steps", "3"]
    assert args[args.index("--archs") + 1] == "base" and "--tokens" in args
    assert args[args.index("--xla-cache-dir") + 1] == f"{tmp_path / 'run'}.replicas8_xla"
    summary = (tmp_path / "out" / "gpu_session_summary.txt").read_text()
    for line in ("split into 8 logical devices", "compiled the update for batch shape",
                 "1 replica                        300000 tok/s; 8 replicas / 1 replica = 1.33",
                 "first update's loss", "1 replica x 8 micro-batches| = 0.0001: agree"):
        assert line in summary, summary
    assert "trained in" not in summary and "== replicas8: exit 0" in summary


def test_a_part_starts_only_when_the_seconds_it_last_took_are_left_and_its_seconds_are_kept(
        tmp_path):
    """The newest finished run of a part in the seconds' file sets what it needs (a run that
    ran out of time does not count); each part run adds its row to $OUT's file."""
    measured = tmp_path / "seconds.csv"
    measured.write_text("part,seconds,exit,gpu,date\nsynthetic,900,0,NVIDIA H200,2026-12-01\n"
                        "synthetic,500,0,NVIDIA H200,2026-12-04\n"
                        "big,5000,124,NVIDIA H200,2026-12-04\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "python3").write_text("#!/bin/bash\nexit 0\n")
    for name in ("nvidia-smi", "python3"):
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RUN": str(tmp_path / "run"), "SAMPLER_PID": str(tmp_path / "sampler.pid"),
           "GPU_SESSION_SECONDS": str(measured), "PARTS": "synthetic big"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "400"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("== synthetic: ")]
    assert len(said) == 1 and said[0].endswith(" s left (needs about 500)"), done.stdout
    rows = list(csv.DictReader((tmp_path / "out" / "gpu_session_seconds.csv").open()))
    assert [(row["part"], row["exit"], row["gpu"]) for row in rows] == [
        ("synthetic", "skipped", "NVIDIA H200"), ("big", "0", "NVIDIA H200")]  # big: its 200
    assert int(rows[1]["seconds"]) >= 0 and datetime.date.fromisoformat(rows[1]["date"])
